-- ? topic: 1 when any event has it, else 0.
SELECT COUNT(*) FROM (SELECT 1 FROM outbox_events WHERE topic = ? LIMIT 1) AS found
