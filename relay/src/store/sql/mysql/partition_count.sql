SELECT COUNT(*) FROM outbox_partitions
