//! A minimal HTTP/1.0 client for the relay's endpoint, and the endpoint's
//! address as the relay logs it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::process::{RelayProcess, wait_until};

/// A response: status code and body.
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// `GET path` from `address`, on a blocking thread.
pub async fn get(address: &str, path: &str) -> Response {
    let address = address.to_owned();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&address)
            .unwrap_or_else(|error| panic!("connect to the relay endpoint {address}: {error}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("send request");
        let mut raw = String::new();
        stream.read_to_string(&mut raw).expect("read response");
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("malformed response from {path}: {raw:?}"));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        Response {
            status,
            body: body.to_owned(),
        }
    })
    .await
    .expect("http request thread")
}

/// The address the relay's HTTP endpoint listens on, from its log.
pub async fn endpoint_address(relay: &RelayProcess) -> String {
    let mut address = None;
    let found = wait_until(Duration::from_secs(30), || {
        address = listening_address(&relay.log());
        let found = address.is_some();
        async move { found }
    })
    .await;
    assert!(
        found,
        "the relay never logged its http endpoint:\n{}",
        relay.log()
    );
    address.unwrap_or_default()
}

fn listening_address(log: &str) -> Option<String> {
    let line = log
        .lines()
        .find(|line| line.contains("http endpoint listening"))?;
    let start = line.find("address=")? + "address=".len();
    let rest = &line[start..];
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('"').to_owned())
}

/// The value of the sample `name` (with its labels, exactly as printed,
/// e.g. `outbox_relay_events_published_total{topic="a"}`) in a Prometheus
/// text exposition, or `None` when absent.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}
