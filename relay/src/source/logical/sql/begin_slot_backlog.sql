-- $1 slot name, $2 since (NULL: every pending, untouched event). Written
-- before the slot is created, so that a relay killed while it creates the
-- slot leaves a trace: the row is unbound until bind_slot_backlog.sql. A
-- finished backlog starts again from the first id; an unfinished one
-- keeps how far it got and widens `since` to cover both.
INSERT INTO outbox_slot_backlogs (slot_name, since)
VALUES ($1, $2)
ON CONFLICT (slot_name) DO UPDATE
SET since = CASE
        WHEN outbox_slot_backlogs.finished_at IS NOT NULL THEN EXCLUDED.since
        WHEN outbox_slot_backlogs.since IS NULL OR EXCLUDED.since IS NULL THEN NULL
        ELSE LEAST(outbox_slot_backlogs.since, EXCLUDED.since)
    END,
    started_at = now(),
    bound_at = NULL,
    bound_id = CASE WHEN outbox_slot_backlogs.finished_at IS NULL THEN outbox_slot_backlogs.bound_id END,
    handed_after_id = CASE WHEN outbox_slot_backlogs.finished_at IS NULL THEN outbox_slot_backlogs.handed_after_id ELSE 0 END,
    handed_over = CASE WHEN outbox_slot_backlogs.finished_at IS NULL THEN outbox_slot_backlogs.handed_over ELSE 0 END,
    finished_at = NULL
