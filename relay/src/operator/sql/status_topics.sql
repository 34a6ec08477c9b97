-- `outbox-relay status --source logical`: per topic, the pending events the
-- table path owns (see status_counts.sql) and the stream-owned rows.
SELECT topic,
       COUNT(CASE WHEN state = 'pending' AND (attempts > 0 OR last_error IS NOT NULL) THEN 1 END) AS pending,
       COUNT(CASE WHEN state = 'pending' AND attempts = 0 AND last_error IS NULL THEN 1 END) AS stream_owned
FROM outbox_events
GROUP BY topic
ORDER BY topic
