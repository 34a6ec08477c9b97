-- $1 relay id, $2 stream lease token, $3 event ids. Marks published the
-- table path's events (failed or held ones); streamed events are never
-- written. Fenced by the stream's lease.
UPDATE outbox_events AS e
SET state = 'published', published_at = now(), next_attempt_at = NULL
FROM outbox_partitions AS p
WHERE e.id = ANY($3::bigint[])
  AND e.state = 'pending'
  AND (e.attempts > 0 OR e.last_error IS NOT NULL)
  AND p.partition_no = -1
  AND p.lease_owner = $1
  AND p.lease_token = $2
  AND p.lease_expires_at > now()
