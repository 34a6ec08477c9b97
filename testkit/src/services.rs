//! Names and reachability checks shared by the broker helpers.

use std::time::Duration;

/// The hint every "service not reachable" failure ends with.
pub(crate) const START_SERVICES: &str =
    "start the test services with `scripts/test.sh --services-only`";

/// A topic, exchange, queue or group name no other test uses:
/// `outbox-test-<prefix>-<uuid v7>`.
pub fn unique_name(prefix: &str) -> String {
    format!("outbox-test-{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Fails the test, naming `service` and `variable`, when nothing accepts a
/// TCP connection at `address` (`host:port`) within 3 s.
pub(crate) async fn require_port(address: &str, service: &str, variable: &str) {
    let connected = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(address),
    )
    .await;
    if !matches!(connected, Ok(Ok(_))) {
        panic!(
            "{service} is not reachable at {address}; {START_SERVICES} or point {variable} at one"
        );
    }
}
