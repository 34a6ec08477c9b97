//! A RabbitMQ node of one test's own, for settings the shared broker must
//! keep at their defaults (such as a small `max_message_size`): started
//! from the installed `rabbitmq-server` on free loopback ports, with its
//! data, logs, config and Erlang cookie in a temporary directory, no
//! plugins, and a node name no other node uses. It is stopped and its
//! directory removed when the [`PrivateRabbitMq`] is dropped. The shared
//! broker (`OUTBOX_TEST_AMQP_URL`) is never touched.
//!
//! RabbitMQ's own start script is run directly, not a distribution's
//! wrapper that switches to the `rabbitmq` user: by default
//! `/usr/lib/rabbitmq/bin/rabbitmq-server` (Debian's `rabbitmq-server`
//! package); `OUTBOX_TEST_RABBITMQ_SERVER` names another. A missing script
//! fails the test saying so; nothing is skipped.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use lapin::{Connection, ConnectionProperties};

/// RabbitMQ's start script as Debian's `rabbitmq-server` package installs it.
pub const DEFAULT_RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// How long a node may take to boot (about 5 s on an idle machine).
const BOOT_LIMIT: Duration = Duration::from_secs(120);

/// How long a node may take to stop after SIGTERM before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(30);

/// Boots tried before giving up when a picked port was taken meanwhile.
const BOOT_TRIES: usize = 3;

/// A running RabbitMQ node of the test's own; stopped on drop.
pub struct PrivateRabbitMq {
    /// RabbitMQ's start script, which runs the Erlang VM as its child and
    /// stops it on SIGTERM.
    child: Child,
    /// Data, logs, config and cookie; removed on drop.
    dir: PathBuf,
    /// The Erlang node name, `outbox-private-<uuid>@localhost`.
    node: String,
    /// The AMQP port on 127.0.0.1.
    port: u16,
    /// The start script's exit status, once it was reaped: its pid may
    /// belong to another process by then.
    exited: Option<ExitStatus>,
}

impl PrivateRabbitMq {
    /// Start a node whose `rabbitmq.conf` holds `settings` (lines such as
    /// `max_message_size = 65536`) after its loopback listener, and wait
    /// until it accepts an AMQP connection as `guest`.
    ///
    /// # Panics
    /// When the start script is missing, or the node does not boot within
    /// 120 s; the message says which, with the end of the node's log.
    pub async fn start(settings: &str) -> PrivateRabbitMq {
        let script = server_script();
        let mut attempt = 1;
        loop {
            let mut node = Self::spawn(&script, settings);
            match node.wait_until_ready().await {
                Ok(()) => return node,
                // Another process took a port between its pick and the
                // node's bind: pick again.
                Err(log) if log.contains("eaddrinuse") && attempt < BOOT_TRIES => {
                    eprintln!(
                        "private RabbitMQ node {} found a port taken; trying other ports",
                        node.node
                    );
                    attempt += 1;
                }
                Err(log) => panic!(
                    "the private RabbitMQ node {} ({}) did not start: {log}",
                    node.node,
                    script.display(),
                ),
            }
        }
    }

    /// The URL the relay and the test's own clients connect with: `guest`,
    /// which RabbitMQ admits from loopback only, on the default vhost.
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The Erlang node name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Launch the start script with a fresh directory, node name and ports.
    fn spawn(script: &Path, settings: &str) -> PrivateRabbitMq {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let node = format!("outbox-private-{id}@localhost");
        let dir = std::env::temp_dir().join(format!("outbox-private-rabbitmq-{id}"));
        for sub in ["mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub))
                .unwrap_or_else(|error| panic!("create {}: {error}", dir.join(sub).display()));
        }
        let [port, dist_port] = free_ports();
        write(
            &dir.join("rabbitmq.conf"),
            &format!("listeners.tcp.1 = 127.0.0.1:{port}\n{settings}\n"),
        );
        // No plugins: the management plugin would want port 15672.
        write(&dir.join("enabled_plugins"), "[].\n");
        // Read instead of /etc/rabbitmq/rabbitmq-env.conf, whose node name
        // is the shared broker's.
        write(&dir.join("rabbitmq-env.conf"), "");
        let output = std::fs::File::create(dir.join("server.out"))
            .unwrap_or_else(|error| panic!("create the node's output file: {error}"));
        let errors = output
            .try_clone()
            .unwrap_or_else(|error| panic!("share the node's output file: {error}"));
        let child = Command::new(script)
            .current_dir(&dir)
            // The Erlang cookie is created in, and read from, $HOME.
            .env("HOME", &dir)
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_NODENAME", &node)
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            // A group of its own, so the VM can be killed with its script.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("start {}: {error}", script.display()));
        PrivateRabbitMq {
            child,
            dir,
            node,
            port,
            exited: None,
        }
    }

