-- ? how many partitions to take. SKIP LOCKED: concurrent relays each lock
-- different free partitions; the locks hold until the transaction ends.
SELECT partition_no FROM outbox_partitions
WHERE lease_owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= UTC_TIMESTAMP(6)
ORDER BY partition_no
LIMIT ?
FOR UPDATE SKIP LOCKED
