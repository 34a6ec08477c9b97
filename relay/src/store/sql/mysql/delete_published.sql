-- ? retention in microseconds, ? batch size. Only published rows.
DELETE FROM outbox_events
WHERE state = 'published' AND published_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
ORDER BY published_at
LIMIT ?
