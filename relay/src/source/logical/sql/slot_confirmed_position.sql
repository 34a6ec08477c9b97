-- $1 slot name: the position the server has been told is settled; a new
-- stream session starts there.
SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1
