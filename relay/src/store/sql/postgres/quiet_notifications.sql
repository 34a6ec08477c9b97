-- $1 relay id, $2 seconds. The relay polls on its own for that long:
-- producers' triggers need not notify it meanwhile.
UPDATE outbox_relays
SET quiet_until = now() + make_interval(secs => $2)
WHERE relay_id = $1
