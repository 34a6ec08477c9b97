-- ?1 relay id, ?2 time to live in seconds, ?3 how many partitions to take.
-- SQLite has one writer at a time, so this single statement needs no row
-- locks: no other relay can take the same partition in between.
UPDATE outbox_partitions
SET lease_owner = ?1,
    lease_token = lease_token + 1,
    lease_expires_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?2))
WHERE partition_no IN (
    SELECT partition_no FROM outbox_partitions
    WHERE lease_owner IS NULL OR lease_expires_at IS NULL
       OR lease_expires_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
    ORDER BY partition_no
    LIMIT ?3
)
RETURNING partition_no, lease_token
