-- ? JSON array of leases to give up, ? relay id.
UPDATE outbox_partitions AS p
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    partition_no INT PATH '$.partition_no',
    lease_token BIGINT PATH '$.lease_token'
)) AS held ON p.partition_no = held.partition_no AND p.lease_token = held.lease_token
SET p.lease_owner = NULL, p.lease_expires_at = NULL
WHERE p.lease_owner = ?
