-- ? JSON array of partition numbers, ? relay id: the live leases among them.
SELECT p.partition_no, p.lease_token
FROM outbox_partitions AS p
JOIN JSON_TABLE(?, '$[*]' COLUMNS (partition_no INT PATH '$')) AS wanted
  ON p.partition_no = wanted.partition_no
WHERE p.lease_owner = ?
  AND p.lease_expires_at > UTC_TIMESTAMP(6)
ORDER BY p.partition_no
