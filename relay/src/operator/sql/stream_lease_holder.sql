-- Who holds the stream's lease (row -1 of outbox_partitions) and until
-- when, when a live relay holds it.
SELECT lease_owner, lease_expires_at
FROM outbox_partitions
WHERE partition_no = -1
  AND lease_owner IS NOT NULL
  AND lease_expires_at > now()
