-- $1 relay id, $2 time to live in seconds, $3 lease token. An expired
-- lease is lost even if nobody took it.
UPDATE outbox_partitions
SET lease_expires_at = now() + make_interval(secs => $2)
WHERE partition_no = -1
  AND lease_owner = $1
  AND lease_token = $3
  AND lease_expires_at > now()
RETURNING lease_token
