-- ?1 relay id, ?2 time to live in seconds. Times are UTC RFC 3339 text,
-- which compares correctly as text.
INSERT INTO outbox_relays (relay_id, expires_at)
VALUES (?1, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?2)))
ON CONFLICT (relay_id) DO UPDATE SET expires_at = excluded.expires_at
