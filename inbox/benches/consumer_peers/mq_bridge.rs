//! mq-bridge 1.2.0's inbox (the Python package, a Rust core), the RabbitMQ
//! reference: a virtual environment (`OUTBOX_BENCH_VENV`, else
//! `target/bench-venv`, the relay's bench's, made with `python3 -m venv`
//! and `pip install mq-bridge==1.2.0` from PyPI when missing), and
//! `mq_bridge_inbox.py` in a process of its own.
//!
//! A run is timed from the process's spawn to the moment the bench saw
//! nothing left ready in the queue (a passive `queue.declare`, every
//! [`POLL`]) and every invoice written. That is a lower bound of the end
//! (so the ratios to mq-bridge favour mq-bridge): up to its prefetch of
//! duplicate deliveries can still be unacknowledged then, and mq-bridge
//! requeues what it holds when it is stopped. So the bench waits until
//! `rabbitmqctl` counts no message in the queue, ready or unacknowledged
//! (an upper bound of the end, late by up to a `rabbitmqctl` call, most
//! of a second), before it closes the script's stdin; after mq-bridge
//! exits, nothing may have been requeued.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_testkit::TestDatabase;
use sqlx::Postgres;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::cpu::{MachineSample, process_seconds};
use crate::database;
use crate::load::RabbitQueue;
use crate::report::Measured;

/// The version compared.
const VERSION: &str = "1.2.0";
/// The route.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/benches/consumer_peers/mq_bridge_inbox.py"
);
/// Environment variable naming another virtual environment to use.
const VENV_VARIABLE: &str = "OUTBOX_BENCH_VENV";
/// How often the bench looks whether mq-bridge is done.
const POLL: Duration = Duration::from_millis(10);
/// Longest run before the bench gives up on mq-bridge.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// Longest stop.
const STOP_LIMIT: Duration = Duration::from_secs(60);

/// The Python of a virtual environment with mq-bridge [`VERSION`], set up
/// when missing. Panics naming what failed.
pub(crate) fn python() -> PathBuf {
    let venv = std::env::var_os(VENV_VARIABLE).map_or_else(
        || {
            // target/<profile>/deps/consumer_peers-<hash> → target/bench-venv
            let exe = std::env::current_exe().expect("the bench's own path");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("the bench binary lies in target/<profile>/deps");
            target.join("bench-venv")
        },
        PathBuf::from,
    );
    let python = venv.join("bin").join("python");
    if has_mq_bridge(&python) {
        return python;
    }
    println!("setting up {} with mq-bridge=={VERSION}", venv.display());
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
        .unwrap_or_else(|error| panic!("mq-bridge: cannot run {what}: {error}"));
    assert!(
        output.status.success(),
        "mq-bridge: {what} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Run mq-bridge's route on `queue` until every delivery is settled.
pub(crate) async fn consume(
    python: &Path,
    queue: &RabbitQueue,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let log_path = std::env::temp_dir().join(format!(
        "outbox-bench-mq-bridge-inbox-{}.log",
        uuid::Uuid::now_v7().simple()
    ));
    let log = std::fs::File::create(&log_path).expect("create mq-bridge's log file");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let first = tokio::spawn(database::first_invoice(database.pool().clone()));
    let machine = MachineSample::now();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(python)
        .arg(SCRIPT)
        .args(["--database-url", database.url()])
        .args(["--amqp-url", &outbox_testkit::rabbitmq::amqp_url()])
        .args(["--queue", &queue.queue])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|error| panic!("spawn {} {SCRIPT}: {error}", python.display()));
    let pid = child.id().expect("mq-bridge's process id").to_string();
    let stdin = child.stdin.take().expect("mq-bridge's stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("mq-bridge's stdout")).lines();

    // Done: nothing ready in the queue, and every invoice written.
    let seen_done = loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "mq-bridge exited early ({status}); its log:\n{}",
                read_log()
            );
        }
        assert!(
            started.elapsed() < RUN_LIMIT,
            "mq-bridge did not write {events} invoices within {RUN_LIMIT:?}; its log: {}",
            log_path.display()
        );
        if queue.ready().await == 0 && database::invoices(database.pool()).await >= events as i64 {
            break Instant::now();
        }
        tokio::time::sleep(POLL).await;
    };
    let machine_busy = machine.busy_percent_since();
    let consumer_cpu = process_seconds(&pid);
    // And every delivery acknowledged, before it is stopped.
    let acked = loop {
        let depth = queue.depth().await;
        if depth == 0 {
            break Instant::now();
        }
        assert!(
            started.elapsed() < RUN_LIMIT,
            "mq-bridge left {depth} deliveries unacknowledged; its log: {}",
            log_path.display()
        );
    };
    println!(
        "    mq-bridge: queue empty and every invoice written after {:.2} s; every delivery acknowledged by {:.2} s",
        (seen_done - started).as_secs_f64(),
        (acked - started).as_secs_f64()
    );
    drop(stdin);
    let status = tokio::time::timeout(STOP_LIMIT, child.wait())
        .await
        .unwrap_or_else(|_| panic!("mq-bridge did not stop within {STOP_LIMIT:?}"))
        .expect("wait for mq-bridge");
    assert!(
        status.success(),
        "mq-bridge failed ({status}); its log:\n{}",
        read_log()
    );
    let mut stopped = false;
    while let Ok(Some(line)) = lines.next_line().await {
        stopped |= line.starts_with("stopped ");
    }
    assert!(
        stopped,
        "mq-bridge did not report its stop; its log:\n{}",
        read_log()
    );
    first.abort();
    let first = first.await.ok();
    let requeued = queue.ready().await;
    assert_eq!(
        requeued,
        0,
        "mq-bridge requeued {requeued} deliveries when it stopped; its log: {}",
        log_path.display()
    );
    database::verify(database.pool(), "mq-bridge", events, false).await;
    let _ = std::fs::remove_file(&log_path);
    Measured {
        elapsed: seen_done - started,
        from_first_invoice: first.map(|first| seen_done.saturating_duration_since(first)),
        consumer_cpu,
        machine_busy,
    }
}
