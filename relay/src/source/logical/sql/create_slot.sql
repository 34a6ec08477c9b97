-- $1 slot name. The slot starts at the current end of the WAL: events
-- committed before it exists are the polling relay's.
SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')
