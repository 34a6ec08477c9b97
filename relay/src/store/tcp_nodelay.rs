//! `TCP_NODELAY` on the relay's database connections.
//!
//! sqlx opens its TCP sockets without `TCP_NODELAY` and has no option or
//! hook to set it. A message that outgrows one TLS record (16 KB: the mark
//! of about 1,300 events, a fetch leaving out as many ids) then goes out in
//! two segments, and Nagle's algorithm holds the second until the server
//! acknowledges the first. A server waiting for the rest of the message
//! acknowledges only when its delayed-ACK timer fires: 40 ms on Linux, per
//! statement. So after every new connection the pool sets the option on
//! the process's sockets connected to the database's address.
//!
//! On Linux the sockets are found in `/proc/self/fd`; elsewhere nothing is
//! changed.

use std::net::SocketAddr;

/// The addresses the database URL's host resolves to, with its port (the
/// backend's default when the URL names none). Empty for SQLite, for a
/// Unix socket, and when the host does not resolve (connecting then fails
/// with the real error).
pub(crate) async fn database_addresses(url: &str) -> Vec<SocketAddr> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Vec::new();
    };
    let default_port = match parsed.scheme() {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        _ => return Vec::new(),
    };
    let Some(host) = parsed.host_str().filter(|host| !host.is_empty()) else {
        return Vec::new();
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = parsed.port().unwrap_or(default_port);
    match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(addresses) => addresses.collect(),
        Err(error) => {
            tracing::debug!(%error, host, port, "the database host did not resolve");
            Vec::new()
        }
    }
}

/// Set `TCP_NODELAY` on every socket of this process connected to one of
/// `addresses` that does not have it yet; returns how many were set.
#[cfg(target_os = "linux")]
pub(crate) fn set_on_sockets_to(addresses: &[SocketAddr]) -> usize {
    use std::os::fd::{BorrowedFd, RawFd};

    if addresses.is_empty() {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut set = 0;
    for entry in entries.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let descriptor = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<RawFd>().ok());
        let (true, Some(descriptor)) = (is_socket, descriptor) else {
            continue;
        };
        // SAFETY: the descriptor is a socket of this process, borrowed only
        // for the calls below. Had it been closed and its number reused
        // since it was listed, the calls fail, or find another socket,
        // which is changed only when it is connected to the database too.
        let borrowed = unsafe { BorrowedFd::borrow_raw(descriptor) };
        let socket = socket2::SockRef::from(&borrowed);
        let connected_to_database = socket
            .peer_addr()
            .ok()
            .and_then(|peer| peer.as_socket())
            .is_some_and(|peer| addresses.contains(&peer));
        if connected_to_database
            && !socket.tcp_nodelay().unwrap_or(true)
            && socket.set_tcp_nodelay(true).is_ok()
        {
            set += 1;
        }
    }
    set
}

/// Set `TCP_NODELAY` on the process's sockets to `addresses`: not done
/// outside Linux, where the sockets cannot be listed.
#[cfg(not(target_os = "linux"))]
pub(crate) fn set_on_sockets_to(_addresses: &[SocketAddr]) -> usize {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn database_addresses_follow_the_url() {
        let postgres = database_addresses("postgres://user@127.0.0.1/db").await;
        assert_eq!(postgres, vec!["127.0.0.1:5432".parse().unwrap()]);
        let mysql = database_addresses("mysql://root@127.0.0.1:3307/test").await;
        assert_eq!(mysql, vec!["127.0.0.1:3307".parse().unwrap()]);
        let ipv6 = database_addresses("postgresql://[::1]:6543/db").await;
        assert_eq!(ipv6, vec!["[::1]:6543".parse().unwrap()]);
        assert!(database_addresses("sqlite://outbox.db").await.is_empty());
        assert!(
            database_addresses("postgres:///db?host=/var/run/postgresql")
                .await
                .is_empty()
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_sockets_to_the_given_address_are_changed() {
        use std::net::{TcpListener, TcpStream};

        let database = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_database = TcpStream::connect(database.local_addr().unwrap()).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        to_database.set_nodelay(false).unwrap();
        to_other.set_nodelay(false).unwrap();

        assert!(set_on_sockets_to(&[database.local_addr().unwrap()]) >= 1);
        assert!(to_database.nodelay().unwrap());
        assert!(!to_other.nodelay().unwrap());
    }
}
