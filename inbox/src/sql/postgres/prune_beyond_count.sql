-- $1 consumer, $2 rows to keep, $3 batch size: delete the oldest rows past
-- the newest $2.
DELETE FROM inbox_messages
WHERE consumer = $1
  AND event_id IN (
      SELECT event_id FROM inbox_messages
      WHERE consumer = $1
      ORDER BY received_at DESC, event_id DESC
      OFFSET $2
      LIMIT $3
  )
