-- $1 seconds between two checkpoints. A point every transaction that has
-- finished is behind (the insert position), the oldest transaction still
-- running (the snapshot's xmin) and the highest id committed so far.
INSERT INTO outbox_stream_checkpoints (wal_position, snapshot_xmin, max_id)
SELECT pg_current_wal_insert_lsn(),
       pg_snapshot_xmin(pg_current_snapshot()),
       COALESCE((SELECT MAX(id) FROM outbox_events), 0)
WHERE NOT EXISTS (
    SELECT 1 FROM outbox_stream_checkpoints
    WHERE taken_at > now() - make_interval(secs => $1)
)
