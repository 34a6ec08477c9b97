-- $1 relay id, $2 lease token.
UPDATE outbox_partitions
SET lease_owner = NULL, lease_expires_at = NULL
WHERE partition_no = -1 AND lease_owner = $1 AND lease_token = $2
