-- Follows stream_lease_fence.sql.
-- $1 relay id, $2 stream lease token, $3 slot name, $4 batch size, $5 note.
-- Hands the next batch of the slot's bound backlog to the table path, in id
-- order: pending events with no attempt and no note (the stream would
-- have published them, had it seen them), created at or after `since` when
-- set. `last_error` marks them as a hold does; no attempt is used. The
-- progress is saved in the same statement, and a batch shorter than $4
-- finishes the backlog. Fenced by the stream's lease: `lease_held` is 0
-- when it is lost, and then nothing is written. `found` is 0 when there is
-- no bound, unfinished backlog.
, backlog AS (
    SELECT since, bound_id, handed_after_id
    FROM outbox_slot_backlogs
    WHERE slot_name = $3
      AND finished_at IS NULL
      AND bound_at IS NOT NULL
),
batch AS (
    SELECT e.id
    FROM outbox_events AS e, backlog AS b
    WHERE EXISTS (SELECT 1 FROM lease)
      AND e.id > b.handed_after_id
      AND e.id <= b.bound_id
      AND e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
      AND (b.since IS NULL OR e.created_at >= b.since)
    ORDER BY e.id
    LIMIT $4
),
handed AS (
    UPDATE outbox_events AS e
    SET last_error = $5
    FROM batch
    WHERE e.id = batch.id
      AND e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
    RETURNING e.id
),
progress AS (
    UPDATE outbox_slot_backlogs AS b
    SET handed_after_id = CASE
            WHEN (SELECT COUNT(*) FROM batch) < $4 THEN b.bound_id
            ELSE (SELECT MAX(id) FROM batch)
        END,
        handed_over = b.handed_over + (SELECT COUNT(*) FROM handed),
        finished_at = CASE WHEN (SELECT COUNT(*) FROM batch) < $4 THEN now() END
    WHERE b.slot_name = $3
      AND b.finished_at IS NULL
      AND b.bound_at IS NOT NULL
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING b.finished_at IS NOT NULL AS finished
)
SELECT (SELECT COUNT(*) FROM lease) AS lease_held,
       (SELECT COUNT(*) FROM backlog) AS found,
       (SELECT COUNT(*) FROM handed) AS handed,
       COALESCE((SELECT finished FROM progress), false) AS finished
