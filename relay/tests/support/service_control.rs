//! Taking the shared test services down and back up: RabbitMQ stopped,
//! tansu frozen, PostgreSQL and MariaDB restarted. Each outage comes with
//! a guard that brings the service back when it is dropped, so a failing
//! test never leaves a service down. Only the tests that run alone (see
//! `service_restarts.rs`) use this.

use std::process::Command;

/// Run `program` with `args`; panics naming the command when it cannot
/// run or fails.
fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|error| panic!("{program} {}: {error}", args.join(" ")));
    assert!(status.success(), "{program} {} failed", args.join(" "));
}

/// Run `program` with `args`, ignoring the outcome: for guards, which run
/// while a test may already be failing.
fn run_quietly(program: &str, args: &[&str]) {
    let _ = Command::new(program).args(args).status();
}

/// Brings a service back when dropped.
pub struct BringBackOnDrop {
    bring_back: Box<dyn Fn() + Send>,
}

impl BringBackOnDrop {
    /// The service is back: nothing to do on drop.
    fn disarm(mut self) {
        self.bring_back = Box::new(|| {});
    }
}

impl Drop for BringBackOnDrop {
    fn drop(&mut self) {
        (self.bring_back)();
    }
}

/// Stop the RabbitMQ application (`rabbitmqctl stop_app`); the guard
/// starts it again.
pub fn stop_rabbitmq() -> BringBackOnDrop {
    let guard = BringBackOnDrop {
        bring_back: Box::new(|| run_quietly("rabbitmqctl", &["start_app"])),
    };
    run("rabbitmqctl", &["stop_app"]);
    guard
}

/// Start the RabbitMQ application again (`rabbitmqctl start_app`).
pub fn start_rabbitmq(guard: BringBackOnDrop) {
    run("rabbitmqctl", &["start_app"]);
    guard.disarm();
}

/// The pid of the tansu broker listening on the port of `brokers`
/// (`host:port`), found by its command line.
pub fn tansu_pid(brokers: &str) -> u32 {
    let port = brokers
        .rsplit_once(':')
        .map(|(_, port)| port)
        .unwrap_or("9092");
    let output = Command::new("pgrep")
        .args(["-f", "tansu.*broker"])
        .output()
        .expect("run pgrep");
    let pids: Vec<u32> = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|cmdline| String::from_utf8_lossy(&cmdline).contains(&format!(":{port}")))
                .unwrap_or(false)
        })
        .collect();
    match pids.as_slice() {
        [pid] => *pid,
        _ => panic!("expected one tansu broker on port {port}, found pids {pids:?}"),
    }
}

/// Freeze process `pid` with SIGSTOP; dropping the guard sends SIGCONT.
pub fn freeze(pid: u32) -> BringBackOnDrop {
    let pid = pid.to_string();
    let guard = {
        let pid = pid.clone();
        BringBackOnDrop {
            bring_back: Box::new(move || run_quietly("kill", &["-CONT", &pid])),
        }
    };
    run("kill", &["-STOP", &pid]);
    guard
}

/// The newest PostgreSQL version with a cluster under /etc/postgresql.
fn postgres_version() -> String {
    let mut versions: Vec<String> = std::fs::read_dir("/etc/postgresql")
        .expect("read /etc/postgresql: the restart test drives the local PostgreSQL")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    versions.sort_by_key(|version| {
        version
            .split('.')
            .map(|part| part.parse::<u32>().unwrap_or(0))
            .collect::<Vec<_>>()
    });
    versions
        .pop()
        .expect("a PostgreSQL cluster under /etc/postgresql")
}

/// Restart the local PostgreSQL cluster; returns when it runs again.
pub fn restart_postgres() {
    let version = postgres_version();
    let guard = BringBackOnDrop {
        bring_back: Box::new(move || {
            let version = postgres_version();
            run_quietly(
                "pg_ctlcluster",
                &["--skip-systemctl-redirect", &version, "main", "start"],
            );
        }),
    };
    run(
        "pg_ctlcluster",
        &["--skip-systemctl-redirect", &version, "main", "restart"],
    );
    guard.disarm();
}

/// Restart the local MariaDB server as `scripts/test.sh` starts it;
/// returns once the new server process has been started (it may take a
/// moment more to answer).
pub fn restart_mariadb() {
    let start = || {
        // /run is a tmpfs: the socket directory may be gone.
        let _ = std::fs::create_dir_all("/run/mysqld");
        run_quietly("chown", &["mysql:mysql", "/run/mysqld"]);
        run_quietly(
            "start-stop-daemon",
            &[
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ],
        );
    };
    let guard = BringBackOnDrop {
        bring_back: Box::new(start),
    };
    run(
        "start-stop-daemon",
        &[
            "--stop",
            "--oknodo",
            "--retry",
            "60",
            "--exec",
            "/usr/sbin/mariadbd",
        ],
    );
    drop(guard);
}
