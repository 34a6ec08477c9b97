-- $1 slot name. Drops a slot the server invalidated (`recover-slot`); fails
-- while a connection still streams from it.
SELECT pg_drop_replication_slot($1)
