SELECT COUNT(*) FROM outbox_relays WHERE expires_at > now()
