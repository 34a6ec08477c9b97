-- Partitions are numbered from 0; the row numbered -1 is the logical
-- stream's lease, not a partition.
SELECT COUNT(*)::integer FROM outbox_partitions WHERE partition_no >= 0
