-- Stream-owned events: pending, with no attempt and no note.
SELECT COUNT(*) FROM outbox_events
WHERE state = 'pending' AND attempts = 0 AND last_error IS NULL
