-- ? partition count, ? partition count, ? JSON array of partitions leased,
-- ? JSON array of ids to leave out (published, not yet marked), ? whether
-- dead events hold their aggregate, ? batch size, ? most payload bytes.
-- Pending, due events in id order. An event is skipped while an earlier
-- event of its aggregate waits for a retry (or is dead, under the hold
-- policy); the probe uses outbox_events_aggregate_idx. The (state, id)
-- index is forced: it gives the pending rows in id order, so the first
-- rows come at once, whatever the statistics say; without it the
-- optimizer may read every pending row and sort them.
-- The batch is cut after the longest run of events, in id order, whose
-- payloads add up to at most the last ? bytes; the first event comes whatever its
-- size, so an event larger than the cap still goes out, alone. Only the
-- candidates' sizes are summed: the server never sends what is cut.
SELECT id, event_id, event_type, event_version, source, aggregate_type, aggregate_id,
       topic, payload, headers, created_at, attempts, partition_no
FROM (
  SELECT candidate.*,
         SUM(LENGTH(candidate.payload)) OVER (ORDER BY candidate.id) AS bytes_through,
         ROW_NUMBER() OVER (ORDER BY candidate.id) AS position
  FROM (
    SELECT e.id, e.event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
           e.topic, e.payload, e.headers, e.created_at, e.attempts, e.partition_key % ? AS partition_no
    FROM outbox_events AS e FORCE INDEX (outbox_events_state_id_idx)
    WHERE e.state = 'pending'
      AND e.partition_key % ? IN (
          SELECT leased.partition_no FROM JSON_TABLE(?, '$[*]' COLUMNS (partition_no INT PATH '$')) AS leased)
      AND e.id NOT IN (
          SELECT excluded.id FROM JSON_TABLE(?, '$[*]' COLUMNS (id BIGINT PATH '$')) AS excluded)
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= UTC_TIMESTAMP(6))
      AND NOT EXISTS (
          SELECT 1 FROM outbox_events AS earlier
          WHERE earlier.aggregate_type = e.aggregate_type
            AND earlier.aggregate_id = e.aggregate_id
            AND earlier.id < e.id
            AND earlier.attempts > 0
            AND earlier.state <> 'published'
            AND ((earlier.state = 'dead' AND ?)
                 OR (earlier.state = 'pending' AND earlier.next_attempt_at > UTC_TIMESTAMP(6)))
      )
    ORDER BY e.id
    LIMIT ?
  ) AS candidate
) AS sized
WHERE position = 1 OR bytes_through <= ?
ORDER BY id
