-- ? partition count, ? JSON array of leases, ? JSON array of event ids,
-- ? relay id. Fenced: a row is marked only while its partition's lease is
-- one of ours.
UPDATE outbox_events AS e
JOIN outbox_partitions AS p ON p.partition_no = e.partition_key % ?
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    partition_no INT PATH '$.partition_no',
    lease_token BIGINT PATH '$.lease_token'
)) AS held ON p.partition_no = held.partition_no AND p.lease_token = held.lease_token
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS marked ON e.id = marked.id
SET e.state = 'published', e.published_at = UTC_TIMESTAMP(6), e.next_attempt_at = NULL
WHERE e.state = 'pending'
  AND p.lease_owner = ?
  AND p.lease_expires_at > UTC_TIMESTAMP(6)
