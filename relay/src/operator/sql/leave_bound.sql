-- What leave-logical may mark published: events of transactions that had
-- finished when this runs (older than the oldest one running), up to the
-- highest id committed so far; and the WAL insert position, past every
-- commit record of those transactions, which the peek must reach.
SELECT pg_current_wal_insert_lsn()::text AS wal_position,
       pg_snapshot_xmin(pg_current_snapshot())::text AS snapshot_xmin,
       COALESCE((SELECT MAX(id) FROM outbox_events), 0) AS max_id
