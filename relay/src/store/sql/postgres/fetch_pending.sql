-- $1 partition count, $2 partitions leased, $3 whether dead events hold
-- their aggregate, $4 batch size, $5 ids to leave out (published, not yet
-- marked), $6 most payload bytes.
-- Pending, due events in id order. An event is skipped while an earlier
-- event of its aggregate waits for a retry (or is dead, under the hold
-- policy); the probe uses the small partial index outbox_events_failed_idx.
-- The batch is cut after the longest run of events, in id order, whose
-- payloads add up to at most $6 bytes; the first event comes whatever its
-- size, so an event larger than the cap still goes out, alone. Only the
-- candidates' sizes are summed: the server never sends what is cut.
SELECT id, event_id, event_type, event_version, source, aggregate_type, aggregate_id,
       topic, payload, headers, created_at, attempts, partition_no
FROM (
  SELECT candidate.*,
         SUM(octet_length(candidate.payload)) OVER (ORDER BY candidate.id) AS bytes_through,
         ROW_NUMBER() OVER (ORDER BY candidate.id) AS position
  FROM (
    SELECT e.id, e.event_id::text AS event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
           e.topic, e.payload::text AS payload, e.headers::text AS headers, e.created_at, e.attempts,
           e.partition_key % $1 AS partition_no
    FROM outbox_events AS e
    WHERE e.state = 'pending'
      AND e.partition_key % $1 = ANY($2::integer[])
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
      AND e.id <> ALL($5::bigint[])
      AND NOT EXISTS (
          SELECT 1 FROM outbox_events AS earlier
          WHERE earlier.aggregate_type = e.aggregate_type
            AND earlier.aggregate_id = e.aggregate_id
            AND earlier.id < e.id
            AND earlier.attempts > 0
            AND earlier.state <> 'published'
            AND ((earlier.state = 'dead' AND $3) OR (earlier.state = 'pending' AND earlier.next_attempt_at > now()))
      )
    ORDER BY e.id
    LIMIT $4
  ) AS candidate
) AS sized
WHERE position = 1 OR bytes_through <= $6
ORDER BY id
