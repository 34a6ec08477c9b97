SELECT
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'pending') AS pending,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts > 0) AS retrying,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'dead') AS dead,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'published') AS published,
    (SELECT MIN(created_at) FROM outbox_events WHERE state = 'pending') AS oldest_pending_at,
    (SELECT COUNT(*) FROM outbox_partitions WHERE lease_owner IS NOT NULL AND lease_expires_at > UTC_TIMESTAMP(6))
        AS leased_partitions,
    (SELECT COUNT(*) FROM outbox_partitions) AS partitions,
    (SELECT COUNT(*) FROM outbox_relays WHERE expires_at > UTC_TIMESTAMP(6)) AS live_relays
