//! The relay's database connections send each message at once: every TCP
//! socket of its pool has `TCP_NODELAY`, which sqlx sets from 0.9.1 (0.9.0
//! did not). Without it, the TLS handshake of every new connection waits
//! twice for the server's delayed acknowledgement (40 ms on Linux), and a
//! statement over 16 KB on a TLS connection once more.
//!
//! And a running relay's pool is open before its first batch: a batch that
//! waited for a connection to be opened (TCP, TLS, authentication) added
//! that to the latency of every event behind it.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};

use outbox_relay::store::{Connections, MySqlStore, PostgresStore};

/// Connections held at once, so that the pool opens several.
const CONNECTIONS: usize = 3;

/// `TCP_NODELAY` of every socket of this process connected to `port` on
/// the loopback.
fn nodelay_of_sockets_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")
        .expect("list /proc/self/fd")
        .flatten()
    {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(descriptor) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<RawFd>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // SAFETY: a socket of this process, borrowed for two calls while
        // the connections that own it are held open.
        let borrowed = unsafe { BorrowedFd::borrow_raw(descriptor) };
        let socket = socket2::SockRef::from(&borrowed);
        let peer: Option<SocketAddr> = socket.peer_addr().ok().and_then(|peer| peer.as_socket());
        if peer.is_some_and(|peer| peer.port() == port && peer.ip().is_loopback()) {
            found.push(socket.tcp_nodelay().expect("read TCP_NODELAY"));
        }
    }
    found
}

fn port_of(url: &str) -> u16 {
    let parsed = url::Url::parse(url).expect("a database URL");
    parsed.port().unwrap_or(match parsed.scheme() {
        "mysql" | "mariadb" => 3306,
        _ => 5432,
    })
}

fn assert_every_socket_sends_at_once(port: u16, backend: &str) {
    let sockets = nodelay_of_sockets_to(port);
    assert!(
        sockets.len() >= CONNECTIONS,
        "expected at least {CONNECTIONS} sockets to {backend} on port {port}, found {}",
        sockets.len()
    );
    let delayed = sockets.iter().filter(|nodelay| !**nodelay).count();
    assert_eq!(
        delayed,
        0,
        "{delayed} of {} sockets to {backend} lack TCP_NODELAY",
        sockets.len()
    );
}

#[tokio::test]
async fn postgresql_connections_have_tcp_nodelay() {
    let db = outbox_testkit::postgres().await;
    let store = PostgresStore::connect(db.url()).await.expect("connect");
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        held.push(store.pool().acquire().await.expect("a connection"));
    }
    assert_every_socket_sends_at_once(port_of(db.url()), "PostgreSQL");
}

#[tokio::test]
async fn mysql_connections_have_tcp_nodelay() {
    let db = outbox_testkit::mysql().await;
    let store = MySqlStore::connect(db.url()).await.expect("connect");
    let mut held = Vec::new();
    for _ in 0..CONNECTIONS {
        held.push(store.pool().acquire().await.expect("a connection"));
    }
    assert_every_socket_sends_at_once(port_of(db.url()), "MariaDB");
}

/// The pool of a store kept open holds all its connections as soon as it
/// is connected; one opened on demand holds the one it checked.
fn assert_kept_open_holds_every_connection<DB: sqlx::Database>(
    kept: &sqlx::Pool<DB>,
    on_demand: &sqlx::Pool<DB>,
    backend: &str,
) {
    let most = kept.options().get_max_connections();
    assert!(most > 1, "the relay's pool allows {most} connections");
    assert_eq!(
        kept.size(),
        most,
        "a relay's pool on {backend} opened {} of its {most} connections as it started",
        kept.size()
    );
    assert_eq!(
        on_demand.size(),
        1,
        "a command's pool on {backend} opened more connections than it used"
    );
}

#[tokio::test]
async fn a_relay_opens_its_postgresql_pool_as_it_starts() {
    let db = outbox_testkit::postgres().await;
    let kept = PostgresStore::connect_with(db.url(), Connections::KeptOpen)
        .await
        .expect("connect");
    let on_demand = PostgresStore::connect(db.url()).await.expect("connect");
    assert_kept_open_holds_every_connection(kept.pool(), on_demand.pool(), "PostgreSQL");
}

#[tokio::test]
async fn a_relay_opens_its_mysql_pool_as_it_starts() {
    let db = outbox_testkit::mysql().await;
    let kept = MySqlStore::connect_with(db.url(), Connections::KeptOpen)
        .await
        .expect("connect");
    let on_demand = MySqlStore::connect(db.url()).await.expect("connect");
    assert_kept_open_holds_every_connection(kept.pool(), on_demand.pool(), "MariaDB");
}
