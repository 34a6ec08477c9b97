//! A minimal HTTP/1.0 client for the relay's endpoint, and the endpoint's
//! address as the relay logs it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::process::{RelayProcess, wait_until};

/// A response: status code, headers (names in lowercase) and body.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The value of the header `name` (any case), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(given, _)| given.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("the body is not JSON ({error}): {}", self.body))
    }
}

/// `GET path` from `address`, on a blocking thread.
pub async fn get(address: &str, path: &str) -> Response {
    request(address, "GET", path, &[], None).await
}

/// `POST path` to `address` with `headers` and `body`, on a blocking
/// thread. `Host` is sent unless `headers` has one; `Content-Length` is
/// always sent.
pub async fn post(address: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    request(address, "POST", path, headers, Some(body)).await
}

/// `method path` on `address` with `headers` and an optional `body`, on a
/// blocking thread.
pub async fn request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let address = address.to_owned();
    let method = method.to_owned();
    let path = path.to_owned();
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    let body = body.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(&address)
            .unwrap_or_else(|error| panic!("connect to the relay endpoint {address}: {error}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let mut head = format!("{method} {path} HTTP/1.0\r\n");
        if !headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("host"))
        {
            head.push_str(&format!("Host: {address}\r\n"));
        }
        for (name, value) in &headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(body) = &body {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).expect("send request");
        if let Some(body) = &body {
            stream.write_all(body.as_bytes()).expect("send the body");
        }
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
        let headers = head
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        Response {
            status,
            headers,
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

/// The address of the line `http endpoint listening address=...` of
/// `log`, if logged.
pub fn listening_address(log: &str) -> Option<String> {
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
