-- Follows stream_lease_fence.sql.
-- $1 relay id, $2 stream lease token, $3 event ids, $4 note. Hands streamed
-- events of parked aggregates to the table path: `last_error` marks them,
-- no attempt is used. A row the table path already owns (failed or held
-- before, streamed again after a restart) or no longer pending is left as
-- it is. Fenced by the stream's lease: `lease_held` is 0 when it is lost,
-- and then nothing is written.
, held AS (
    UPDATE outbox_events AS e
    SET last_error = $4
    WHERE e.id = ANY($3::bigint[])
      AND e.state = 'pending'
      AND e.attempts = 0
      AND e.last_error IS NULL
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING e.id
)
SELECT (SELECT COUNT(*) FROM lease) AS lease_held, (SELECT COUNT(*) FROM held) AS held
