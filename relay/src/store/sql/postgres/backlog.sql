-- The table gauges of /metrics, read on every scrape, so only from the
-- partial indexes: pending and dead events, and the creation time of the
-- lowest pending id (the oldest pending event, up to the commit-order skew
-- of concurrent producers), found without scanning the backlog.
SELECT
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'pending') AS pending,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'dead') AS dead,
    (SELECT created_at FROM outbox_events WHERE state = 'pending' ORDER BY id LIMIT 1) AS oldest_pending_at
