-- The stream's lease: a dedicated row of the lease table, outside the
-- partition numbers (0 and up) that polling relays lease.
INSERT INTO outbox_partitions (partition_no) VALUES (-1) ON CONFLICT (partition_no) DO NOTHING
