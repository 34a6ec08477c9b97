-- ? partition count, ? JSON array of leases, ? JSON array of event ids,
-- ? relay id. The mark of `retention.published = "0s"`: acknowledged rows
-- are deleted instead of marked, fenced as the mark is: a row is deleted
-- only while its partition's lease is one of ours.
DELETE e FROM outbox_events AS e
JOIN outbox_partitions AS p ON p.partition_no = e.partition_key % ?
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    partition_no INT PATH '$.partition_no',
    lease_token BIGINT PATH '$.lease_token'
)) AS held ON p.partition_no = held.partition_no AND p.lease_token = held.lease_token
JOIN JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS acknowledged ON e.id = acknowledged.id
WHERE e.state = 'pending'
  AND p.lease_owner = ?
  AND p.lease_expires_at > UTC_TIMESTAMP(6)
