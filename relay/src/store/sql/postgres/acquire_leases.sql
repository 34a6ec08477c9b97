-- $1 relay id, $2 time to live in seconds, $3 how many partitions to take.
-- SKIP LOCKED: concurrent relays each take different free partitions.
-- Row -1 is the logical stream's lease, never a partition.
UPDATE outbox_partitions AS p
SET lease_owner = $1,
    lease_token = p.lease_token + 1,
    lease_expires_at = now() + make_interval(secs => $2)
WHERE p.partition_no IN (
    SELECT partition_no FROM outbox_partitions
    WHERE partition_no >= 0
      AND (lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= now())
    ORDER BY partition_no
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
RETURNING p.partition_no, p.lease_token
