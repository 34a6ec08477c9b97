//! mq-bridge 1.2.0 (the Python package, a Rust core), the `peers` case's
//! other relay: a virtual environment of the bench's own, its queue table
//! and publication written by plain SQL, and one route
//! (`benches/peers/mq_bridge_route.py`) in a process of its own.
//!
//! What it publishes: polling, each row's `payload` as the body, persistent,
//! with a fresh `message_id` and no headers, each batch in the order its
//! `UPDATE ... RETURNING` yields (on this table, the hash order of the
//! batch's ids: not id order, so not each aggregate's); from the slot, the
//! whole row as JSON (`payload` in base64) with `postgres.*` headers, in
//! commit order. It deletes a batch's rows, or confirms the slot's LSN,
//! once RabbitMQ has confirmed the batch.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_testkit::ReplicationSlotGuard;

use crate::keys::KeyDistribution;
use crate::support::events::payload;
use crate::writers::backlog_transactions;

/// The version compared.
pub(crate) const VERSION: &str = "1.2.0";
/// The route runner.
const ROUTE_SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/benches/peers/mq_bridge_route.py"
);
/// Environment variable naming another virtual environment to use.
const VENV_VARIABLE: &str = "OUTBOX_BENCH_VENV";
/// How long the route may take to stop after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// mq-bridge's queue table, as its `auto_create_table` makes it.
const CREATE_TABLE: &str = "CREATE TABLE outbox (id bigserial PRIMARY KEY, \
     payload bytea NOT NULL, locked_until timestamptz, created_at timestamptz DEFAULT now())";
const CREATE_INDEX: &str = "CREATE INDEX outbox_locked_until ON outbox (locked_until)";
/// Never analyzed, as the relay's `outbox_events`.
const DISABLE_AUTOVACUUM: &str = "ALTER TABLE outbox SET (autovacuum_enabled = false)";
const INSERT: &str = "INSERT INTO outbox (payload) VALUES ($1)";
const CREATE_SLOT: &str = "SELECT pg_create_logical_replication_slot($1, 'pgoutput')";

/// The Python of a virtual environment with mq-bridge [`VERSION`]: that of
/// `OUTBOX_BENCH_VENV`, else `target/bench-venv`, made with `python3 -m
/// venv` and `pip install` when missing. Panics naming what failed.
pub(crate) fn python() -> PathBuf {
    let venv = std::env::var_os(VENV_VARIABLE).map_or_else(
        || {
            let binary = Path::new(env!("CARGO_BIN_EXE_outbox-relay"));
            // target/<profile>/outbox-relay → target/bench-venv
            let target = binary
                .parent()
                .and_then(Path::parent)
                .expect("the relay binary lies in target/<profile>");
            target.join("bench-venv")
        },
        PathBuf::from,
    );
    let python = venv.join("bin").join("python");
    if has_mq_bridge(&python) {
        return python;
    }
    println!("  setting up {} with mq-bridge=={VERSION}", venv.display());
    if !python.exists() {
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (is python3 with its venv module installed?)",
        );
    }
    run(
        Command::new(venv.join("bin").join("pip")).args([
            "install",
            "--quiet",
            &format!("mq-bridge=={VERSION}"),
        ]),
        &format!("pip install mq-bridge=={VERSION} (is PyPI reachable?)"),
    );
    assert!(
        has_mq_bridge(&python),
        "{} cannot import mq_bridge {VERSION} after pip install; remove {} to start over",
        python.display(),
        venv.display()
    );
    python
}

