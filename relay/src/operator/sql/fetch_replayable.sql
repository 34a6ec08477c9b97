-- Follows usable_checkpoint.sql. One page of `outbox-relay replay --source
-- logical`: $1 slot, $2 topic, $3 created at or after, $4 created before,
-- $5 after this id, $6 page size. The published rows, as for polling, and
-- the streamed events the broker acknowledged, whose rows stay pending:
-- stream-owned and of a transaction older than the usable checkpoint, and
-- not in a slot's backlog still to hand over (never streamed).
-- Reads only.
SELECT e.id, e.event_id::text AS event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
       e.topic, e.payload::text AS payload, e.headers::text AS headers, e.created_at, e.attempts
FROM outbox_events AS e
WHERE e.topic = $2
  AND e.created_at >= $3
  AND e.created_at < $4
  AND e.id > $5
  AND (e.state = 'published'
       OR (e.state = 'pending'
           AND e.attempts = 0
           AND e.last_error IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM outbox_slot_backlogs AS b
               WHERE b.finished_at IS NULL
                 AND e.id > b.handed_after_id
                 AND (b.bound_at IS NULL OR e.id <= b.bound_id))
           AND EXISTS (
               SELECT 1 FROM usable AS u
               WHERE e.id <= u.max_id AND age(e.xmin) > age(u.snapshot_xmin))))
ORDER BY e.id
LIMIT $6
