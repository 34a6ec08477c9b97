-- $1 slot name: its output plugin and database, when the slot exists.
SELECT plugin::text AS plugin, database::text AS database, current_database()::text AS current_database
FROM pg_replication_slots
WHERE slot_name = $1
