-- The backlog table's name when it exists (a database prepared for the
-- logical source), else NULL.
SELECT to_regclass('outbox_slot_backlogs')::text
