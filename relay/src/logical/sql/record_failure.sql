-- $1 relay id, $2 stream lease token, $3 event id, $4 error, $5 seconds
-- until the retry, NULL to move the event to dead. The same bookkeeping as
-- the polling relay's, fenced by the stream's lease.
UPDATE outbox_events AS e
SET attempts = e.attempts + 1,
    last_error = $4,
    state = CASE WHEN $5::double precision IS NULL THEN 'dead' ELSE 'pending' END,
    next_attempt_at = CASE WHEN $5::double precision IS NULL THEN NULL
                           ELSE now() + make_interval(secs => $5::double precision) END
FROM outbox_partitions AS p
WHERE e.id = $3
  AND e.state = 'pending'
  AND p.partition_no = -1
  AND p.lease_owner = $1
  AND p.lease_token = $2
  AND p.lease_expires_at > now()
