-- Relays silent for an hour are gone for good.
DELETE FROM outbox_relays WHERE expires_at < DATE_SUB(UTC_TIMESTAMP(6), INTERVAL 1 HOUR)
