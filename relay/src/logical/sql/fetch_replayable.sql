-- One page of `outbox-relay replay --source logical`: $1 topic, $2 created
-- at or after, $3 created before, $4 after this id, $5 page size, $6 slot.
-- The published rows, as for polling, and the streamed events the broker
-- acknowledged, whose rows stay pending: stream-owned (no attempt, no
-- note) and of a transaction that finished before the newest retention
-- checkpoint the slot has confirmed (every event of such a transaction
-- was settled, and a failed or held one carries an attempt or a note).
-- age() compares transaction ids across wraparound. Reads only.
WITH usable AS (
    SELECT snapshot_xmin::xid AS snapshot_xmin, max_id
    FROM outbox_stream_checkpoints
    WHERE wal_position <= (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $6)
    ORDER BY taken_at DESC
    LIMIT 1
)
SELECT e.id, e.event_id::text AS event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
       e.topic, e.payload::text AS payload, e.headers::text AS headers, e.created_at, e.attempts
FROM outbox_events AS e
WHERE e.topic = $1
  AND e.created_at >= $2
  AND e.created_at < $3
  AND e.id > $4
  AND (e.state = 'published'
       OR (e.state = 'pending'
           AND e.attempts = 0
           AND e.last_error IS NULL
           AND EXISTS (
               SELECT 1 FROM usable AS u
               WHERE e.id <= u.max_id AND age(e.xmin) > age(u.snapshot_xmin))))
ORDER BY e.id
LIMIT $5
