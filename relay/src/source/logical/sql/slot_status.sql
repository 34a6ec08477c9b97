-- $1 slot name: where the slot stands. lag_bytes: WAL written after the
-- confirmed position (not yet acknowledged); retained_bytes: WAL the slot
-- keeps on disk (from its restart position).
SELECT slot_name::text AS slot_name,
       confirmed_flush_lsn::text AS confirmed_flush_lsn,
       (confirmed_flush_lsn - '0/0'::pg_lsn)::text AS confirmed_position,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint AS lag_bytes,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint AS retained_bytes,
       active,
       COALESCE(wal_status, '') AS wal_status
FROM pg_replication_slots
WHERE slot_name = $1
