-- ?1 relay id, ?2 partition count, ?3 JSON array of leases, ?4 event id,
-- ?5 error, ?6 seconds until the retry, NULL to move the event to dead.
UPDATE outbox_events
SET attempts = attempts + 1,
    last_error = ?5,
    state = CASE WHEN ?6 IS NULL THEN 'dead' ELSE 'pending' END,
    next_attempt_at = CASE WHEN ?6 IS NULL THEN NULL
                           ELSE strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', ?6)) END
WHERE id = ?4
  AND state = 'pending'
  AND EXISTS (
      SELECT 1 FROM outbox_partitions AS p, json_each(?3) AS held
      WHERE p.partition_no = outbox_events.partition_key % ?2
        AND p.partition_no = held.value ->> '$.partition_no'
        AND p.lease_token = held.value ->> '$.lease_token'
        AND p.lease_owner = ?1
        AND p.lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  )
