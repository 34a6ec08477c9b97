-- ? consumer, ? consumer, ? rows to keep, ? batch size: delete the oldest
-- rows past the newest kept ones. (MariaDB refuses LIMIT in an IN subquery,
-- hence the derived table.)
DELETE inbox_messages FROM inbox_messages
JOIN (
    SELECT event_id FROM (
        SELECT event_id FROM inbox_messages
        WHERE consumer = ?
        ORDER BY received_at DESC, event_id DESC
        LIMIT 18446744073709551615 OFFSET ?
    ) AS past_kept
    LIMIT ?
) AS doomed ON doomed.event_id = inbox_messages.event_id
WHERE inbox_messages.consumer = ?
