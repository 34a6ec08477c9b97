-- $1 retention in seconds, $2 slot name, $3 batch size. Streamed events
-- published without a write (still `pending`, no attempt, no note) whose
-- transaction finished before the newest checkpoint that is older than the
-- retention and that the slot has confirmed: every event of such a
-- transaction was settled, and the failed or held ones carry an attempt or
-- a note, so only published ones match. age() compares transaction ids
-- across wraparound; a row too old to compare is kept. A slot's backlog
-- not yet handed to the table path was never streamed: it is kept.
WITH usable AS (
    SELECT snapshot_xmin::xid AS snapshot_xmin, max_id
    FROM outbox_stream_checkpoints
    WHERE taken_at < now() - make_interval(secs => $1)
      AND wal_position <= (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $2)
    ORDER BY taken_at DESC
    LIMIT 1
)
DELETE FROM outbox_events
WHERE id IN (
    SELECT e.id
    FROM outbox_events AS e, usable AS u
    WHERE e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
      AND e.id <= u.max_id
      AND age(e.xmin) > age(u.snapshot_xmin)
      AND NOT EXISTS (
          SELECT 1 FROM outbox_slot_backlogs AS b
          WHERE b.finished_at IS NULL
            AND e.id > b.handed_after_id
            AND (b.bound_at IS NULL OR e.id <= b.bound_id))
    ORDER BY e.id
    LIMIT $3
)
