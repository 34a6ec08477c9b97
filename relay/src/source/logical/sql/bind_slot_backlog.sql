-- $1 slot name. Run once the slot exists: every transaction committed
-- before its consistent point is visible now, so the highest id visible
-- covers each event the slot will not stream. Binds an unbound backlog
-- only (a bound one keeps its bound); returns the bound.
UPDATE outbox_slot_backlogs
SET bound_id = GREATEST(COALESCE(bound_id, 0), (SELECT COALESCE(MAX(id), 0) FROM outbox_events)),
    bound_at = now()
WHERE slot_name = $1
  AND bound_at IS NULL
  AND finished_at IS NULL
RETURNING bound_id, bound_at
