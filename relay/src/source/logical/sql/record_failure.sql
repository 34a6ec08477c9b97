-- Follows stream_lease_fence.sql.
-- $1 relay id, $2 stream lease token, $3 event id, $4 error, $5 seconds
-- until the retry, NULL to move the event to dead. The same bookkeeping as
-- the polling relay's, fenced by the stream's lease: `lease_held` is 0
-- when it is lost, and then nothing is written. A row no longer pending
-- (published or dead before a restart streamed it again) is left as it is.
, updated AS (
    UPDATE outbox_events AS e
    SET attempts = e.attempts + 1,
        last_error = $4,
        state = CASE WHEN $5::double precision IS NULL THEN 'dead' ELSE 'pending' END,
        next_attempt_at = CASE WHEN $5::double precision IS NULL THEN NULL
                               ELSE now() + make_interval(secs => $5::double precision) END
    WHERE e.id = $3
      AND e.state = 'pending'
      AND EXISTS (SELECT 1 FROM lease)
    RETURNING e.id
)
SELECT (SELECT COUNT(*) FROM lease) AS lease_held, (SELECT COUNT(*) FROM updated) AS updated
