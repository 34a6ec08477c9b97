//! Inbox benchmark (issue 4): the throughput of a handler wrapped in
//! [`Inbox::process`] beside the same handler in a plain transaction, and
//! the rate at which the inbox turns away redelivered events.
//!
//! ```sh
//! cargo bench -p outbox-inbox --bench inbox_throughput
//! OUTBOX_BENCH_EVENTS=5000 cargo bench -p outbox-inbox --bench inbox_throughput
//! cargo bench -p outbox-inbox --bench inbox_throughput -- --events 5000 --only postgres
//! ```
//!
//! Needs the test services (`scripts/test.sh --services-only`): PostgreSQL
//! and MariaDB; SQLite uses a temporary file. Every scenario gets a fresh
//! database (from `outbox-testkit`, then `outbox::migrate`), which is
//! dropped at the end of the scenario.
//!
//! The handler is a small business write in the handler's transaction:
//! `UPDATE accounts SET balance = balance + $1 WHERE id = $2` (1,000
//! accounts) and an `INSERT` into `ledger`. For every backend and worker
//! count the benchmark runs, each on a fresh database of its own:
//! - **without inbox:** `pool.begin()`, the handler, `commit`, per event;
//! - **with inbox:** `Inbox::process(event_id, handler)` per event.
//!
//! The two take turns on five slices of the events (without, with,
//! without, ...), each slice driven to the end by all workers, so that load
//! from elsewhere on the machine falls on both; each rate is over the five
//! slices together. Then:
//! - **duplicates:** every event id delivered again to the same inbox
//!   (every outcome must be `Outcome::Duplicate`).
//!
//! Settings, as environment variables or `--name value` arguments:
//! - `OUTBOX_BENCH_EVENTS` / `--events`: events per run (20000).
//! - `OUTBOX_BENCH_WORKERS` / `--workers`: concurrent workers of each run,
//!   comma-separated (`1,8`).
//! - `OUTBOX_BENCH_ONLY` / `--only`: backends, comma-separated, out of
//!   `postgres`, `mariadb` and `sqlite` (all three).
//! - `OUTBOX_TEST_POSTGRES_URL`, `OUTBOX_TEST_MYSQL_URL`: the servers, as
//!   for the tests.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use outbox_inbox::{BoxError, Inbox, InboxBackend, Outcome};
use outbox_testkit::{TestBackend, TestDatabase};
use sqlx::{MySql, Pool, Postgres, Sqlite};
use uuid::Uuid;

mod settings;

use settings::Settings;

/// Accounts the events are spread over.
const ACCOUNTS: i64 = 1000;
/// The inbox's consumer name.
const CONSUMER: &str = "ledger";
/// Slices of the events that the runs with and without the inbox take
/// turns on.
const ROUNDS: usize = 5;

// ---------------------------------------------------------------------------
// The business write, per backend

/// What one event asks the handler to do.
#[derive(Debug)]
struct Delivery {
    event_id: String,
    account: i64,
    amount: i64,
}

/// The events of every run: UUIDv7 ids, as the relay sends, spread over the
/// accounts. Leaked, so handlers can borrow them for `'static`.
fn deliveries(events: usize) -> &'static [Delivery] {
    let deliveries: Vec<Delivery> = (0..events)
        .map(|sequence| Delivery {
            event_id: Uuid::now_v7().to_string(),
            account: (sequence as i64 * 7919) % ACCOUNTS + 1,
            amount: sequence as i64 % 100 + 1,
        })
        .collect();
    Vec::leak(deliveries)
}

/// A backend under test: its schema for the handler's tables and the
/// handler's two statements.
trait BenchBackend: InboxBackend + TestBackend {
    /// Name in `OUTBOX_BENCH_ONLY`.
    const KEY: &'static str;
    const CREATE_ACCOUNTS: &'static str;
    const CREATE_LEDGER: &'static str;
    /// Version and durability settings, each as one row of text.
    const DESCRIBE: &'static [&'static str];

    /// The business write: credit the account and append a ledger row.
    fn business_write<'c>(
        connection: &'c mut <Self as sqlx::Database>::Connection,
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;
}

macro_rules! bench_backend {
    (
        $database:ty,
        key: $key:literal,
        accounts: $accounts:literal,
        ledger: $ledger:literal,
        describe: $describe:expr,
        update: $update:literal,
        insert: $insert:literal $(,)?
    ) => {
        impl BenchBackend for $database {
            const KEY: &'static str = $key;
            const CREATE_ACCOUNTS: &'static str = $accounts;
            const CREATE_LEDGER: &'static str = $ledger;
            const DESCRIBE: &'static [&'static str] = $describe;

            fn business_write<'c>(
                connection: &'c mut <Self as sqlx::Database>::Connection,
                delivery: &'c Delivery,
            ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query($update)
                        .bind(delivery.amount)
                        .bind(delivery.account)
                        .execute(&mut *connection)
                        .await?;
                    sqlx::query($insert)
                        .bind(delivery.event_id.as_str())
                        .bind(delivery.account)
                        .bind(delivery.amount)
                        .execute(&mut *connection)
                        .await?;
                    Ok(())
                })
            }
        }
    };
}

bench_backend!(
    Postgres,
    key: "postgres",
    accounts: "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0)",
    ledger: "CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, event_id TEXT NOT NULL, \
             account_id BIGINT NOT NULL, amount BIGINT NOT NULL, \
             created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    describe: &[
        "SELECT version()",
        "SELECT 'synchronous_commit=' || current_setting('synchronous_commit') \
         || ', fsync=' || current_setting('fsync') \
         || ', shared_buffers=' || current_setting('shared_buffers')",
    ],
    update: "UPDATE accounts SET balance = balance + $1 WHERE id = $2",
    insert: "INSERT INTO ledger (event_id, account_id, amount) VALUES ($1, $2, $3)",
);

bench_backend!(
    MySql,
    key: "mariadb",
    accounts: "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0) \
               ENGINE = InnoDB",
    ledger: "CREATE TABLE ledger (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             event_id VARCHAR(64) NOT NULL, account_id BIGINT NOT NULL, amount BIGINT NOT NULL, \
             created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE = InnoDB",
    describe: &[
        "SELECT VERSION()",
        "SELECT CAST(CONCAT('innodb_flush_log_at_trx_commit=', @@innodb_flush_log_at_trx_commit, \
         ', sync_binlog=', @@sync_binlog, ', log_bin=', @@log_bin, \
         ', innodb_buffer_pool_size=', @@innodb_buffer_pool_size) AS CHAR)",
    ],
    update: "UPDATE accounts SET balance = balance + ? WHERE id = ?",
    insert: "INSERT INTO ledger (event_id, account_id, amount) VALUES (?, ?, ?)",
);

bench_backend!(
    Sqlite,
    key: "sqlite",
    accounts: "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL DEFAULT 0)",
    ledger: "CREATE TABLE ledger (id INTEGER PRIMARY KEY, event_id TEXT NOT NULL, \
             account_id INTEGER NOT NULL, amount INTEGER NOT NULL, \
             created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
    describe: &[
        "SELECT 'SQLite ' || sqlite_version()",
        "SELECT 'journal_mode=' || (SELECT journal_mode FROM pragma_journal_mode) \
         || ', synchronous=' || (SELECT synchronous FROM pragma_synchronous)",
    ],
    update: "UPDATE accounts SET balance = balance + ? WHERE id = ?",
    insert: "INSERT INTO ledger (event_id, account_id, amount) VALUES (?, ?, ?)",
);

/// The handler, identical on both paths: the business write in `tx`.
async fn handler<DB: BenchBackend>(
    tx: &mut DB::Connection,
    delivery: &'static Delivery,
) -> Result<(), BoxError> {
    DB::business_write(tx, delivery).await?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Databases

/// A fresh database with the outbox schema, the handler's tables and
/// `ACCOUNTS` accounts.
async fn prepare<DB, F, Fut>(fresh: &F) -> TestDatabase<DB>
where
    DB: BenchBackend,
    F: Fn() -> Fut,
    Fut: Future<Output = TestDatabase<DB>>,
{
    let db = fresh().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, DB::CREATE_ACCOUNTS)
        .await
        .expect("create accounts");
    DB::execute(&mut connection, DB::CREATE_LEDGER)
        .await
        .expect("create ledger");
    let values: Vec<String> = (1..=ACCOUNTS).map(|id| format!("({id}, 0)")).collect();
    let seed = format!(
        "INSERT INTO accounts (id, balance) VALUES {}",
        values.join(", ")
    );
    DB::execute(&mut connection, &seed)
        .await
        .expect("seed accounts");
    drop(connection);
    db
}

/// Open `workers` connections before the clock starts.
async fn warm_up<DB: BenchBackend>(pool: &Pool<DB>, workers: usize) {
    let connections = futures::future::try_join_all((0..workers).map(|_| pool.acquire()))
        .await
        .expect("open the pool's connections");
    drop(connections);
}

