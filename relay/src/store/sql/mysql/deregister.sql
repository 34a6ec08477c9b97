DELETE FROM outbox_relays WHERE relay_id = ?
