-- $1 relay id, $2 time to live in seconds, $3 JSON array of leases held.
-- An expired lease is not renewed even if nobody took it: it is lost, and
-- reacquiring it bumps the token.
UPDATE outbox_partitions AS p
SET lease_expires_at = now() + make_interval(secs => $2)
FROM jsonb_to_recordset($3::jsonb) AS held (partition_no integer, lease_token bigint)
WHERE p.partition_no = held.partition_no
  AND p.lease_token = held.lease_token
  AND p.lease_owner = $1
  AND p.lease_expires_at > now()
RETURNING p.partition_no, p.lease_token
