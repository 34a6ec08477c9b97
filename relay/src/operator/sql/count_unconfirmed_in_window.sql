-- Follows usable_checkpoint.sql. $1 slot, $2 topic, $3 created at or
-- after, $4 created before. The streamed events of the window that
-- fetch_replayable.sql cannot judge acknowledged yet: stream-owned and not
-- older than the usable checkpoint, or in a slot's backlog still to hand
-- over. A replay leaves them out.
SELECT COUNT(*)
FROM outbox_events AS e
WHERE e.topic = $2
  AND e.created_at >= $3
  AND e.created_at < $4
  AND e.state = 'pending'
  AND e.attempts = 0
  AND e.last_error IS NULL
  AND (NOT EXISTS (
      SELECT 1 FROM usable AS u
      WHERE e.id <= u.max_id AND age(e.xmin) > age(u.snapshot_xmin))
    OR EXISTS (
      SELECT 1 FROM outbox_slot_backlogs AS b
      WHERE b.finished_at IS NULL
        AND e.id > b.handed_after_id
        AND (b.bound_at IS NULL OR e.id <= b.bound_id)))
