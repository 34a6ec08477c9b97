-- Follows stream_lease_fence.sql.
-- $1 relay id, $2 stream lease token, $3 since, $4 until, $5 the last id
-- handed over (0 at first), $6 batch size, $7 note. `recover-slot`: hands to
-- the table path, in id order and one batch at a time, the events created
-- in [since, until) that only the stream could have published (pending, no
-- attempt, no note): `last_error` marks them as a hold does, no attempt is
-- used, and the relays then publish them from the table, each aggregate in
-- id order and before its newer streamed events. Fenced by the stream's
-- lease: `lease_held` is 0 when it is lost, and then nothing is written.
-- `last_id` is the highest id this batch looked at (NULL once none is left).
, batch AS (
    SELECT id
    FROM outbox_events
    WHERE state = 'pending'
      AND id > $5
      AND attempts = 0
      AND last_error IS NULL
      AND created_at >= $3
      AND created_at < $4
    ORDER BY id
    LIMIT $6
),
handed AS (
    UPDATE outbox_events AS e
    SET last_error = $7
    FROM batch
    WHERE e.id = batch.id
      AND e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING e.id
)
SELECT (SELECT COUNT(*) FROM lease) AS lease_held,
       (SELECT COUNT(*) FROM handed) AS handed,
       (SELECT MAX(id) FROM batch) AS last_id
