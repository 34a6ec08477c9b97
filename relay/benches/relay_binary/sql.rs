//! The bench's own SQL on PostgreSQL: how it writes events, builds the
//! published history, keeps statistics away and watches the relay's
//! sessions.

/// One event, as an application writes it: the contract columns only.
/// `$7` is the JSON payload as text.
pub(crate) const INSERT_EVENT: &str = "INSERT INTO outbox_events \
     (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
     VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)";

/// Events `$1` to `$2` of a backlog of large payloads in one statement,
/// and so one transaction, as a plain SQL writer of a few events at a time
/// would: topic `$3`, aggregate `s-<n % $5>`, a payload of
/// [`crate::support::events::payload`]'s shape padded with `$4`
/// characters, and `event_type`, `source` and `aggregate_type` `$6`, `$7`
/// and `$8`.
pub(crate) const INSERT_PAYLOAD_BACKLOG: &str = "INSERT INTO outbox_events \
     (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
     SELECT gen_random_uuid(), $6, $7, $8, 's-' || (n % $5), $3, \
            jsonb_build_object('shipment', 's-' || (n % $5), 'sequence', n, 'note', repeat('x', $4)) \
     FROM generate_series($1::int8, $2::int8) AS n";

/// Every event's id and aggregate, in the order they were written.
pub(crate) const WRITTEN_EVENTS: &str =
    "SELECT event_id::text, aggregate_id FROM outbox_events ORDER BY id";

/// No autovacuum (and so no automatic `ANALYZE`) on the outbox table: it
/// stays never-analyzed unless the bench analyzes it.
pub(crate) const DISABLE_AUTOVACUUM: &str =
    "ALTER TABLE outbox_events SET (autovacuum_enabled = false)";

/// Fresh statistics, for the analyzed drain.
pub(crate) const ANALYZE: &str = "ANALYZE outbox_events";

/// What the planner knows of the table: `reltuples` (-1 when it was never
/// vacuumed or analyzed) and whether it was ever analyzed.
pub(crate) const TABLE_STATISTICS: &str = "SELECT c.reltuples::float8, \
     (s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL) \
     FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid \
     WHERE c.relname = 'outbox_events'";

/// Published events already in the table, ids `$1` + 1 to `$1` + `$2`:
/// written an hour ago (retention keeps them for a week), spread over 1,000
/// aggregates, payload padded with `$4` characters, topic `$3`.
pub(crate) const INSERT_PUBLISHED_HISTORY: &str = "INSERT INTO outbox_events \
     (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload, \
      state, published_at, created_at) \
     SELECT gen_random_uuid(), 'shipment.moved', '/shipments', 'shipment', \
            's-' || (n % 1000), $3, \
            jsonb_build_object('shipment', 's-' || (n % 1000), 'sequence', n, 'note', repeat('x', $4)), \
            'published', now() - interval '1 hour', now() - interval '1 hour' \
     FROM generate_series($1 + 1, $1 + $2) AS n";

/// What autovacuum would long since have done to an old table: visibility
/// map, hint bits and statistics.
pub(crate) const VACUUM_ANALYZE: &str = "VACUUM ANALYZE outbox_events";

/// Events published, as the table says.
pub(crate) const COUNT_PUBLISHED: &str =
    "SELECT count(*) FROM outbox_events WHERE state = 'published'";

/// Events settled after a drain: those marked published and, where the
/// mark deletes them (`retention.published = "0s"`), those gone; the bench
/// wrote `$1` events in all and deletes none itself.
pub(crate) const COUNT_SETTLED: &str = "SELECT count(*) FILTER (WHERE state = 'published') \
     + ($1 - count(*)) FROM outbox_events";

/// Rows of `outbox_events` updated or deleted, by every session so far
/// (the bench itself only inserts).
pub(crate) const ROWS_CHANGED: &str = "SELECT (n_tup_upd + n_tup_del)::int8 \
     FROM pg_stat_user_tables WHERE relname = 'outbox_events'";

/// Every other client session on the bench's database: what it runs now
/// and what it waits for.
pub(crate) const SESSIONS: &str = "SELECT pid, state, wait_event_type, wait_event, query \
     FROM pg_stat_activity \
     WHERE datname = current_database() AND pid <> pg_backend_pid() \
       AND backend_type = 'client backend'";