    /// Wait until the node accepts an AMQP connection; the node's log when
    /// it exits or does not answer within [`BOOT_LIMIT`].
    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + BOOT_LIMIT;
        let url = self.amqp_url();
        while Instant::now() < deadline {
            if let Some(status) = self.try_wait() {
                return Err(format!(
                    "its start script exited ({status}):\n{}",
                    self.log_tail()
                ));
            }
            let connecting = Connection::connect(&url, ConnectionProperties::default());
            if let Ok(Ok(connection)) =
                tokio::time::timeout(Duration::from_secs(5), connecting).await
            {
                let _ = connection.close(200, "OK".into()).await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "no AMQP connection within {} s:\n{}",
            BOOT_LIMIT.as_secs(),
            self.log_tail()
        ))
    }

    /// The start script's exit status, once it has exited.
    fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// The end of the start script's output and of the node's log.
    fn log_tail(&self) -> String {
        let mut text = String::new();
        let mut files = vec![self.dir.join("server.out")];
        if let Ok(entries) = std::fs::read_dir(self.dir.join("log")) {
            files.extend(entries.flatten().map(|entry| entry.path()));
        }
        for file in files {
            let Ok(content) = std::fs::read_to_string(&file) else {
                continue;
            };
            let lines: Vec<&str> = content.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            text.push_str(&format!(
                "---- {} ----\n{}\n",
                file.display(),
                tail.join("\n")
            ));
        }
        text
    }

    /// Wait for the start script to exit, at most `limit`; whether it did.
    fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.try_wait().is_some() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PrivateRabbitMq {
    /// SIGTERM to the start script, which stops the node and waits for it;
    /// SIGKILL to the whole process group when that takes longer than
    /// `STOP_LIMIT`. Then the directory goes.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        if self.try_wait().is_none() {
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
        if !self.wait_exit(STOP_LIMIT) {
            eprintln!(
                "private RabbitMQ node {} did not stop within {} s; killing it",
                self.node,
                STOP_LIMIT.as_secs()
            );
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
            let _ = self.child.wait();
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("could not remove {}: {error}", self.dir.display());
        }
    }
}

/// The start script to run: `OUTBOX_TEST_RABBITMQ_SERVER`, else
/// [`DEFAULT_RABBITMQ_SERVER`].
///
/// # Panics
/// When the script is not there, saying how to install it.
fn server_script() -> PathBuf {
    let script = std::env::var_os("OUTBOX_TEST_RABBITMQ_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RABBITMQ_SERVER));
    assert!(
        script.is_file(),
        "rabbitmq-server is not installed: {} is missing, and this test runs a RabbitMQ node \
         of its own. Install it (Debian: apt-get install rabbitmq-server; `scripts/test.sh` \
         does so as root) or point OUTBOX_TEST_RABBITMQ_SERVER at RabbitMQ's own \
         sbin/rabbitmq-server script",
        script.display()
    );
    script
}

/// Two distinct loopback ports that were free a moment ago.
fn free_ports() -> [u16; 2] {
    let bind = || {
        TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|error| panic!("bind a loopback port to find a free one: {error}"))
    };
    // Both held at once, so they differ.
    let (first, second) = (bind(), bind());
    let port = |listener: &TcpListener| {
        listener
            .local_addr()
            .unwrap_or_else(|error| panic!("the address of a bound port: {error}"))
            .port()
    };
    [port(&first), port(&second)]
}

/// Write `content` to `path`.
///
/// # Panics
/// When the file cannot be written, naming it.
fn write(path: &Path, content: &str) {
    std::fs::write(path, content)
        .unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}
