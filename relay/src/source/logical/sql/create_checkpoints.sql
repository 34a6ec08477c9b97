-- Retention of streamed events: points of the WAL with what had finished
-- by then. Once the slot has confirmed `wal_position`, every transaction
-- older than `snapshot_xmin` has had all its events settled.
CREATE TABLE IF NOT EXISTS outbox_stream_checkpoints (
    taken_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    wal_position  PG_LSN      NOT NULL,
    snapshot_xmin XID8        NOT NULL,
    max_id        BIGINT      NOT NULL
)
