//! A tansu broker (Kafka API, in-memory storage) of one bench's or test's
//! own, on a free loopback port, for what must not happen to the shared
//! one on 9092 while other tests use it: being frozen with SIGSTOP. It is
//! killed when the [`PrivateTansu`] is dropped.
//!
//! The binary is `TANSU_BIN` when set, else the one `scripts/test.sh`
//! installs (`<repo>/.tools/bin/tansu`, or `OUTBOX_TOOLS_DIR/bin/tansu`),
//! else `tansu` on the `PATH`. A missing binary fails the caller saying
//! so; nothing is skipped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer};

/// How long the broker may take to answer a metadata request.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A running tansu broker of the caller's own; killed on drop.
pub struct PrivateTansu {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl PrivateTansu {
    /// Start a broker on a free loopback port and wait until it answers a
    /// Kafka metadata request.
    ///
    /// # Panics
    /// When no tansu binary is found, or the broker does not answer within
    /// 60 s; the message says which, with the end of its log.
    pub async fn start() -> PrivateTansu {
        let binary = tansu_binary();
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "outbox-private-tansu-{}.log",
            uuid::Uuid::now_v7().simple()
        ));
        let log_file = std::fs::File::create(&log)
            .unwrap_or_else(|error| panic!("create the tansu log {}: {error}", log.display()));
        let listener = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(&binary)
            .args(["broker", "--listener-url", &listener])
            .args(["--advertised-listener-url", &listener])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|error| panic!("start tansu {}: {error}", binary.display()));
        let broker = PrivateTansu { child, port, log };
        broker.wait_until_ready().await;
        broker
    }

    /// The `bootstrap.servers` of the broker: `127.0.0.1:port`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stop the broker's process with SIGSTOP: connections stay open and
    /// nothing is answered, as a broker that hangs.
    pub fn freeze(&self) {
        signal(self.child.id(), "STOP");
    }

    /// Let a frozen broker run again (SIGCONT).
    pub fn thaw(&self) {
        signal(self.child.id(), "CONT");
    }

    async fn wait_until_ready(&self) {
        let deadline = Instant::now() + START_LIMIT;
        let brokers = self.brokers();
        loop {
            let probe = brokers.clone();
            let answered = tokio::task::spawn_blocking(move || metadata_answers(&probe))
                .await
                .unwrap_or(false);
            if answered {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the private tansu broker on {brokers} did not answer within {START_LIMIT:?}; its log ({}):\n{}",
                self.log.display(),
                log_tail(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for PrivateTansu {
    fn drop(&mut self) {
        // A frozen process still dies of SIGKILL.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Whether a broker on `brokers` answers a metadata request within a second.
fn metadata_answers(brokers: &str) -> bool {
    let Ok(producer) = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create::<BaseProducer>()
    else {
        return false;
    };
    producer
        .client()
        .fetch_metadata(None, Duration::from_secs(1))
        .is_ok()
}

/// The tansu binary to run.
fn tansu_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("TANSU_BIN") {
        return PathBuf::from(binary);
    }
    let tools = std::env::var_os("OUTBOX_TOOLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"),
        PathBuf::from,
    );
    let installed = tools.join("bin/tansu");
    if installed.is_file() {
        return installed;
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("tansu"))
            .find(|candidate| candidate.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "no tansu binary: not at {} nor on the PATH, and TANSU_BIN is unset; \
             `scripts/test.sh --services-only` installs it",
            installed.display()
        )
    })
}

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|error| panic!("bind a loopback port to find a free one: {error}"))
}

fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap_or_else(|error| panic!("run kill -{name} {pid}: {error}"));
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// The last lines of the log at `path`.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
