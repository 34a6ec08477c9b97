-- $1 slot name. Drops a slot that cannot stream on (`recover-slot`: the
-- server invalidated it, or its publication was dropped); fails while a
-- connection still streams from it.
SELECT pg_drop_replication_slot($1)
