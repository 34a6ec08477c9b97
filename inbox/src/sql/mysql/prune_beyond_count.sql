-- ? consumer, ? rows to keep, ? batch size: delete the oldest rows past the
-- newest kept ones. (MariaDB refuses LIMIT in an IN subquery, hence the
-- derived tables.)
DELETE inbox_messages FROM inbox_messages
JOIN (
    SELECT consumer, event_id FROM (
        SELECT consumer, event_id, received_at FROM inbox_messages
        WHERE consumer = ?
        ORDER BY received_at DESC, event_id DESC
        LIMIT 18446744073709551615 OFFSET ?
    ) AS past_kept
    LIMIT ?
) AS doomed ON doomed.consumer = inbox_messages.consumer AND doomed.event_id = inbox_messages.event_id
