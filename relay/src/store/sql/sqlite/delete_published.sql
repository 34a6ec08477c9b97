-- ?1 retention in seconds, ?2 batch size. Only published rows.
DELETE FROM outbox_events
WHERE id IN (
    SELECT id FROM outbox_events
    WHERE state = 'published'
      AND published_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('-%.3f seconds', ?1))
    ORDER BY published_at
    LIMIT ?2
)
