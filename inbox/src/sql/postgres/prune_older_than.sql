-- $1 consumer, $2 window in seconds, $3 batch size.
DELETE FROM inbox_messages
WHERE consumer = $1
  AND event_id IN (
      SELECT event_id FROM inbox_messages
      WHERE consumer = $1 AND received_at < now() - make_interval(secs => $2)
      ORDER BY received_at
      LIMIT $3
  )
