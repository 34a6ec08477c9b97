-- $1 relay id, $2 time to live in seconds. Takes the stream's lease when it
-- is free or expired, bumping its fencing token; concurrent callers are
-- serialized on the row, and only one finds it free.
UPDATE outbox_partitions
SET lease_owner = $1,
    lease_token = lease_token + 1,
    lease_expires_at = now() + make_interval(secs => $2)
WHERE partition_no = -1
  AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= now())
RETURNING lease_token
