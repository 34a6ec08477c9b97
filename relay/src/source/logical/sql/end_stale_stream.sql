-- $1 slot name, $2 the caller's stream lease token, $3 the relays'
-- application_name. Ends the walsender of another relay still holding the
-- slot: the caller holds the stream's lease, so that relay lost it (frozen,
-- cut off, or past its lease) and its connection would keep the slot busy
-- until wal_sender_timeout. Another consumer of the slot (another
-- application_name) is left alone. Returns the pids ended. MATERIALIZED:
-- the checks run before any backend is ended.
WITH stale AS MATERIALIZED (
    SELECT s.active_pid AS pid
    FROM pg_replication_slots AS s
    JOIN pg_stat_activity AS a ON a.pid = s.active_pid
    WHERE s.slot_name = $1
      AND a.application_name = $3
      AND s.active_pid <> pg_backend_pid()
      AND EXISTS (SELECT 1 FROM outbox_partitions WHERE partition_no = -1 AND lease_token = $2)
)
SELECT pid FROM stale WHERE pg_terminate_backend(pid)
