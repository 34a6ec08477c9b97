SELECT COUNT(*) FROM outbox_relays WHERE expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
