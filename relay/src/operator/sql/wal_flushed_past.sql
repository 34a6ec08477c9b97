-- $1 a WAL position: whether the WAL is flushed up to it, so that a peek
-- at the slot, which reads up to the flushed position, reaches it.
SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn
