//! One variant's run: a fresh database, migrated, the variant's schema
//! change, a backlog written by plain SQL `INSERT`s and never analyzed,
//! every partition lease taken as the relay takes them; then, on one
//! connection, a fetch before the work, the work over the first half of
//! the backlog, the fetch again, the work over the second half, with the
//! backend's CPU and the WAL read around each step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_relay::config::{DEFAULT_MAX_BATCH_BYTES, DeadLetterPolicy};
use outbox_relay::event::Lease;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, Row};

use crate::Settings;
use crate::cpu::{BackendCpu, CpuTime};
use crate::keys::KeyDistribution;
use crate::sql::DISABLE_AUTOVACUUM;
use crate::statements::{
    ACQUIRE_LEASES, COUNT_PENDING, CREATE_WALINSPECT, DATABASE_OID, DELETE_ACKNOWLEDGED,
    FETCH_PENDING, FETCH_SETTING, MARK_PUBLISHED, MARK_SETTING, PARTITION_COUNT, PENDING_IDS,
    ROW_WIDTH, SESSION_SETTINGS, TABLE_CHANGES, TABLE_SIZE, WAL_DIFF, WAL_FLUSHED, WAL_LSN,
    WAL_RECORD_KINDS, WAL_RECORDS, fetch_from, mark_then_fetch,
};
use crate::variants::{Settle, Variant, Work};
use crate::writers::write_backlog;

/// The relay id the leases are taken for.
const RELAY_ID: &str = "mark-cost";
/// How long the leases last: longer than any run.
const LEASE_SECONDS: f64 = 3600.0;
/// Aggregates of the backlog, drawn uniformly.
const AGGREGATES: u64 = 1000;
/// The topic of every event.
const TOPIC: &str = "mark-cost";
/// Events a fetch asks for: the relay's default batch.
const FETCH_LIMIT: i64 = 500;

/// The CPU of one fetch, in µs: the first one at that point and the mean
/// of the repeats after it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FetchCost {
    pub(crate) first_us: f64,
    pub(crate) repeat_us: f64,
    pub(crate) rows: usize,
}

/// This database's WAL records over the measured work, in bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalRecords {
    pub(crate) heap: i64,
    pub(crate) btree: i64,
    pub(crate) commits: i64,
    pub(crate) other: i64,
    /// Full-page images, counted in the kinds above too.
    pub(crate) full_pages: i64,
    pub(crate) records: i64,
    /// By resource manager and record type (`Heap/UPDATE`): records and
    /// bytes, most bytes first; commits are not among them.
    pub(crate) kinds: Vec<(String, i64, i64)>,
}

impl WalRecords {
    pub(crate) fn total(&self) -> i64 {
        self.heap + self.btree + self.commits + self.other
    }

    fn add(&mut self, other: WalRecords) {
        self.heap += other.heap;
        self.btree += other.btree;
        self.commits += other.commits;
        self.other += other.other;
        self.full_pages += other.full_pages;
        self.records += other.records;
        for (kind, records, bytes) in other.kinds {
            match self.kinds.iter_mut().find(|(known, _, _)| *known == kind) {
                Some(entry) => {
                    entry.1 += records;
                    entry.2 += bytes;
                }
                None => self.kinds.push((kind, records, bytes)),
            }
        }
        self.kinds
            .sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    }
}

/// What one variant's run measured.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    pub(crate) variant: Variant,
    pub(crate) events: u64,
    /// Mean bytes of a row and of its payload as text.
    pub(crate) row_bytes: f64,
    pub(crate) payload_bytes: f64,
    /// The backend's CPU over the work (the fetches measured apart left
    /// out), and the wall time.
    pub(crate) cpu: CpuTime,
    pub(crate) wall: Duration,
    /// `pg_wal_lsn_diff` over the work: every session's WAL.
    pub(crate) wal_lsn: i64,
    /// This database's own records over the work, when `pg_walinspect`
    /// could read them.
    pub(crate) wal_records: Option<WalRecords>,
    /// Updates and HOT updates the statistics counted, and deletes.
    pub(crate) updates: i64,
    pub(crate) hot_updates: i64,
    pub(crate) deletes: i64,
    pub(crate) fetch_before: FetchCost,
    pub(crate) fetch_after: FetchCost,
    /// The fetch after half the backlog, entered past the last marked id.
    pub(crate) fetch_after_from_last: FetchCost,
    /// Buffers the fetch after half the backlog touched, and the indexes
    /// its plan used.
    pub(crate) fetch_after_buffers: i64,
    pub(crate) fetch_after_indexes: Vec<String>,
    /// Statements sent per batch settled.
    pub(crate) statements_per_batch: f64,
    /// Heap pages before and after the work; index bytes after.
    pub(crate) heap_pages_before: i64,
    pub(crate) heap_pages_after: i64,
    pub(crate) index_bytes_after: i64,
}

/// The fence of every write: the relay, the partition count, the leases.
struct Fence {
    partition_count: i32,
    partitions: Vec<i32>,
    leases: String,
}

/// The statements of one run, built once.
struct Sql {
    settle: &'static str,
    together: Arc<str>,
}

/// The measured connection, its backend, and how many statements it
/// sent.
struct Session {
    connection: PgConnection,
    cpu: BackendCpu,
    statements: u64,
}

/// Run `variant` on a database of its own.
pub(crate) async fn run(variant: Variant, settings: &Settings) -> Figures {
    let database = outbox_testkit::postgres().await;
    let pool = database.pool().clone();
    outbox::migrate(&pool).await.expect("migrate");
    execute(&pool, DISABLE_AUTOVACUUM).await;
    let walinspect = sqlx::query(CREATE_WALINSPECT).execute(&pool).await;
    if let Err(error) = &walinspect {
        println!("  no pg_walinspect ({error}): WAL from the LSN alone");
    }
    for statement in variant.schema {
        execute(&pool, statement).await;
    }
    let payload_bytes = variant.payload_bytes.unwrap_or(settings.payload_bytes);
    let writing = write_backlog(
        &pool,
        TOPIC,
        KeyDistribution::Uniform {
            aggregates: AGGREGATES,
        },
        settings.events,
        payload_bytes,
    )
    .await;
    let (row_bytes, payload_text_bytes, heap_pages_before): (f64, f64, i64) =
        sqlx::query_as(ROW_WIDTH)
            .fetch_one(&pool)
            .await
            .expect("row width");
    let fence = take_leases(&pool).await;
    let ids: Vec<i64> = sqlx::query_scalar(PENDING_IDS)
        .fetch_all(&pool)
        .await
        .expect("read the backlog's ids");
    assert_eq!(ids.len() as u64, settings.events, "the backlog's size");
    let database_oid: i64 = sqlx::query_scalar(DATABASE_OID)
        .fetch_one(&pool)
        .await
        .expect("database oid");
    println!(
        "  {}: backlog of {} written in {:.1} s; row {:.0} bytes, payload {:.0} bytes, {} heap pages",
        variant.name,
        ids.len(),
        writing.as_secs_f64(),
        row_bytes,
        payload_text_bytes,
        heap_pages_before
    );

    let sql = Sql {
        settle: match variant.work {
            Work::Mark {
                settle: Settle::Delete,
                ..
            } => DELETE_ACKNOWLEDGED,
            _ => MARK_PUBLISHED,
        },
        together: mark_then_fetch(MARK_PUBLISHED, FETCH_PENDING).into(),
    };
    let mut connection = PgConnection::connect(database.url())
        .await
        .expect("connect the measured session");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut connection)
        .await
        .expect("backend pid");
    let mut session = Session {
        connection,
        cpu: BackendCpu::new(pid),
        statements: 0,
    };
    if let Work::Loop {
        session_settings: true,
        ..
    } = variant.work
    {
        for setting in SESSION_SETTINGS {
            sqlx::query(*setting)
                .execute(&mut session.connection)
                .await
                .expect("session setting");
        }
    }

    let fetch_before = fetch_cost(&mut session, &fence, None, settings.repeats).await;
    let half = ids.len() / 2;
    let mut work = WorkState::new(variant.work, &ids, settings.repeats);
    let mut cpu = CpuTime::default();
    let mut wall = Duration::ZERO;
    let mut wal_lsn = 0;
    let mut windows = Vec::new();
    let mut batches = 0;
    session.statements = 0;
    for (index, until) in [half, ids.len()].into_iter().enumerate() {
        let start_lsn = wal_lsn_now(&pool).await;
        let started = Instant::now();
        let before = session.cpu.read();
        batches += work.run_until(&mut session, &sql, &fence, until).await;
        let after = session.cpu.read();
        wall += started.elapsed();
        cpu = cpu + (after - before);
        let end_lsn = wal_lsn_now(&pool).await;
        wal_lsn += wal_diff(&pool, &start_lsn, &end_lsn).await;
        windows.push((start_lsn, end_lsn));
        if index == 0 {
            work.pause(&mut session, &fence).await;
        }
    }
    let statements_per_batch = session.statements as f64 / batches.max(1) as f64;
    // The fetches after half the backlog ran between the two halves; they
    // were measured apart, here kept apart from the work's figures.
    let (fetch_after, fetch_after_from_last, fetch_after_buffers, fetch_after_indexes) =
        work.fetches_after.take().unwrap_or_default();
    session
        .connection
        .close()
        .await
        .expect("close the measured session");

    let pending: i64 = sqlx::query_scalar(COUNT_PENDING)
        .fetch_one(&pool)
        .await
        .expect("count pending");
    assert_eq!(pending, 0, "{}: events left pending", variant.name);
    let wal_records = if walinspect.is_ok() {
        wal_records(&pool, database_oid, &windows).await
    } else {
        None
    };
    let (updates, hot_updates, deletes) = table_changes(&pool, settings.events).await;
    let (heap_pages_after, index_bytes_after): (i64, i64) = sqlx::query_as(TABLE_SIZE)
        .fetch_one(&pool)
        .await
        .expect("table size");
    pool.close().await;
    drop(database);
    Figures {
        variant,
        events: settings.events,
        row_bytes,
        payload_bytes: payload_text_bytes,
        cpu,
        wall,
        wal_lsn,
        wal_records,
        updates,
        hot_updates,
        deletes,
        fetch_before,
        fetch_after,
        fetch_after_from_last,
        fetch_after_buffers,
        fetch_after_indexes,
        statements_per_batch,
        heap_pages_before,
        heap_pages_after,
        index_bytes_after,
    }
}

/// The fetches measured after half the backlog.
type FetchesAfter = (FetchCost, FetchCost, i64, Vec<String>);

/// Where the work over the backlog is.
struct WorkState<'a> {
    work: Work,
    ids: &'a [i64],
    /// Events settled so far.
    settled: usize,
    /// The loop's batch fetched and not yet marked.
    in_flight: Option<Vec<i64>>,
    /// Set once, between the halves.
    fetches_after: Option<FetchesAfter>,
    /// The repeats of each measured fetch.
    repeats: usize,
}