async fn count<DB: BenchBackend>(pool: &Pool<DB>, sql: &str) -> i64 {
    let mut connection = pool.acquire().await.expect("acquire");
    DB::fetch_i64(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

/// Close the pool, then drop (or delete) the database.
async fn discard<DB: BenchBackend>(db: TestDatabase<DB>) {
    db.pool().close().await;
    drop(db);
}

// ---------------------------------------------------------------------------
// Runs

/// One delivery: `Ok(true)` when the handler ran, `Ok(false)` for a
/// duplicate.
type Job = Arc<dyn Fn(&'static Delivery) -> BoxFuture<'static, Result<bool, String>> + Send + Sync>;

struct Run {
    elapsed: Duration,
    processed: usize,
    duplicates: usize,
    /// Per delivery, in microseconds, sorted.
    latencies: Vec<u64>,
}

impl Run {
    /// The rounds of one path taken together.
    fn merge(runs: Vec<Run>) -> Run {
        let mut merged = Run {
            elapsed: Duration::ZERO,
            processed: 0,
            duplicates: 0,
            latencies: Vec::new(),
        };
        for run in runs {
            merged.elapsed += run.elapsed;
            merged.processed += run.processed;
            merged.duplicates += run.duplicates;
            merged.latencies.extend(run.latencies);
        }
        merged.latencies.sort_unstable();
        merged
    }

    fn rate(&self) -> f64 {
        (self.processed + self.duplicates) as f64 / self.elapsed.as_secs_f64()
    }

    fn percentile(&self, fraction: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let index = ((self.latencies.len() as f64 * fraction).ceil() as usize)
            .clamp(1, self.latencies.len())
            - 1;
        self.latencies[index] as f64 / 1000.0
    }

    fn describe(&self) -> String {
        format!(
            "{:>7.0}/s  ({} in {:.2} s; per delivery p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms)",
            self.rate(),
            self.processed + self.duplicates,
            self.elapsed.as_secs_f64(),
            self.percentile(0.50),
            self.percentile(0.99),
            self.latencies.last().copied().unwrap_or(0) as f64 / 1000.0
        )
    }
}

/// Deliver every event once with `workers` concurrent workers, each taking
/// the next event when its previous one is done.
async fn drive(workers: usize, deliveries: &'static [Delivery], job: Job) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let next = Arc::clone(&next);
            let job = Arc::clone(&job);
            tokio::spawn(async move {
                let (mut processed, mut duplicates) = (0, 0);
                let mut latencies = Vec::with_capacity(deliveries.len() / workers + 1);
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(delivery) = deliveries.get(index) else {
                        break;
                    };
                    let began = Instant::now();
                    match job(delivery).await {
                        Ok(true) => processed += 1,
                        Ok(false) => duplicates += 1,
                        Err(error) => panic!("event {}: {error}", delivery.event_id),
                    }
                    latencies.push(began.elapsed().as_micros() as u64);
                }
                (processed, duplicates, latencies)
            })
        })
        .collect();
    let (mut processed, mut duplicates, mut latencies) = (0, 0, Vec::new());
    for task in tasks {
        let (task_processed, task_duplicates, task_latencies) = task.await.expect("worker");
        processed += task_processed;
        duplicates += task_duplicates;
        latencies.extend(task_latencies);
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Run {
        elapsed,
        processed,
        duplicates,
        latencies,
    }
}

/// Without the inbox: begin, the handler, commit.
fn plain_job<DB: BenchBackend>(pool: Pool<DB>) -> Job {
    Arc::new(move |delivery| {
        let pool = pool.clone();
        Box::pin(async move {
            let mut tx = pool.begin().await.map_err(|error| error.to_string())?;
            handler::<DB>(&mut *tx, delivery)
                .await
                .map_err(|error| error.to_string())?;
            tx.commit().await.map_err(|error| error.to_string())?;
            Ok(true)
        })
    })
}

/// With the inbox: `Inbox::process(event_id, handler)`.
fn inbox_job<DB: BenchBackend>(inbox: Inbox<DB>) -> Job {
    Arc::new(move |delivery| {
        let inbox = inbox.clone();
        Box::pin(async move {
            let outcome = inbox
                .process(&delivery.event_id, async |tx| {
                    handler::<DB>(tx, delivery).await
                })
                .await
                .map_err(|error| error.to_string())?;
            Ok(matches!(outcome, Outcome::Processed(())))
        })
    })
}

struct Figures {
    backend: &'static str,
    workers: usize,
    without: Run,
    with: Run,
    duplicates: Run,
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".to_owned())
}

async fn scenarios<DB, F, Fut>(
    settings: &Settings,
    deliveries: &'static [Delivery],
    fresh: F,
) -> Vec<Figures>
where
    DB: BenchBackend,
    F: Fn() -> Fut,
    Fut: Future<Output = TestDatabase<DB>>,
{
    let events = deliveries.len() as i64;
    let mut figures = Vec::new();
    println!("== {}", DB::LABEL);
    {
        let db = fresh().await;
        let mut connection = db.pool().acquire().await.expect("acquire");
        for sql in DB::DESCRIBE {
            let rows = DB::fetch_strings(&mut connection, sql)
                .await
                .unwrap_or_else(|error| panic!("{sql}: {error}"));
            println!("   {}", rows.join(" "));
        }
        drop(connection);
        discard(db).await;
    }
    for &workers in &settings.workers {
        println!("-- {} worker(s), load average {}", workers, load_average());

        // Both databases exist before the clock starts; the two paths then
        // take turns on slices of the events, so that a burst of load from
        // elsewhere on the machine falls on both.
        let plain_db = prepare(&fresh).await;
        let inbox_db = prepare(&fresh).await;
        let inbox = Inbox::new(inbox_db.pool().clone(), CONSUMER).expect("inbox");
        warm_up(plain_db.pool(), workers).await;
        warm_up(inbox_db.pool(), workers).await;
        let slice = deliveries.len().div_ceil(ROUNDS);
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for part in deliveries.chunks(slice) {
            without.push(drive(workers, part, plain_job(plain_db.pool().clone())).await);
            with.push(drive(workers, part, inbox_job(inbox.clone())).await);
        }
        let ratios: Vec<String> = without
            .iter()
            .zip(&with)
            .map(|(without, with)| format!("{:.2}", with.rate() / without.rate()))
            .collect();
        let (without, with) = (Run::merge(without), Run::merge(with));
        assert_eq!(without.processed, deliveries.len());
        assert_eq!(
            count(plain_db.pool(), "SELECT COUNT(*) FROM ledger").await,
            events
        );
        discard(plain_db).await;
        assert_eq!(with.processed, deliveries.len(), "every event is new");
        println!("   without inbox  {}", without.describe());
        println!("   with inbox     {}", with.describe());
        println!(
            "   with / without per round of {slice} events: {}",
            ratios.join(", ")
        );
        let db = inbox_db;
        let duplicates = drive(workers, deliveries, inbox_job(inbox)).await;
        assert_eq!(
            duplicates.duplicates,
            deliveries.len(),
            "every redelivery is a duplicate"
        );
        assert_eq!(
            count(db.pool(), "SELECT COUNT(*) FROM ledger").await,
            events
        );
        assert_eq!(
            count(db.pool(), "SELECT COUNT(*) FROM inbox_messages").await,
            events
        );
        println!("   duplicates     {}", duplicates.describe());
        println!(
            "   with / without = {:.2}; inbox cost per event at this rate: {:+.3} ms of wall time",
            with.rate() / without.rate(),
            1000.0 / with.rate() - 1000.0 / without.rate()
        );
        discard(db).await;

        figures.push(Figures {
            backend: DB::LABEL,
            workers,
            without,
            with,
            duplicates,
        });
    }
    figures
}

#[tokio::main]
async fn main() {
    let settings = Settings::load();
    let deliveries = deliveries(settings.events);
    println!(
        "inbox_throughput: {} events/run, {} accounts, workers {:?}, {} cores, load average {}",
        settings.events,
        ACCOUNTS,
        settings.workers,
        std::thread::available_parallelism().map_or(0, |cores| cores.get()),
        load_average()
    );
    let mut figures = Vec::new();
    if settings.runs(Postgres::KEY) {
        figures.extend(scenarios(&settings, deliveries, outbox_testkit::postgres).await);
    }
    if settings.runs(MySql::KEY) {
        figures.extend(scenarios(&settings, deliveries, outbox_testkit::mysql).await);
    }
    if settings.runs(Sqlite::KEY) {
        figures.extend(scenarios(&settings, deliveries, outbox_testkit::sqlite).await);
    }

    println!();
    println!(
        "| backend | workers | without inbox | with inbox | with / without | duplicates (redelivered) | p50 / p99 without → with |"
    );
    println!("|---|---|---|---|---|---|---|");
    for figure in &figures {
        println!(
            "| {} | {} | {:.0} events/s | {:.0} events/s | {:.2} | {:.0} duplicates/s | {:.2} / {:.2} ms → {:.2} / {:.2} ms |",
            figure.backend,
            figure.workers,
            figure.without.rate(),
            figure.with.rate(),
            figure.with.rate() / figure.without.rate(),
            figure.duplicates.rate(),
            figure.without.percentile(0.50),
            figure.without.percentile(0.99),
            figure.with.percentile(0.50),
            figure.with.percentile(0.99),
        );
    }
    println!("load average at the end: {}", load_average());
}
