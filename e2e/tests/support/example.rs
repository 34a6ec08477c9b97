//! The examples as child processes, and one HTTP request at a time to
//! the orders service.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout, Command};
use uuid::Uuid;

/// The longest wait for an example to print a line or to exit: a bound
/// against a hanging test, never a measured expectation.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// The path of a built example: this test runs as
/// `target/<profile>/deps/examples-<hash>`, and cargo puts the examples in
/// `target/<profile>/examples/`.
pub fn example_binary(name: &str) -> PathBuf {
    let test_binary = std::env::current_exe().expect("the path of the test binary");
    let profile_dir = test_binary
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lies in target/<profile>/deps");
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "example `{name}` is not built at {}: `cargo test` builds the examples, \
         with a target filter run `cargo build -p outbox-e2e --examples` first",
        path.display()
    );
    path
}

/// An example running as a child process: stdout read line by line,
/// stderr kept in a file for failure messages. Killed when dropped.
pub struct Example {
    name: String,
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr_path: PathBuf,
}

impl Example {
    pub fn spawn(name: &str, args: &[&str]) -> Example {
        let stderr_path =
            std::env::temp_dir().join(format!("outbox-example-{name}-{}.log", Uuid::now_v7()));
        let stderr_file = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|error| panic!("cannot create {}: {error}", stderr_path.display()));
        let mut child = Command::new(example_binary(name))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr_file))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start example `{name}`: {error}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        Example {
            name: name.to_owned(),
            child,
            stdout: BufReader::new(stdout).lines(),
            stderr_path,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The next line of stdout; fails the test at its end or after
    /// [`PATIENCE`].
    pub async fn next_line(&mut self) -> String {
        match tokio::time::timeout(PATIENCE, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => panic!(
                "`{}` closed its stdout; stderr:\n{}",
                self.name,
                self.stderr()
            ),
            Ok(Err(error)) => panic!("cannot read the stdout of `{}`: {error}", self.name),
            Err(_elapsed) => panic!(
                "`{}` printed nothing for {PATIENCE:?}; stderr:\n{}",
                self.name,
                self.stderr()
            ),
        }
    }

    pub fn terminate(&self) {
        let pid = self.child.id().expect("the example is still running");
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// SIGKILL: no signal handler runs, nothing in flight is finished.
    pub async fn kill(mut self) {
        self.child
            .kill()
            .await
            .unwrap_or_else(|error| panic!("cannot SIGKILL `{}`: {error}", self.name));
    }

    /// Wait for the exit; returns the status, the rest of stdout and all
    /// of stderr.
    pub async fn wait(mut self) -> (ExitStatus, String, String) {
        let mut rest = String::new();
        let finished = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = self.stdout.next_line().await? {
                rest.push_str(&line);
                rest.push('\n');
            }
            self.child.wait().await
        })
        .await;
        match finished {
            Ok(Ok(status)) => (status, rest, self.stderr()),
            Ok(Err(error)) => panic!("cannot wait for `{}`: {error}", self.name),
            Err(_elapsed) => panic!(
                "`{}` did not exit within {PATIENCE:?}; stdout so far:\n{rest}\nstderr:\n{}",
                self.name,
                self.stderr()
            ),
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        // Already gone when the test cleaned up; nothing to report.
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

/// One HTTP/1.1 request on a fresh connection; returns the status and body.
pub async fn http(
    address: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut stream = TcpStream::connect(address)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {address}: {error}"));
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(content_type) = content_type {
        request.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    let (_head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("an HTTP response without a body separator: {response}"));
    (status, body.to_owned())
}
