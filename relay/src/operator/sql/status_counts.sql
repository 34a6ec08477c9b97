-- `outbox-relay status --source logical`: the counts that differ from
-- polling's, on the database's clock. pending: events the table path owns
-- and has not published (failed and waiting for a retry, held behind one,
-- or handed over by recover-slot); in_flight: those of them due now while
-- a relay holds the stream's lease; stream_owned: pending rows with no
-- attempt and no note, which the stream publishes without writing them
-- (already published, or still ahead in the slot) and retention deletes
-- once the slot confirmed them.
SELECT
    (SELECT COUNT(*) FROM outbox_events
     WHERE state = 'pending' AND (attempts > 0 OR last_error IS NOT NULL)) AS pending,
    (SELECT COUNT(*) FROM outbox_events
     WHERE state = 'pending' AND (attempts > 0 OR last_error IS NOT NULL)
       AND (next_attempt_at IS NULL OR next_attempt_at <= now())
       AND EXISTS (SELECT 1 FROM outbox_partitions
                   WHERE partition_no = -1 AND lease_owner IS NOT NULL
                     AND lease_expires_at > now())) AS in_flight,
    (SELECT COUNT(*) FROM outbox_events
     WHERE state = 'pending' AND attempts = 0 AND last_error IS NULL) AS stream_owned,
    (SELECT MIN(created_at) FROM outbox_events
     WHERE state = 'pending' AND (attempts > 0 OR last_error IS NOT NULL)) AS oldest_pending_at,
    (SELECT FLOOR(EXTRACT(EPOCH FROM now() - MIN(created_at)))::bigint FROM outbox_events
     WHERE state = 'pending' AND (attempts > 0 OR last_error IS NOT NULL)) AS oldest_pending_age_seconds
