//! `outbox-relay migrate` started as eight processes at once on a fresh
//! database of every backend, as replicas of a service do on their first
//! boot: every process succeeds, each migration is applied and recorded
//! once, and the relay reads the tables afterwards.

use std::process::{Output, Stdio};
use std::time::Duration;

use outbox::Backend;
use outbox_testkit::{TestBackend, TestDatabase};
use tokio::process::Command;

/// Processes migrating at once.
const PROCESSES: usize = 8;

/// The longest wait for one `outbox-relay` command: a bound against a
/// hanging test, never a measured expectation.
const PATIENCE: Duration = Duration::from_secs(120);

/// One pending event, in the contract columns every backend accepts.
const INSERT_EVENT: &str = "INSERT INTO outbox_events \
     (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
     VALUES ('0195f3a8-7d2c-7000-8000-000000000001', 'order.created', '/orders', 'order', '1', 'orders', '{}')";

fn outbox_relay(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-relay"));
    command
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("OUTBOX_BROKER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Run a started command to its end, at most [`PATIENCE`].
async fn finish(child: tokio::process::Child, what: &str) -> Output {
    tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .unwrap_or_else(|_elapsed| panic!("{what} did not exit within {PATIENCE:?}"))
        .unwrap_or_else(|error| panic!("cannot wait for {what}: {error}"))
}

/// Start [`PROCESSES`] `outbox-relay migrate` on `db` before waiting for
/// any, then check every one succeeded and the schema is whole.
async fn migrate_from_processes_at_once<DB: Backend + TestBackend>(
    db: &TestDatabase<DB>,
    partitions: i64,
) {
    let url = db.url().to_owned();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            outbox_relay(&["migrate", "--database-url", &url])
                .spawn()
                .expect("start outbox-relay migrate")
        })
        .collect();
    let mut failures = Vec::new();
    for (process, child) in children.into_iter().enumerate() {
        let output = finish(child, "outbox-relay migrate").await;
        if !output.status.success() {
            failures.push(format!(
                "process {process}: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim_end()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {PROCESSES} concurrent `outbox-relay migrate` failed on {}:\n{}",
        failures.len(),
        DB::LABEL,
        failures.join("\n")
    );

    let shipped = i64::try_from(DB::migrator().iter().count()).expect("a few migrations");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM _outbox_migrations").await,
        shipped,
        "each migration is recorded once"
    );
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT version) FROM _outbox_migrations WHERE success")
            .await,
        shipped,
        "every shipped migration is recorded as applied"
    );

    // The tables work: a producer's plain INSERT is an event the relay's
    // status counts, with the partitions seeded once.
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, INSERT_EVENT)
        .await
        .expect("enqueue by INSERT");
    drop(connection);
    let status = outbox_relay(&["status", "--database-url", &url, "--json"])
        .spawn()
        .expect("start outbox-relay status");
    let status = finish(status, "outbox-relay status").await;
    assert!(
        status.status.success(),
        "status: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let status: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    assert_eq!(status["pending"], 1, "{status}");
    assert_eq!(status["partitions"], partitions, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_migrate_processes_on_a_fresh_postgres_database_all_succeed() {
    let db = outbox_testkit::postgres().await;
    migrate_from_processes_at_once(&db, 32).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_migrate_processes_on_a_fresh_mariadb_database_all_succeed() {
    let db = outbox_testkit::mysql().await;
    migrate_from_processes_at_once(&db, 32).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_migrate_processes_on_a_new_sqlite_file_all_succeed() {
    // No file yet: the processes race to create it, too.
    let db = outbox_testkit::sqlite_unopened();
    migrate_from_processes_at_once(&db, 1).await;
}
