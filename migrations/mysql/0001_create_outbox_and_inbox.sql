-- outbox_events: one row per event, written in the producer's transaction.
-- The columns up to created_at are the public contract; the rest is the
-- relay's bookkeeping, and every bookkeeping column has a default, so an
-- INSERT naming only the contract columns is a complete enqueue.
-- Times are UTC. utf8mb4_bin keeps aggregate ids and types case-sensitive.
CREATE TABLE outbox_events (
    id              BIGINT       NOT NULL AUTO_INCREMENT,
    event_id        CHAR(36)     NOT NULL,
    event_type      VARCHAR(255) NOT NULL,
    event_version   INT          NOT NULL DEFAULT 1,
    source          VARCHAR(1024) NOT NULL,
    aggregate_type  VARCHAR(255) NOT NULL,
    aggregate_id    VARCHAR(255) NOT NULL,
    topic           VARCHAR(255) NOT NULL,
    payload         JSON         NOT NULL,
    headers         JSON         NOT NULL DEFAULT ('{}'),
    created_at      DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),

    -- Stable 31-bit hash of the aggregate. The relay drains partition
    -- (partition_key % partition count) under one lease, in id order, which
    -- is what keeps each aggregate's events in order across relays.
    partition_key   INT GENERATED ALWAYS AS (CRC32(CONCAT(aggregate_type, '/', aggregate_id)) & 2147483647) STORED,
    -- pending -> published, or pending -> dead after the last attempt.
    state           VARCHAR(16)  NOT NULL DEFAULT 'pending',
    -- Failed publish attempts so far.
    attempts        INT          NOT NULL DEFAULT 0,
    -- Earliest time of the next attempt after a failure; NULL means now.
    next_attempt_at DATETIME(6)  NULL,
    -- Error of the most recent failed attempt.
    last_error      TEXT         NULL,
    -- When the broker acknowledged the event; retention counts from here.
    published_at    DATETIME(6)  NULL,

    PRIMARY KEY (id),
    UNIQUE KEY outbox_events_event_id_key (event_id),
    -- No partial indexes here: (state, ...) keeps the claim and retention
    -- scans to the rows of one state.
    KEY outbox_events_state_id_idx (state, id),
    KEY outbox_events_state_published_idx (state, published_at),
    -- A waiting retry or a held dead event blocks the later events of its
    -- aggregate; the claim probes this index to find out.
    KEY outbox_events_aggregate_idx (aggregate_type, aggregate_id, id),
    CONSTRAINT outbox_events_event_id_check
        CHECK (event_id REGEXP '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
    CONSTRAINT outbox_events_event_version_check CHECK (event_version > 0),
    CONSTRAINT outbox_events_state_check CHECK (state IN ('pending', 'published', 'dead')),
    CONSTRAINT outbox_events_headers_check CHECK (JSON_TYPE(headers) = 'OBJECT')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Partition leases. A relay instance owns a partition while lease_expires_at
-- is in the future; lease_token is the fencing token, bumped on every
-- acquisition, and every write a relay makes for the partition is
-- conditioned on the token it acquired.
CREATE TABLE outbox_partitions (
    partition_no     INT          NOT NULL,
    lease_owner      VARCHAR(255) NULL,
    lease_token      BIGINT       NOT NULL DEFAULT 0,
    lease_expires_at DATETIME(6)  NULL,
    PRIMARY KEY (partition_no)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO outbox_partitions (partition_no)
WITH RECURSIVE numbers (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n < 31)
SELECT n FROM numbers;

-- Live relay instances. Each renews its row while it runs, and takes
-- ceil(partitions / live instances) partitions, so partitions spread evenly.
CREATE TABLE outbox_relays (
    relay_id   VARCHAR(255) NOT NULL,
    expires_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (relay_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- inbox_messages: one row per (consumer, event) processed, written in the
-- consumer's own transaction.
CREATE TABLE inbox_messages (
    consumer    VARCHAR(255) NOT NULL,
    event_id    VARCHAR(255) NOT NULL,
    received_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, event_id),
    -- Pruning deletes a consumer's rows by age.
    KEY inbox_messages_received_at_idx (consumer, received_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