impl<'a> WorkState<'a> {
    fn new(work: Work, ids: &'a [i64], repeats: usize) -> WorkState<'a> {
        WorkState {
            work,
            ids,
            settled: 0,
            in_flight: None,
            fetches_after: None,
            repeats,
        }
    }

    /// Settle events until `until` are settled, or none is left; returns
    /// the batches settled.
    async fn run_until(
        &mut self,
        session: &mut Session,
        sql: &Sql,
        fence: &Fence,
        until: usize,
    ) -> u64 {
        let mut batches = 0;
        match self.work {
            Work::Mark { batch, .. } => {
                while self.settled < until {
                    let end = (self.settled + batch).min(until);
                    let changed =
                        settle(session, sql.settle, fence, &self.ids[self.settled..end]).await;
                    assert_eq!(changed as usize, end - self.settled, "rows settled");
                    self.settled = end;
                    batches += 1;
                }
            }
            Work::Loop {
                together,
                session_settings,
            } => {
                if self.in_flight.is_none() && self.settled == 0 {
                    let first = fetch(session, fence, &[], None, session_settings).await;
                    self.in_flight = Some(first);
                }
                while self.settled < until {
                    let Some(current) = self.in_flight.take() else {
                        break;
                    };
                    if current.is_empty() {
                        break;
                    }
                    let next = if together {
                        mark_and_fetch(session, &sql.together, fence, &current, session_settings)
                            .await
                    } else {
                        let next = fetch(session, fence, &current, None, session_settings).await;
                        let changed = if session_settings {
                            settle_alone(session, sql.settle, fence, &current).await
                        } else {
                            settle(session, sql.settle, fence, &current).await
                        };
                        assert_eq!(changed as usize, current.len(), "rows marked");
                        next
                    };
                    self.settled += current.len();
                    self.in_flight = Some(next);
                    batches += 1;
                }
            }
        }
        batches
    }

    /// Between the halves: the fetch after half the backlog, from its
    /// start and from the last settled id, and its plan's buffers.
    async fn pause(&mut self, session: &mut Session, fence: &Fence) {
        let statements = session.statements;
        let repeats = self.repeats.max(1);
        let after = fetch_cost(session, fence, None, repeats).await;
        let last = self
            .settled
            .checked_sub(1)
            .map_or(0, |index| self.ids[index]);
        let from_last = fetch_cost(session, fence, Some(last), repeats).await;
        let (buffers, indexes) = explain_fetch(&mut session.connection, fence).await;
        session.statements = statements;
        self.fetches_after = Some((after, from_last, buffers, indexes));
    }
}

/// Run `statement` on `pool`, or fail.
async fn execute(pool: &PgPool, statement: &'static str) {
    sqlx::query(statement)
        .execute(pool)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}

/// Every partition's lease, taken as the relay takes them.
async fn take_leases(pool: &PgPool) -> Fence {
    let partition_count: i32 = sqlx::query_scalar(PARTITION_COUNT)
        .fetch_one(pool)
        .await
        .expect("partition count");
    let rows = sqlx::query(ACQUIRE_LEASES)
        .bind(RELAY_ID)
        .bind(LEASE_SECONDS)
        .bind(i64::from(partition_count))
        .fetch_all(pool)
        .await
        .expect("acquire leases");
    let leases: Vec<Lease> = rows
        .iter()
        .map(|row| Lease {
            partition_no: row.get(0),
            lease_token: row.get(1),
        })
        .collect();
    assert_eq!(leases.len(), partition_count as usize, "every lease taken");
    Fence {
        partition_count,
        partitions: leases.iter().map(|lease| lease.partition_no).collect(),
        leases: serde_json::to_string(&leases).expect("leases as JSON"),
    }
}

/// The mark's `$1`..`$4` bound on `query`, as the relay binds them.
fn fenced<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    fence: &Fence,
    ids: &[i64],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(RELAY_ID)
        .bind(fence.partition_count)
        .bind(fence.leases.clone())
        .bind(ids.to_vec())
}

/// The fetch's six values, as the relay binds them.
fn fetch_values<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    fence: &Fence,
    exclude: &[i64],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(fence.partition_count)
        .bind(fence.partitions.clone())
        .bind(DeadLetterPolicy::default() == DeadLetterPolicy::Hold)
        .bind(FETCH_LIMIT)
        .bind(exclude.to_vec())
        .bind(i64::try_from(DEFAULT_MAX_BATCH_BYTES).unwrap_or(i64::MAX))
}

