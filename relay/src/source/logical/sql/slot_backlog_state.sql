-- $1 slot name. The slot's backlog row, if any.
SELECT since, started_at, bound_id, bound_at, handed_after_id, handed_over, finished_at
FROM outbox_slot_backlogs
WHERE slot_name = $1
