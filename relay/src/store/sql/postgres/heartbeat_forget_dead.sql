-- Relays silent for an hour are gone for good.
DELETE FROM outbox_relays WHERE expires_at < now() - interval '1 hour'
