//! The statements the bench runs: the relay's own (its SQL files, read at
//! build time, so the bench measures what the relay ships), the
//! transaction settings the relay puts before them, and two built from
//! them: the fetch from the last marked id and the mark of batch N with
//! the fetch of batch N + 1 in one statement.

/// The relay's mark: `$1` relay id, `$2` partition count, `$3` JSON array
/// of leases, `$4` event ids.
pub(crate) const MARK_PUBLISHED: &str =
    include_str!("../../src/store/sql/postgres/mark_published.sql");

/// The mark of `retention.published = "0s"`, with the same parameters.
pub(crate) const DELETE_ACKNOWLEDGED: &str =
    include_str!("../../src/store/sql/postgres/delete_acknowledged.sql");

/// The relay's fetch: `$1` partition count, `$2` partitions, `$3` whether
/// dead events hold their aggregate, `$4` batch size, `$5` ids left out,
/// `$6` most payload bytes.
pub(crate) const FETCH_PENDING: &str =
    include_str!("../../src/store/sql/postgres/fetch_pending.sql");

/// How the relay takes leases: `$1` relay id, `$2` time to live in
/// seconds, `$3` how many partitions.
pub(crate) const ACQUIRE_LEASES: &str =
    include_str!("../../src/store/sql/postgres/acquire_leases.sql");

/// What the relay runs before a fetch, in its transaction
/// (`FETCH_SETTINGS` of `relay/src/store/postgres.rs`).
pub(crate) const FETCH_SETTING: &str = "SET LOCAL enable_sort = off";

/// What the relay runs before a mark, in its transaction
/// (`MARK_SETTINGS` of `relay/src/store/postgres.rs`).
pub(crate) const MARK_SETTING: &str = "SET LOCAL synchronous_commit = off";

/// The two settings for the whole session, for the variants that send one
/// statement per step instead of a transaction of three or four.
pub(crate) const SESSION_SETTINGS: &[&str] =
    &["SET synchronous_commit = off", "SET enable_sort = off"];

/// Partitions in `outbox_partitions`, as the relay counts them.
pub(crate) const PARTITION_COUNT: &str =
    "SELECT count(*)::int4 FROM outbox_partitions WHERE partition_no >= 0";

/// The backlog's ids, in the order the relay publishes them.
pub(crate) const PENDING_IDS: &str =
    "SELECT id FROM outbox_events WHERE state = 'pending' ORDER BY id";

/// Events still pending.
pub(crate) const COUNT_PENDING: &str = "SELECT count(*) FROM outbox_events WHERE state = 'pending'";

/// The width of the backlog's rows: mean bytes of a whole row and of its
/// payload as text, and the table's pages.
pub(crate) const ROW_WIDTH: &str = "SELECT avg(pg_column_size(e.*))::float8, \
     avg(octet_length(e.payload::text))::float8, \
     (pg_relation_size('outbox_events') / 8192)::int8 \
     FROM outbox_events AS e";

/// The table's pages and its indexes' bytes.
pub(crate) const TABLE_SIZE: &str = "SELECT (pg_relation_size('outbox_events') / 8192)::int8, \
     pg_indexes_size('outbox_events')::int8";

/// This database's oid: the WAL names a block by `tablespace/database/
/// relfilenode`.
pub(crate) const DATABASE_OID: &str =
    "SELECT oid::int8 FROM pg_database WHERE datname = current_database()";

/// The WAL inspector, to count this database's records apart from what
/// other sessions of the server write meanwhile.
pub(crate) const CREATE_WALINSPECT: &str = "CREATE EXTENSION IF NOT EXISTS pg_walinspect";

/// Where the WAL is now.
pub(crate) const WAL_LSN: &str = "SELECT pg_current_wal_lsn()::text";

/// Bytes of WAL from `$1` to `$2`.
pub(crate) const WAL_DIFF: &str = "SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::int8";

/// Whether the WAL up to `$1` is flushed (and so readable by
/// `pg_walinspect`).
pub(crate) const WAL_FLUSHED: &str = "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn";

/// This database's WAL records from `$1` to `$2` (`$3`: its oid), by kind:
/// heap, B-tree, the commits of its transactions, anything else that names
/// one of its blocks; then the full-page images among them and how many
/// records. A record's length includes its full-page images.
pub(crate) const WAL_RECORDS: &str = "WITH r AS ( \
       SELECT xid::text::int8 AS xid, resource_manager, record_length, fpi_length, block_ref \
       FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)), \
     mine AS (SELECT * FROM r WHERE block_ref LIKE '%/' || $3::text || '/%'), \
     transactions AS (SELECT DISTINCT xid FROM mine WHERE xid <> 0), \
     commits AS (SELECT * FROM r WHERE resource_manager = 'Transaction' \
       AND xid IN (SELECT xid FROM transactions)) \
     SELECT \
       coalesce(sum(record_length) FILTER (WHERE resource_manager IN ('Heap', 'Heap2')), 0)::int8, \
       coalesce(sum(record_length) FILTER (WHERE resource_manager = 'Btree'), 0)::int8, \
       (SELECT coalesce(sum(record_length), 0) FROM commits)::int8, \
       coalesce(sum(record_length) FILTER (WHERE resource_manager NOT IN ('Heap', 'Heap2', 'Btree')), 0)::int8, \
       coalesce(sum(fpi_length), 0)::int8, \
       (count(*) + (SELECT count(*) FROM commits))::int8 \
     FROM mine";

