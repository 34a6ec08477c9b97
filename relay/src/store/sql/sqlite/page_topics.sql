-- Per-topic counts of the operators' page (/ui), on the database's clock.
-- pending counts every unpublished, non-dead event: retrying (failed at
-- least once) and in_flight (due now in a partition a live lease holds,
-- as `status.sql` counts it) are subsets of it.
SELECT e.topic,
       COUNT(CASE WHEN e.state = 'pending' THEN 1 END) AS pending,
       COUNT(CASE WHEN e.state = 'pending' AND e.attempts > 0 THEN 1 END) AS retrying,
       COUNT(CASE WHEN e.state = 'pending'
                   AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
                   AND p.lease_owner IS NOT NULL
                   AND p.lease_expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now') THEN 1 END) AS in_flight,
       COUNT(CASE WHEN e.state = 'dead' THEN 1 END) AS dead,
       COUNT(CASE WHEN e.state = 'published' THEN 1 END) AS published
FROM outbox_events AS e
LEFT JOIN outbox_partitions AS p
  ON e.state = 'pending'
 AND p.partition_no = e.partition_key % (SELECT COUNT(*) FROM outbox_partitions)
GROUP BY e.topic
ORDER BY e.topic
