-- ? consumer, ? window in microseconds, ? batch size.
DELETE FROM inbox_messages
WHERE consumer = ? AND received_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
ORDER BY received_at
LIMIT ?
