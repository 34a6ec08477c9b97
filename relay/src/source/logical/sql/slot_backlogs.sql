-- The backlog still to publish of each slot: `not_handed_over`, the
-- pending, untouched events of an unfinished backlog not yet handed to the
-- table path (an unbound one, being created, counts up to the highest id);
-- `handed`, the handed-over events the table path has not published; and
-- the oldest of both. $1: the notes of handed-over events.
WITH untaken AS (
    SELECT b.slot_name, u.events, u.oldest_at
    FROM outbox_slot_backlogs AS b
    CROSS JOIN LATERAL (
        SELECT COUNT(*) AS events, MIN(e.created_at) AS oldest_at
        FROM outbox_events AS e
        WHERE e.id > b.handed_after_id
          AND e.id <= CASE WHEN b.bound_at IS NULL THEN 9223372036854775807 ELSE b.bound_id END
          AND e.state = 'pending'
          AND e.attempts = 0
          AND e.last_error IS NULL
          AND (b.since IS NULL OR e.created_at >= b.since)
    ) AS u
    WHERE b.finished_at IS NULL
),
handed AS (
    SELECT COUNT(*) AS events, MIN(created_at) AS oldest_at
    FROM outbox_events
    WHERE state = 'pending'
      AND last_error = ANY($1::text[])
)
SELECT b.slot_name,
       COALESCE(u.events, 0) AS not_handed_over,
       h.events AS handed,
       LEAST(u.oldest_at, h.oldest_at) AS oldest_at
FROM outbox_slot_backlogs AS b
LEFT JOIN untaken AS u ON u.slot_name = b.slot_name
CROSS JOIN handed AS h
WHERE b.finished_at IS NULL OR h.events > 0
ORDER BY b.slot_name
