-- Events published in the last ?1 seconds, for the publish rate of the
-- operators' page when no relay runs in its process (one column).
SELECT COUNT(*)
FROM outbox_events
WHERE state = 'published'
  AND published_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1))
