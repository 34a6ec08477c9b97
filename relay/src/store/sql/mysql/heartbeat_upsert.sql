-- ? relay id, ? time to live in microseconds. Times are UTC.
INSERT INTO outbox_relays (relay_id, expires_at)
VALUES (?, DATE_ADD(UTC_TIMESTAMP(6), INTERVAL ? MICROSECOND))
ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)
