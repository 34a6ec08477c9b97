-- $1 whether dead events hold their aggregate, $2 batch size, $3 ids to
-- leave out (published, not yet marked), $4 most payload bytes. Due events the table path owns,
-- in id order, skipping any behind an earlier event of its aggregate that
-- waits for a retry (or is dead, under hold) - as the polling fetch does.
-- Only failed events (an attempt made) wait or are dead: the probe reads
-- outbox_events_table_blockers_idx, never the held ones.
-- Cut by payload bytes as the polling fetch is (the first event whatever
-- its size).
SELECT id, event_id, event_type, event_version, source, aggregate_type, aggregate_id,
       topic, payload, headers, created_at, attempts, partition_no
FROM (
  SELECT candidate.*,
         SUM(octet_length(candidate.payload)) OVER (ORDER BY candidate.id) AS bytes_through,
         ROW_NUMBER() OVER (ORDER BY candidate.id) AS position
  FROM (
    SELECT e.id, e.event_id::text AS event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
           e.topic, e.payload::text AS payload, e.headers::text AS headers, e.created_at, e.attempts,
           0 AS partition_no
    FROM outbox_events AS e
    WHERE e.state <> 'published'
      AND (e.attempts > 0 OR e.last_error IS NOT NULL)
      AND e.state = 'pending'
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
      AND e.id <> ALL($3::bigint[])
      AND NOT EXISTS (
          SELECT 1 FROM outbox_events AS earlier
          WHERE earlier.aggregate_type = e.aggregate_type
            AND earlier.aggregate_id = e.aggregate_id
            AND earlier.id < e.id
            AND earlier.state <> 'published'
            AND earlier.attempts > 0
            AND ((earlier.state = 'dead' AND $1) OR (earlier.state = 'pending' AND earlier.next_attempt_at > now()))
      )
    ORDER BY e.id
    LIMIT $2
  ) AS candidate
) AS sized
WHERE position = 1 OR bytes_through <= $4
ORDER BY id
