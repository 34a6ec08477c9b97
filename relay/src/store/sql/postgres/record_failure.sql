-- $1 relay id, $2 partition count, $3 JSON array of leases, $4 event id,
-- $5 error, $6 seconds until the retry, NULL to move the event to dead.
UPDATE outbox_events AS e
SET attempts = e.attempts + 1,
    last_error = $5,
    state = CASE WHEN $6::double precision IS NULL THEN 'dead' ELSE 'pending' END,
    next_attempt_at = CASE WHEN $6::double precision IS NULL THEN NULL
                           ELSE now() + make_interval(secs => $6::double precision) END
FROM outbox_partitions AS p, jsonb_to_recordset($3::jsonb) AS held (partition_no integer, lease_token bigint)
WHERE e.id = $4
  AND e.state = 'pending'
  AND p.partition_no = e.partition_key % $2
  AND p.partition_no = held.partition_no
  AND p.lease_token = held.lease_token
  AND p.lease_owner = $1
  AND p.lease_expires_at > now()
