-- ?1 relay id, ?2 partition count, ?3 JSON array of leases, ?4 JSON array of
-- event ids. The mark of `retention.published = "0s"`: acknowledged rows are
-- deleted instead of marked, fenced as the mark is: a row is deleted only
-- while its partition's lease is one of ours.
DELETE FROM outbox_events
WHERE id IN (SELECT value FROM json_each(?4))
  AND state = 'pending'
  AND EXISTS (
      SELECT 1 FROM outbox_partitions AS p, json_each(?3) AS held
      WHERE p.partition_no = outbox_events.partition_key % ?2
        AND p.partition_no = held.value ->> '$.partition_no'
        AND p.lease_token = held.value ->> '$.lease_token'
        AND p.lease_owner = ?1
        AND p.lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
  )
