-- $1 topic, $2 created at or after, $3 created before, $4 slot. Streamed
-- events of the window that fetch_replayable.sql cannot yet judge
-- acknowledged: stream-owned and not covered by a retention checkpoint the
-- slot has confirmed. A replay leaves them out.
WITH usable AS (
    SELECT snapshot_xmin::xid AS snapshot_xmin, max_id
    FROM outbox_stream_checkpoints
    WHERE wal_position <= (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $4)
    ORDER BY taken_at DESC
    LIMIT 1
)
SELECT COUNT(*)
FROM outbox_events AS e
WHERE e.topic = $1
  AND e.created_at >= $2
  AND e.created_at < $3
  AND e.state = 'pending'
  AND e.attempts = 0
  AND e.last_error IS NULL
  AND NOT EXISTS (
      SELECT 1 FROM usable AS u
      WHERE e.id <= u.max_id AND age(e.xmin) > age(u.snapshot_xmin))
