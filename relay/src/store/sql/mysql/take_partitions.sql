-- ? relay id, ? time to live in microseconds, ? JSON array of the partitions
-- locked by lock_free_partitions.sql in this transaction.
UPDATE outbox_partitions AS p
JOIN JSON_TABLE(?, '$[*]' COLUMNS (partition_no INT PATH '$')) AS locked
  ON p.partition_no = locked.partition_no
SET p.lease_owner = ?,
    p.lease_token = p.lease_token + 1,
    p.lease_expires_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