/// Whether `python` imports mq_bridge at [`VERSION`].
fn has_mq_bridge(python: &Path) -> bool {
    let check = format!("import mq_bridge, sys; sys.exit(mq_bridge.__version__ != '{VERSION}')");
    Command::new(python)
        .args(["-c", &check])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("peers: cannot run {what}: {error}"));
    assert!(
        output.status.success(),
        "peers: {what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// mq-bridge's queue table in the database of `pool`, empty.
pub(crate) async fn create_queue_table(pool: &sqlx::PgPool) {
    for statement in [CREATE_TABLE, CREATE_INDEX, DISABLE_AUTOVACUUM] {
        sqlx::query(statement)
            .execute(pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }
}

/// A publication of the queue table's inserts and a `pgoutput` slot, made
/// before the backlog is written. The slot is dropped by the guard
/// returned (and with the database); the publication by
/// [`drop_publication`].
pub(crate) async fn create_publication_and_slot(
    database_url: &str,
    pool: &sqlx::PgPool,
    publication: &str,
    slot: &str,
) -> ReplicationSlotGuard {
    let create =
        format!("CREATE PUBLICATION {publication} FOR TABLE outbox WITH (publish = 'insert')");
    sqlx::query(sqlx::AssertSqlSafe(create))
        .execute(pool)
        .await
        .expect("create mq-bridge's publication");
    let guard = ReplicationSlotGuard::new(database_url, slot);
    sqlx::query(CREATE_SLOT)
        .bind(slot)
        .execute(pool)
        .await
        .expect("create mq-bridge's replication slot");
    guard
}

pub(crate) async fn drop_publication(pool: &sqlx::PgPool, publication: &str) {
    let drop = format!("DROP PUBLICATION IF EXISTS {publication}");
    sqlx::query(sqlx::AssertSqlSafe(drop))
        .execute(pool)
        .await
        .expect("drop mq-bridge's publication");
}

/// Write `events` rows into the queue table, `per_transaction` per
/// transaction, one `INSERT` each: the relay's payloads (the same keys from
/// `distribution`, the same sizes) as bytes.
pub(crate) async fn write_queue_backlog(
    pool: &sqlx::PgPool,
    distribution: KeyDistribution,
    events: u64,
    payload_bytes: usize,
    per_transaction: u64,
) -> Duration {
    let started = Instant::now();
    for rows in backlog_transactions(distribution, events, per_transaction) {
        let mut transaction = pool.begin().await.expect("begin");
        for (aggregate_id, number) in rows {
            sqlx::query(INSERT)
                .bind(payload(&aggregate_id, number, payload_bytes).into_bytes())
                .execute(&mut *transaction)
                .await
                .expect("insert into mq-bridge's table");
        }
        transaction.commit().await.expect("commit");
    }
    started.elapsed()
}

/// What a route reads.
pub(crate) enum RouteInput<'a> {
    /// The queue table, `sqlx` with `delete_after_read`.
    Poll,
    /// `postgres_cdc` through a publication and a slot made beforehand.
    Cdc { publication: &'a str, slot: &'a str },
}

/// A running route: `mq_bridge_route.py` in a process of its own, its
/// log (stdout and stderr) in a file.
pub(crate) struct RunningRoute {
    child: Child,
    log_path: PathBuf,
}

impl RunningRoute {
    pub(crate) fn start(
        python: &Path,
        database_url: &str,
        input: RouteInput<'_>,
        amqp_url: &str,
        queue: &str,
    ) -> RunningRoute {
        let log_path = std::env::temp_dir().join(format!(
            "outbox-bench-mq-bridge-{}.log",
            uuid::Uuid::now_v7().simple()
        ));
        let log = std::fs::File::create(&log_path).expect("create mq-bridge's log");
        let mut command = Command::new(python);
        command.arg(ROUTE_SCRIPT);
        match input {
            RouteInput::Poll => command.args(["poll", "--table", "outbox"]),
            RouteInput::Cdc { publication, slot } => {
                command.args(["cdc", "--publication", publication, "--slot", slot])
            }
        };
        let child = command
            .args(["--database-url", database_url, "--amqp-url", amqp_url])
            .args(["--queue", queue])
            .stdout(log.try_clone().expect("mq-bridge's log, for stdout"))
            .stderr(log)
            .spawn()
            .expect("spawn mq_bridge_route.py");
        RunningRoute { child, log_path }
    }

    /// Whether the route's process still runs.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// SIGTERM, and wait for the exit (SIGKILL after [`STOP_LIMIT`]).
    pub(crate) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + STOP_LIMIT;
        while self.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        match self.child.try_wait() {
            Ok(Some(status)) if status.success() => {}
            other => {
                eprintln!(
                    "    ! mq-bridge did not stop cleanly ({other:?}); its log:\n{}",
                    self.log()
                );
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

impl Drop for RunningRoute {
    fn drop(&mut self) {
        if self.is_running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
