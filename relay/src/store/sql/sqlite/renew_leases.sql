-- ?1 relay id, ?2 time to live in seconds, ?3 JSON array of leases held.
-- An expired lease is not renewed even if nobody took it: it is lost, and
-- reacquiring it bumps the token.
UPDATE outbox_partitions
SET lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?2))
WHERE lease_owner = ?1
  AND lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  AND EXISTS (
      SELECT 1 FROM json_each(?3) AS held
      WHERE held.value ->> '$.partition_no' = outbox_partitions.partition_no
        AND held.value ->> '$.lease_token' = outbox_partitions.lease_token
  )
RETURNING partition_no, lease_token
