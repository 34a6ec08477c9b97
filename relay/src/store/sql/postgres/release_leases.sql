-- $1 relay id, $2 JSON array of leases to give up.
UPDATE outbox_partitions AS p
SET lease_owner = NULL, lease_expires_at = NULL
FROM jsonb_to_recordset($2::jsonb) AS held (partition_no integer, lease_token bigint)
WHERE p.partition_no = held.partition_no
  AND p.lease_token = held.lease_token
  AND p.lease_owner = $1
