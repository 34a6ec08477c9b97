-- $1 relay id, $2 time to live in seconds.
INSERT INTO outbox_relays (relay_id, expires_at)
VALUES ($1, now() + make_interval(secs => $2))
ON CONFLICT (relay_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
