-- The relay's slots in this database: pgoutput slots streaming a
-- publication of their own name, as slot_status.sql describes each.
SELECT s.slot_name::text AS slot_name,
       s.confirmed_flush_lsn::text AS confirmed_flush_lsn,
       (s.confirmed_flush_lsn - '0/0'::pg_lsn)::text AS confirmed_position,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint AS lag_bytes,
       COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint AS retained_bytes,
       s.active,
       COALESCE(s.wal_status, '') AS wal_status
FROM pg_replication_slots AS s
JOIN pg_publication AS p ON p.pubname = s.slot_name
WHERE s.database = current_database()
  AND s.plugin = 'pgoutput'
ORDER BY s.slot_name
