-- Per-topic counts of `outbox-relay status`: pending includes retrying
-- (pending events that failed at least once), as in the totals.
SELECT topic,
       COUNT(CASE WHEN state = 'pending' THEN 1 END) AS pending,
       COUNT(CASE WHEN state = 'pending' AND attempts > 0 THEN 1 END) AS retrying,
       COUNT(CASE WHEN state = 'dead' THEN 1 END) AS dead,
       COUNT(CASE WHEN state = 'published' THEN 1 END) AS published
FROM outbox_events
GROUP BY topic
ORDER BY topic