/// Settle `ids` as the relay does: `BEGIN`, `SET LOCAL synchronous_commit
/// = off`, the statement, `COMMIT`. Returns the rows changed.
async fn settle(session: &mut Session, statement: &'static str, fence: &Fence, ids: &[i64]) -> u64 {
    let mut transaction = session.connection.begin().await.expect("begin");
    sqlx::query(MARK_SETTING)
        .execute(&mut *transaction)
        .await
        .expect("mark setting");
    let changed = fenced(sqlx::query(statement), fence, ids)
        .execute(&mut *transaction)
        .await
        .expect("settle")
        .rows_affected();
    transaction.commit().await.expect("commit");
    session.statements += 4;
    changed
}

/// Settle `ids` in one statement, the settings made for the session.
async fn settle_alone(
    session: &mut Session,
    statement: &'static str,
    fence: &Fence,
    ids: &[i64],
) -> u64 {
    let changed = fenced(sqlx::query(statement), fence, ids)
        .execute(&mut session.connection)
        .await
        .expect("settle")
        .rows_affected();
    session.statements += 1;
    changed
}

/// The relay's fetch, `exclude` left out, entered past `after` when
/// given: `BEGIN`, `SET LOCAL enable_sort = off`, the fetch (planned for
/// its values, not prepared), `COMMIT`; or the fetch alone with
/// `session_settings`. Returns the ids fetched.
async fn fetch(
    session: &mut Session,
    fence: &Fence,
    exclude: &[i64],
    after: Option<i64>,
    session_settings: bool,
) -> Vec<i64> {
    let sql: Arc<str> = match after {
        None => Arc::from(FETCH_PENDING),
        Some(_) => Arc::from(fetch_from(FETCH_PENDING)),
    };
    let mut query = fetch_values(sqlx::query(AssertSqlSafe(sql)), fence, exclude);
    if let Some(after) = after {
        query = query.bind(after);
    }
    let query = query.persistent(false);
    let rows = if session_settings {
        session.statements += 1;
        query
            .fetch_all(&mut session.connection)
            .await
            .expect("fetch")
    } else {
        let mut transaction = session.connection.begin().await.expect("begin");
        sqlx::query(FETCH_SETTING)
            .execute(&mut *transaction)
            .await
            .expect("fetch setting");
        let rows = query.fetch_all(&mut *transaction).await.expect("fetch");
        transaction.commit().await.expect("commit");
        session.statements += 4;
        rows
    };
    rows.iter().map(|row| row.get::<i64, _>(0)).collect()
}

/// Mark `ids` and fetch the next batch in one statement (the mark as a
/// data-modifying CTE), in a transaction with both settings or, with
/// `session_settings`, alone. Returns the ids fetched.
async fn mark_and_fetch(
    session: &mut Session,
    together: &Arc<str>,
    fence: &Fence,
    ids: &[i64],
    session_settings: bool,
) -> Vec<i64> {
    let query = fetch_values(
        fenced(sqlx::query(AssertSqlSafe(Arc::clone(together))), fence, ids),
        fence,
        ids,
    )
    .persistent(false);
    let rows = if session_settings {
        session.statements += 1;
        query
            .fetch_all(&mut session.connection)
            .await
            .expect("mark and fetch")
    } else {
        let mut transaction = session.connection.begin().await.expect("begin");
        for setting in [MARK_SETTING, FETCH_SETTING] {
            sqlx::query(setting)
                .execute(&mut *transaction)
                .await
                .expect("setting");
        }
        let rows = query
            .fetch_all(&mut *transaction)
            .await
            .expect("mark and fetch");
        transaction.commit().await.expect("commit");
        session.statements += 5;
        rows
    };
    rows.iter().map(|row| row.get::<i64, _>(0)).collect()
}

/// The backend CPU of the relay's fetch (in its transaction), once and
/// then `repeats` times more, in µs.
async fn fetch_cost(
    session: &mut Session,
    fence: &Fence,
    after: Option<i64>,
    repeats: usize,
) -> FetchCost {
    let timed = async |session: &mut Session| {
        let before = session.cpu.read();
        let rows = fetch(session, fence, &[], after, false).await;
        let spent = session.cpu.read() - before;
        (spent.sched_seconds * 1e6, rows.len())
    };
    let (first_us, rows) = timed(session).await;
    let mut total = 0.0;
    for _ in 0..repeats {
        total += timed(session).await.0;
    }
    FetchCost {
        first_us,
        repeat_us: total / repeats.max(1) as f64,
        rows,
    }
}

