-- ? partition count, ? JSON array of leases, ? error, ? 1 to move the event
-- to dead, ? microseconds until the retry, ? event id, ? relay id.
UPDATE outbox_events AS e
JOIN outbox_partitions AS p ON p.partition_no = e.partition_key % ?
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    partition_no INT PATH '$.partition_no',
    lease_token BIGINT PATH '$.lease_token'
)) AS held ON p.partition_no = held.partition_no AND p.lease_token = held.lease_token
SET e.attempts = e.attempts + 1,
    e.last_error = ?,
    e.state = IF(?, 'dead', 'pending'),
    e.next_attempt_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
WHERE e.id = ?
  AND e.state = 'pending'
  AND p.lease_owner = ?
  AND p.lease_expires_at > UTC_TIMESTAMP(6)
