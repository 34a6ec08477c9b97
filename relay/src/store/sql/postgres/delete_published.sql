-- $1 retention in seconds, $2 batch size. Only published rows.
DELETE FROM outbox_events
WHERE id IN (
    SELECT id FROM outbox_events
    WHERE state = 'published' AND published_at < now() - make_interval(secs => $1)
    ORDER BY published_at
    LIMIT $2
)
