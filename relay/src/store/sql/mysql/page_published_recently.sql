-- Events published in the last ? microseconds, for the publish rate of
-- the operators' page when no relay runs in its process (one column).
SELECT COUNT(*)
FROM outbox_events
WHERE state = 'published' AND published_at >= DATE_SUB(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND)
