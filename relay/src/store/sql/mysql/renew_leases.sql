-- ? JSON array of leases held, ? time to live in microseconds, ? relay id.
-- An expired lease is not renewed even if nobody took it: it is lost, and
-- reacquiring it bumps the token. MariaDB has no UPDATE ... RETURNING:
-- select_leases_held.sql reads the result in the same transaction.
UPDATE outbox_partitions AS p
JOIN JSON_TABLE(?, '$[*]' COLUMNS (
    partition_no INT PATH '$.partition_no',
    lease_token BIGINT PATH '$.lease_token'
)) AS held ON p.partition_no = held.partition_no AND p.lease_token = held.lease_token
SET p.lease_expires_at = DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
WHERE p.lease_owner = ?
  AND p.lease_expires_at > UTC_TIMESTAMP(6)