/// This database's WAL records from `$1` to `$2` (`$3`: its oid) by
/// resource manager and record type: how many, and their bytes.
pub(crate) const WAL_RECORD_KINDS: &str = "SELECT resource_manager || '/' || record_type, \
       count(*)::int8, sum(record_length)::int8 \
     FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) \
     WHERE block_ref LIKE '%/' || $3::text || '/%' \
     GROUP BY 1";

/// Row changes on `outbox_events` as the statistics count them: updates,
/// of which HOT, and deletes.
pub(crate) const TABLE_CHANGES: &str = "SELECT n_tup_upd::int8, n_tup_hot_upd::int8, n_tup_del::int8 \
     FROM pg_stat_user_tables WHERE relname = 'outbox_events'";

/// The anchor [`fetch_from`] adds its bound after.
const EXCLUDED_IDS: &str = "AND e.id <> ALL($5::bigint[])";

/// `fetch` with one more condition, `e.id > $7`: the fetch of a relay that
/// remembers the last id it marked, so that an index holding published
/// rows is entered past them.
///
/// # Panics
/// When `fetch` no longer has the line the bound goes after.
pub(crate) fn fetch_from(fetch: &str) -> String {
    assert!(
        fetch.contains(EXCLUDED_IDS),
        "the fetch has no `{EXCLUDED_IDS}` to add the bound after"
    );
    fetch.replacen(
        EXCLUDED_IDS,
        &format!("{EXCLUDED_IDS}\n      AND e.id > $7"),
        1,
    )
}

/// The mark of batch N and the fetch of batch N + 1 in one statement: the
/// mark as a data-modifying CTE (PostgreSQL runs it to completion whether
/// or not the query reads it), then the fetch, its placeholders moved past
/// the mark's four: `$1`..`$4` the mark's, `$5`..`$10` the fetch's. The
/// fetch runs on the statement's snapshot, which still sees batch N
/// pending: its ids go in the fetch's list of ids left out (`$9`), as the
/// relay's in-flight ids already do.
pub(crate) fn mark_then_fetch(mark: &str, fetch: &str) -> String {
    let mark_parameters = highest_placeholder(mark);
    format!(
        "WITH marked AS (\n{}\n)\n{}",
        mark.trim_end().trim_end_matches(';'),
        shift_placeholders(fetch, mark_parameters)
    )
}

/// `sql` with every placeholder `$n` made `$(n + by)`.
pub(crate) fn shift_placeholders(sql: &str, by: u32) -> String {
    let mut shifted = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(dollar) = rest.find('$') {
        shifted.push_str(&rest[..=dollar]);
        rest = &rest[dollar + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let number: u32 = rest[..digits].parse().expect("placeholder number");
            shifted.push_str(&(number + by).to_string());
            rest = &rest[digits..];
        }
    }
    shifted.push_str(rest);
    shifted
}

/// The placeholders of `sql`, in ascending order, once each.
pub(crate) fn placeholders(sql: &str) -> Vec<u32> {
    let mut found: Vec<u32> = sql
        .split('$')
        .skip(1)
        .filter_map(|after| {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            after[..digits].parse().ok()
        })
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

fn highest_placeholder(sql: &str) -> u32 {
    placeholders(sql).last().copied().unwrap_or(0)
}

pub(crate) mod tests {
    use super::{
        FETCH_PENDING, MARK_PUBLISHED, fetch_from, mark_then_fetch, placeholders,
        shift_placeholders,
    };

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] = &[
        (
            "statements::shift_moves_every_placeholder",
            shift_moves_every_placeholder,
        ),
        (
            "statements::mark_then_fetch_numbers_ten_parameters",
            mark_then_fetch_numbers_ten_parameters,
        ),
        (
            "statements::fetch_from_adds_the_seventh",
            fetch_from_adds_the_seventh,
        ),
    ];

    fn shift_moves_every_placeholder() {
        assert_eq!(
            shift_placeholders("a = $1 AND b = ANY($10::int[]) AND c = '$'", 4),
            "a = $5 AND b = ANY($14::int[]) AND c = '$'"
        );
    }

    fn mark_then_fetch_numbers_ten_parameters() {
        assert_eq!(placeholders(MARK_PUBLISHED), (1..=4).collect::<Vec<_>>());
        assert_eq!(placeholders(FETCH_PENDING), (1..=6).collect::<Vec<_>>());
        let together = mark_then_fetch(MARK_PUBLISHED, FETCH_PENDING);
        assert_eq!(placeholders(&together), (1..=10).collect::<Vec<_>>());
        assert!(together.starts_with("WITH marked AS ("));
        assert!(together.contains("AND e.id <> ALL($9::bigint[])"));
    }

    fn fetch_from_adds_the_seventh() {
        let from = fetch_from(FETCH_PENDING);
        assert_eq!(placeholders(&from), (1..=7).collect::<Vec<_>>());
        assert!(from.contains("AND e.id > $7"));
    }
}
