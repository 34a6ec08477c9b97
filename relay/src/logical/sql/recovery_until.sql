-- The database's clock, read once the new slot exists: every transaction
-- committed before the slot's starting point is visible from here on.
SELECT now()
