-- ? consumer, ? window in seconds, ? batch size.
DELETE FROM inbox_messages
WHERE consumer = ?
  AND received_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL CAST(? * 1000000 AS SIGNED) MICROSECOND)
ORDER BY received_at
LIMIT ?
