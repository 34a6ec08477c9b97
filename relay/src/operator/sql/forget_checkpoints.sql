-- $1 retention in seconds, $2 slot name. Checkpoints older than the newest
-- usable one (see delete_streamed.sql) serve no more.
DELETE FROM outbox_stream_checkpoints
WHERE taken_at < (
    SELECT MAX(taken_at) FROM outbox_stream_checkpoints
    WHERE taken_at < now() - make_interval(secs => $1)
      AND wal_position <= (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $2)
)
