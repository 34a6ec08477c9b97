-- Relays silent for an hour are gone for good.
DELETE FROM outbox_relays WHERE expires_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 hour')
