SELECT COUNT(*)::integer FROM outbox_partitions
