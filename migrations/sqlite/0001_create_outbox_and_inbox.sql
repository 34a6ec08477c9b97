-- outbox_events: one row per event, written in the producer's transaction.
-- The columns up to created_at are the public contract; the rest is the
-- relay's bookkeeping, and every bookkeeping column has a default, so an
-- INSERT naming only the contract columns is a complete enqueue.
-- AUTOINCREMENT: ids of deleted rows are never reused, and with SQLite's
-- single writer, id order is commit order. Times are UTC RFC 3339 text.
CREATE TABLE outbox_events (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT    NOT NULL,
    event_type      TEXT    NOT NULL,
    event_version   INTEGER NOT NULL DEFAULT 1,
    source          TEXT    NOT NULL,
    aggregate_type  TEXT    NOT NULL,
    aggregate_id    TEXT    NOT NULL,
    topic           TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    headers         TEXT    NOT NULL DEFAULT '{}',
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),

    -- SQLite has one writer, so one relay at a time drains the table: every
    -- event is in partition 0.
    partition_key   INTEGER NOT NULL DEFAULT 0,
    -- pending -> published, or pending -> dead after the last attempt.
    state           TEXT    NOT NULL DEFAULT 'pending',
    -- Failed publish attempts so far.
    attempts        INTEGER NOT NULL DEFAULT 0,
    -- Earliest time of the next attempt after a failure; NULL means now.
    next_attempt_at TEXT    NULL,
    -- Error of the most recent failed attempt.
    last_error      TEXT    NULL,
    -- When the broker acknowledged the event; retention counts from here.
    published_at    TEXT    NULL,

    CONSTRAINT outbox_events_event_id_key UNIQUE (event_id),
    CONSTRAINT outbox_events_event_id_check CHECK (length(event_id) = 36 AND event_id = lower(event_id)),
    CONSTRAINT outbox_events_event_version_check CHECK (event_version > 0),
    CONSTRAINT outbox_events_payload_check CHECK (json_valid(payload)),
    CONSTRAINT outbox_events_headers_check CHECK (json_type(headers) = 'object'),
    CONSTRAINT outbox_events_state_check CHECK (state IN ('pending', 'published', 'dead'))
);

-- The claim scans pending rows in id order; published rows are not in this
-- index, so the claim costs the same however many of them the table holds.
CREATE INDEX outbox_events_pending_idx ON outbox_events (id) WHERE state = 'pending';
-- Retention deletes published rows by age.
CREATE INDEX outbox_events_published_idx ON outbox_events (published_at) WHERE state = 'published';
-- Operators list dead events.
CREATE INDEX outbox_events_dead_idx ON outbox_events (id) WHERE state = 'dead';
-- A waiting retry or a held dead event blocks the later events of its
-- aggregate; the claim probes this small index to find out.
CREATE INDEX outbox_events_failed_idx ON outbox_events (aggregate_type, aggregate_id, id)
    WHERE attempts > 0 AND state <> 'published';

-- Partition leases; see the PostgreSQL migration. One partition here.
CREATE TABLE outbox_partitions (
    partition_no     INTEGER PRIMARY KEY,
    lease_owner      TEXT    NULL,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at TEXT    NULL
);

INSERT INTO outbox_partitions (partition_no) VALUES (0);

-- Live relay instances; see the PostgreSQL migration.
CREATE TABLE outbox_relays (
    relay_id   TEXT PRIMARY KEY,
    expires_at TEXT NOT NULL
);

-- inbox_messages: one row per (consumer, event) processed, written in the
-- consumer's own transaction.
CREATE TABLE inbox_messages (
    consumer    TEXT NOT NULL,
    event_id    TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (consumer, event_id)
);

-- Pruning deletes a consumer's rows by age.
CREATE INDEX inbox_messages_received_at_idx ON inbox_messages (consumer, received_at);
