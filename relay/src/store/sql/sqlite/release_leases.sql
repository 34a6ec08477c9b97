-- ?1 relay id, ?2 JSON array of leases to give up.
UPDATE outbox_partitions
SET lease_owner = NULL, lease_expires_at = NULL
WHERE lease_owner = ?1
  AND EXISTS (
      SELECT 1 FROM json_each(?2) AS held
      WHERE held.value ->> '$.partition_no' = outbox_partitions.partition_no
        AND held.value ->> '$.lease_token' = outbox_partitions.lease_token
  )
