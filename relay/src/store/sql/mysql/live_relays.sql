SELECT COUNT(*) FROM outbox_relays WHERE expires_at > UTC_TIMESTAMP(6)