/// The fetch's plan, run (`EXPLAIN (ANALYZE, BUFFERS)`): the buffers it
/// touched and the indexes it used.
async fn explain_fetch(connection: &mut PgConnection, fence: &Fence) -> (i64, Vec<String>) {
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {FETCH_PENDING}");
    let mut transaction = connection.begin().await.expect("begin");
    sqlx::query(FETCH_SETTING)
        .execute(&mut *transaction)
        .await
        .expect("fetch setting");
    let plan: serde_json::Value = fetch_values(sqlx::query(AssertSqlSafe(explain)), fence, &[])
        .persistent(false)
        .fetch_one(&mut *transaction)
        .await
        .expect("explain the fetch")
        .get(0);
    transaction.rollback().await.expect("rollback");
    let top = &plan[0]["Plan"];
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|key| top[*key].as_i64())
        .sum();
    let mut indexes = Vec::new();
    index_names(top, &mut indexes);
    indexes.sort();
    indexes.dedup();
    (buffers, indexes)
}

fn index_names(node: &serde_json::Value, names: &mut Vec<String>) {
    if let Some(name) = node["Index Name"].as_str() {
        names.push(name.to_owned());
    }
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            index_names(child, names);
        }
    }
}

async fn wal_lsn_now(pool: &PgPool) -> String {
    sqlx::query_scalar(WAL_LSN)
        .fetch_one(pool)
        .await
        .expect("WAL position")
}

async fn wal_diff(pool: &PgPool, start: &str, end: &str) -> i64 {
    sqlx::query_scalar(WAL_DIFF)
        .bind(start)
        .bind(end)
        .fetch_one(pool)
        .await
        .expect("WAL difference")
}

/// This database's WAL records within `windows`, once the WAL is flushed
/// that far; `None` when it cannot be read (a checkpoint may have
/// recycled it).
async fn wal_records(
    pool: &PgPool,
    database_oid: i64,
    windows: &[(String, String)],
) -> Option<WalRecords> {
    let last = &windows.last()?.1;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let flushed: bool = sqlx::query_scalar(WAL_FLUSHED)
            .bind(last)
            .fetch_one(pool)
            .await
            .expect("WAL flush position");
        if flushed || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut total = WalRecords::default();
    for (start, end) in windows {
        let row = sqlx::query(WAL_RECORDS)
            .bind(start)
            .bind(end)
            .bind(database_oid)
            .fetch_one(pool)
            .await;
        let kinds = sqlx::query_as::<_, (String, i64, i64)>(WAL_RECORD_KINDS)
            .bind(start)
            .bind(end)
            .bind(database_oid)
            .fetch_all(pool)
            .await;
        match row.and_then(|row| Ok((row, kinds?))) {
            Ok((row, kinds)) => total.add(WalRecords {
                heap: row.get(0),
                btree: row.get(1),
                commits: row.get(2),
                other: row.get(3),
                full_pages: row.get(4),
                records: row.get(5),
                kinds,
            }),
            Err(error) => {
                println!("  cannot read the WAL from {start} to {end}: {error}");
                return None;
            }
        }
    }
    Some(total)
}

/// Updates, HOT updates and deletes of `outbox_events`, once the measured
/// session's statistics arrived (it reports them as it ends): at least
/// `events` rows changed, or after 10 s whatever there is.
async fn table_changes(pool: &PgPool, events: u64) -> (i64, i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (updates, hot, deletes): (i64, i64, i64) = sqlx::query_as(TABLE_CHANGES)
            .fetch_one(pool)
            .await
            .expect("table statistics");
        if (updates + deletes) as u64 >= events || Instant::now() > deadline {
            return (updates, hot, deletes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
