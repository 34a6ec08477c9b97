-- $1 relay id, $2 stream lease token, $3 event ids, $4 note. Hands streamed
-- events of parked aggregates to the table path: `last_error` marks them,
-- no attempt is used. Fenced by the stream's lease.
UPDATE outbox_events AS e
SET last_error = $4
FROM outbox_partitions AS p
WHERE e.id = ANY($3::bigint[])
  AND e.state = 'pending'
  AND p.partition_no = -1
  AND p.lease_owner = $1
  AND p.lease_token = $2
  AND p.lease_expires_at > now()
