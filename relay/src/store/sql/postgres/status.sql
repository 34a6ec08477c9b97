-- Counts of `outbox-relay status`, on the database's clock. Partitions
-- are numbered from 0; row -1 is the logical stream's lease.
-- in_flight: pending events that are due now (no retry wait) in a partition
-- held by a live lease, i.e. what the relays are publishing or will fetch
-- next (events held back behind a failed event of their aggregate count).
SELECT
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'pending') AS pending,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'pending' AND attempts > 0) AS retrying,
    (SELECT COUNT(*)
     FROM outbox_events AS e
     JOIN outbox_partitions AS p
       ON p.partition_no = e.partition_key % (SELECT COUNT(*) FROM outbox_partitions WHERE partition_no >= 0)
     WHERE e.state = 'pending'
       AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
       AND p.lease_owner IS NOT NULL
       AND p.lease_expires_at > now()) AS in_flight,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'dead') AS dead,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'published') AS published,
    (SELECT MIN(created_at) FROM outbox_events WHERE state = 'pending') AS oldest_pending_at,
    (SELECT FLOOR(EXTRACT(EPOCH FROM now() - MIN(created_at)))::bigint
     FROM outbox_events WHERE state = 'pending') AS oldest_pending_age_seconds,
    (SELECT COUNT(*) FROM outbox_partitions
     WHERE partition_no >= 0 AND lease_owner IS NOT NULL AND lease_expires_at > now())
        AS leased_partitions,
    (SELECT COUNT(*) FROM outbox_partitions WHERE partition_no >= 0) AS partitions,
    (SELECT COUNT(*) FROM outbox_relays WHERE expires_at > now()) AS live_relays
