//! The `outbox-relay` binary as a child process.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A running `outbox-relay run`.
pub struct RelayProcess {
    child: Child,
    log_path: PathBuf,
    _config_dir: PathBuf,
}

/// The relay's `RUST_LOG` in the tests: its own debug lines.
pub const TEST_LOG_FILTER: &str = "outbox_relay=debug,info";

/// Test settings: short leases so takeovers after a kill are quick.
pub const FAST_CONFIG: &str = r#"
batch_size = 500
lease_duration = "2s"
publish_timeout = "800ms"
poll_interval_min = "5ms"
poll_interval_max = "100ms"
shutdown_timeout = "20s"

[http]
listen = "127.0.0.1:0"

[retry]
base_delay = "50ms"
max_delay = "200ms"
max_attempts = 3

[kafka]
message_timeout = "500ms"

[amqp]
confirm_timeout = "500ms"
connect_timeout = "500ms"

[redis]
response_timeout = "500ms"
connect_timeout = "500ms"

[nats]
ack_timeout = "500ms"
connect_timeout = "500ms"
"#;

impl RelayProcess {
    /// Start `outbox-relay run` with `config` (TOML) on `database_url` and
    /// `broker`. Its log goes to a file, shown when a test fails.
    pub fn spawn(database_url: &str, broker: &str, config: &str) -> RelayProcess {
        Self::spawn_with_args(database_url, broker, config, &[], &[])
    }

    /// [`RelayProcess::spawn`] with `global_args` (such as `--log-format
    /// json`) before the subcommand and `run_args` (such as
    /// `--skip-migrate`) after it.
    pub fn spawn_with_args(
        database_url: &str,
        broker: &str,
        config: &str,
        global_args: &[&str],
        run_args: &[&str],
    ) -> RelayProcess {
        Self::spawn_with_log_filter(
            database_url,
            broker,
            config,
            global_args,
            run_args,
            TEST_LOG_FILTER,
        )
    }

    /// [`RelayProcess::spawn_with_args`] with `log_filter` as the relay's
    /// `RUST_LOG`.
    pub fn spawn_with_log_filter(
        database_url: &str,
        broker: &str,
        config: &str,
        global_args: &[&str],
        run_args: &[&str],
        log_filter: &str,
    ) -> RelayProcess {
        let dir = std::env::temp_dir().join(format!(
            "outbox-relay-test-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let config_path = dir.join("relay.toml");
        std::fs::write(&config_path, config).expect("write config");
        let log_path = dir.join("relay.log");
        let log = std::fs::File::create(&log_path).expect("create log");
        let child = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args(global_args)
            .args([
                "run",
                "--database-url",
                database_url,
                "--broker",
                broker,
                "--config",
            ])
            .arg(&config_path)
            .args(run_args)
            .env("RUST_LOG", log_filter)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn outbox-relay");
        RelayProcess {
            child,
            log_path,
            _config_dir: dir,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send a signal with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// SIGKILL, then reap.
    pub fn kill9(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }

    /// Wait for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU seconds the process has used so far, user and system, from
    /// `/proc/<pid>/stat`.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds(self.pid())
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log file.
    pub fn log_path(&self) -> &std::path::Path {
        &self.log_path
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- relay log {} ----\n{}",
                self.log_path.display(),
                self.log()
            );
        }
    }
}

/// CPU seconds process `pid` has used so far, user and system, from
/// `/proc/<pid>/stat` (fields 14 and 15, in clock ticks).
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|error| panic!("read /proc/{pid}/stat: {error}"));
    // The command name, in parentheses, may hold spaces: count from after it.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After the name come the state (field 3), ..., utime (14), stime (15).
    let ticks = |index: usize| -> f64 {
        fields
            .get(index - 3)
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no field {index} in /proc/{pid}/stat: {stat}"))
            as f64
    };
    (ticks(14) + ticks(15)) / clock_ticks_per_second()
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`).
fn clock_ticks_per_second() -> f64 {
    let output = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("run getconf CLK_TCK");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("getconf CLK_TCK prints a number")
}

/// Poll `condition` every 50 ms until it holds or `limit` passes; returns
/// whether it held. Limits only bound a wait; no test asserts a duration.
pub async fn wait_until<F, Fut>(limit: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A pseudo-random delay between `low` and `high` milliseconds: a SIGKILL
/// or a pause that lands at a different moment on each run.
pub fn random_millis(low: u64, high: u64) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    Duration::from_millis(low + u64::from(nanos) % (high - low))
}
