-- Opens the statements that judge streamed events acknowledged as
-- retention does, $1 being the slot: `usable` is the newest retention
-- checkpoint whose position the slot has confirmed. Every transaction
-- older than its snapshot had all its events settled, and a streamed event
-- settled without a write (pending, no attempt, no note) was acknowledged
-- by the broker. age() compares transaction ids across wraparound.
WITH usable AS (
    SELECT snapshot_xmin::xid AS snapshot_xmin, max_id
    FROM outbox_stream_checkpoints
    WHERE wal_position <= (SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1)
    ORDER BY taken_at DESC
    LIMIT 1
)
