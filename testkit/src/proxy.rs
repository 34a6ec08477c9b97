//! [`TcpProxy`]: a loopback TCP proxy in front of a real server, which a
//! test severs and restores to cut a client off its server without
//! touching the server (which other tests share).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards connections from a loopback port to an upstream `host:port`.
///
/// [`TcpProxy::sever`] closes every forwarded connection at once, as a
/// network cut or a server crash would, and makes the proxy close every
/// new connection right after accepting it; [`TcpProxy::restore`] makes it
/// forward again. Point the client under test at [`TcpProxy::route`] of
/// the server's URL; the test's own connections go to the server directly.
///
/// [`TcpProxy::hold_to_server`] and [`TcpProxy::hold_to_client`] keep the
/// connections open but hold back the bytes going one way, as a slow or
/// paused peer would; [`TcpProxy::release_held`] forwards what was held and
/// goes on as usual. A test can so catch a client with a request in flight:
/// a statement sent but not yet run, a message sent but not yet confirmed.
/// [`TcpProxy::hold_open_connections_to_server_after`] does so only on the
/// connections open at the call, after letting a given number of bytes
/// through: the first messages of a batch reach the server and are
/// answered, the rest wait, and a new connection works as usual.
///
/// ```no_run
/// # async fn example() {
/// let proxy = outbox_testkit::TcpProxy::in_front_of("postgres://postgres@127.0.0.1:5432/test").await;
/// let url = proxy.route("postgres://postgres@127.0.0.1:5432/test");
/// // ... connect the code under test to `url` ...
/// proxy.sever();
/// // ... the code under test sees its database go away ...
/// proxy.restore();
/// # let _ = url; }
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    address: SocketAddr,
    state: Arc<ProxyState>,
    accepting: JoinHandle<()>,
}

/// Connections numbered below `connections_below` forward `allowance` more
/// bytes toward the server, then hold the rest until the release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PartialHold {
    /// Tells one hold from the next.
    id: u64,
    connections_below: u64,
    allowance: usize,
}

#[derive(Debug)]
struct ProxyState {
    upstream: String,
    severed: AtomicBool,
    /// Bumped by every sever: each forwarded connection ends when it moves.
    cuts: watch::Sender<u64>,
    /// Bumped by every stall: each forwarded connection goes silent when it
    /// moves.
    stalls: watch::Sender<u64>,
    /// Whether bytes from clients to the server are held back.
    to_server_held: watch::Sender<bool>,
    /// Whether bytes from the server to clients are held back.
    to_client_held: watch::Sender<bool>,
    /// Connections accepted so far: each one's number.
    accepted: AtomicU64,
    /// A hold of the bytes to the server on the connections numbered below
    /// its bound, after an allowance (see
    /// [`TcpProxy::hold_open_connections_to_server_after`]).
    partial_hold: watch::Sender<Option<PartialHold>>,
    refused: AtomicU64,
    cut_connections: AtomicU64,
}

impl TcpProxy {
    /// A proxy on an ephemeral loopback port forwarding to `upstream`
    /// (`host:port`).
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: impl Into<String>) -> TcpProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|error| panic!("the test proxy cannot bind a loopback port: {error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("the test proxy has no local address: {error}"));
        let state = Arc::new(ProxyState {
            upstream: upstream.into(),
            severed: AtomicBool::new(false),
            cuts: watch::Sender::new(0),
            stalls: watch::Sender::new(0),
            to_server_held: watch::Sender::new(false),
            to_client_held: watch::Sender::new(false),
            accepted: AtomicU64::new(0),
            partial_hold: watch::Sender::new(None),
            refused: AtomicU64::new(0),
            cut_connections: AtomicU64::new(0),
        });
        let accepting = tokio::spawn(accept(listener, Arc::clone(&state)));
        TcpProxy {
            address,
            state,
            accepting,
        }
    }

    /// A proxy forwarding to the server `url` names (its `host:port`, the
    /// scheme's default port when it names none).
    ///
    /// # Panics
    /// When `url` names no host, or as [`TcpProxy::start`].
    pub async fn in_front_of(url: &str) -> TcpProxy {
        let upstream = server_address(url)
            .unwrap_or_else(|| panic!("the test proxy cannot find a host:port in {url}"));
        TcpProxy::start(upstream).await
    }

    /// The proxy's own address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `url` with its `host:port` replaced by the proxy's address.
    pub fn route(&self, url: &str) -> String {
        let Some((start, end)) = host_span(url) else {
            return url.to_owned();
        };
        format!("{}{}{}", &url[..start], self.address, &url[end..])
    }

    /// Close every forwarded connection now, and every new one as soon as
    /// it is accepted, until [`TcpProxy::restore`].
    pub fn sever(&self) {
        self.state.severed.store(true, Ordering::SeqCst);
        self.state.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// Close every forwarded connection now; new ones are forwarded as
    /// usual (a server that dropped its clients and is still there).
    pub fn drop_connections(&self) {
        self.state.cuts.send_modify(|cuts| *cuts += 1);
    }

    /// Every forwarded connection stops carrying bytes but stays open, like
    /// a peer gone silent or a connection the server blocked; new ones are
    /// forwarded as usual.
    pub fn stall_connections(&self) {
        self.state.stalls.send_modify(|stalls| *stalls += 1);
    }

    /// Hold back every byte clients send to the server, on open and new
    /// connections, until [`TcpProxy::release_held`]: what a client sends
    /// from now on reaches the server only then. Connections stay open.
    pub fn hold_to_server(&self) {
        self.state.to_server_held.send_replace(true);
    }

    /// Hold back every byte the server sends to clients, on open and new
    /// connections, until [`TcpProxy::release_held`]: the server gets its
    /// requests and answers them, but the answers wait. Connections stay
    /// open.
    pub fn hold_to_client(&self) {
        self.state.to_client_held.send_replace(true);
    }

    /// On each connection open now, let `allowance` more bytes through to
    /// the server, then hold back the rest of what the client sends until
    /// [`TcpProxy::release_held`]. The server's answers still flow, and
    /// connections opened later are forwarded as usual: a client whose
    /// connection stopped carrying its requests part-way through a batch,
    /// and which can open a new one.
    pub fn hold_open_connections_to_server_after(&self, allowance: usize) {
        let connections_below = self.state.accepted.load(Ordering::SeqCst);
        self.state.partial_hold.send_modify(|hold| {
            let id = hold.map_or(1, |hold| hold.id + 1);
            *hold = Some(PartialHold {
                id,
                connections_below,
                allowance,
            });
        });
    }

    /// Forward what was held back, both ways, and stop holding.
    pub fn release_held(&self) {
        self.state.to_server_held.send_replace(false);
        self.state.to_client_held.send_replace(false);
        self.state.partial_hold.send_replace(None);
    }

    /// Forward new connections again.
    pub fn restore(&self) {
        self.state.severed.store(false, Ordering::SeqCst);
    }

    /// Connections closed right after they were accepted, while severed.
    pub fn refused_connections(&self) -> u64 {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// Forwarded connections closed by [`TcpProxy::sever`].
    pub fn cut_connections(&self) -> u64 {
        self.state.cut_connections.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.state.cuts.send_modify(|cuts| *cuts += 1);
    }
}

/// Accept connections until the proxy is dropped.
async fn accept(listener: TcpListener, state: Arc<ProxyState>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(error) => {
                eprintln!("the test proxy cannot accept a connection: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        // Subscribed before the check: a sever after it still cuts this one.
        let cuts = state.cuts.subscribe();
        let stalls = state.stalls.subscribe();
        if state.severed.load(Ordering::SeqCst) {
            state.refused.fetch_add(1, Ordering::SeqCst);
            drop(client);
            continue;
        }
        let number = state.accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(forward(client, number, cuts, stalls, Arc::clone(&state)));
    }
}

/// Copy bytes both ways between `client` and the upstream until either
/// side closes or the proxy is severed; after a stall, hold both sockets
/// open and silent until then.
async fn forward(
    mut client: TcpStream,
    number: u64,
    mut cuts: watch::Receiver<u64>,
    mut stalls: watch::Receiver<u64>,
    state: Arc<ProxyState>,
) {
    let copying = async {
        let mut server = match TcpStream::connect(&state.upstream).await {
            Ok(server) => server,
            Err(error) => {
                eprintln!("the test proxy cannot reach {}: {error}", state.upstream);
                return;
            }
        };
        // Borrowed halves: a stall drops the copying but keeps both
        // sockets open.
        let (mut client_reader, mut client_writer) = client.split();
        let (mut server_reader, mut server_writer) = server.split();
        let to_server = pump(
            &mut client_reader,
            &mut server_writer,
            Gate {
                held: state.to_server_held.subscribe(),
                partial: Some(PartialGate {
                    number,
                    hold: state.partial_hold.subscribe(),
                    spent: None,
                }),
            },
        );
        let to_client = pump(
            &mut server_reader,
            &mut client_writer,
            Gate {
                held: state.to_client_held.subscribe(),
                partial: None,
            },
        );
        tokio::select! {
            // Either side closing ends the connection; how is of no interest.
            _ = futures::future::try_join(to_server, to_client) => {}
            _ = stalls.changed() => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = copying => {}
        _ = cuts.changed() => {
            state.cut_connections.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What lets the bytes of one direction of one connection through.
struct Gate {
    /// Whether every byte is held back.
    held: watch::Receiver<bool>,
    /// Toward the server: the connection's partial-hold state.
    partial: Option<PartialGate>,
}

/// One connection's view of the partial holds toward the server.
struct PartialGate {
    /// The connection's number: a hold covers the connections below its
    /// bound.
    number: u64,
    hold: watch::Receiver<Option<PartialHold>>,
    /// The id of the hold in force, and what is left of its allowance.
    spent: Option<(u64, usize)>,
}

impl Gate {
    /// How many of the next `wanted` bytes may go on, waiting while none
    /// may; `None` when the proxy is gone and nothing will release them.
    async fn allow(&mut self, wanted: usize) -> Option<usize> {
        loop {
            self.held.wait_for(|held| !*held).await.ok()?;
            let Some(PartialGate {
                number,
                hold: partial,
                spent,
            }) = &mut self.partial
            else {
                return Some(wanted);
            };
            let hold = *partial.borrow_and_update();
            let Some(hold) = hold.filter(|hold| *number < hold.connections_below) else {
                return Some(wanted);
            };
            let left = match spent {
                Some((id, left)) if *id == hold.id => left,
                _ => &mut spent.insert((hold.id, hold.allowance)).1,
            };
            if *left > 0 {
                let allowed = wanted.min(*left);
                *left -= allowed;
                return Some(allowed);
            }
            // Allowance spent: wait for the release (or a new hold).
            tokio::select! {
                changed = partial.changed() => changed.ok()?,
                changed = self.held.changed() => changed.ok()?,
            }
        }
    }
}

/// Copy bytes from `from` to `to` until `from` closes, then close `to`'s
/// side. A chunk read while the gate holds waits until it lets it through:
/// bytes read after a hold began go on only after the release.
async fn pump(
    from: &mut (impl AsyncRead + Unpin),
    to: &mut (impl AsyncWrite + Unpin),
    mut gate: Gate,
) -> std::io::Result<()> {
    let mut buffer = vec![0_u8; 16 * 1024];
    loop {
        let read = from.read(&mut buffer).await?;
        if read == 0 {
            return to.shutdown().await;
        }
        let mut written = 0;
        while written < read {
            let Some(allowed) = gate.allow(read - written).await else {
                // The proxy is gone: nothing will release the bytes.
                return Ok(());
            };
            to.write_all(&buffer[written..written + allowed]).await?;
            written += allowed;
        }
    }
}

/// Where the `host:port` of `url` starts and ends: after `scheme://` and
/// any `user:password@`, up to the path, query or fragment.
fn host_span(url: &str) -> Option<(usize, usize)> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_start = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
    Some((start + host_start, start + authority_end))
}

/// The `host:port` the server `url` names, with the scheme's default port
/// when it names none.
fn server_address(url: &str) -> Option<String> {
    let (start, end) = host_span(url)?;
    let host = &url[start..end];
    if host.is_empty() {
        return None;
    }
    if host
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
    {
        return Some(host.to_owned());
    }
    let port = match url[..url.find(':')?].to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => 5432,
        "mysql" | "mariadb" => 3306,
        "amqp" => 5672,
        "amqps" => 5671,
        _ => return None,
    };
    Some(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[test]
    fn finds_the_server_of_a_url() {
        assert_eq!(
            server_address("postgres://postgres@127.0.0.1:5432/test").as_deref(),
            Some("127.0.0.1:5432")
        );
        assert_eq!(
            server_address("mysql://root:pw@db/app?ssl-mode=disabled").as_deref(),
            Some("db:3306")
        );
        assert_eq!(server_address("sqlite://outbox.db"), None);
    }

    /// An echo server on loopback; its address.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut reader, mut writer) = stream.split();
                    let _ = tokio::io::copy(&mut reader, &mut writer).await;
                });
            }
        });
        address
    }

    async fn echoes(stream: &mut TcpStream) -> bool {
        if stream.write_all(b"ping").await.is_err() {
            return false;
        }
        let mut answer = [0_u8; 4];
        stream.read_exact(&mut answer).await.is_ok() && &answer == b"ping"
    }

    #[tokio::test]
    async fn routes_a_url_and_cuts_and_restores_connections() {
        let proxy = TcpProxy::start(echo_server().await.to_string()).await;
        assert_eq!(
            proxy.route("postgres://u:pw@db.example:5432/test?x=1"),
            format!("postgres://u:pw@{}/test?x=1", proxy.address())
        );

        let mut open = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut open).await, "forwarded");

        proxy.sever();
        assert!(!echoes(&mut open).await, "an open connection is cut");
        let mut refused = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(!echoes(&mut refused).await, "a new connection is closed");
        assert_eq!(proxy.refused_connections(), 1);
        assert_eq!(proxy.cut_connections(), 1);

        proxy.restore();
        let mut again = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut again).await, "forwarded again");

        proxy.drop_connections();
        assert!(!echoes(&mut again).await, "a dropped connection is closed");
        let mut after_drop = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(
            echoes(&mut after_drop).await,
            "new connections are forwarded"
        );
    }

    /// Whether `ping` can be sent on `stream` (it stays open) and no echo
    /// comes back within 300 ms.
    async fn sends_without_answer(stream: &mut TcpStream) -> bool {
        stream
            .write_all(b"ping")
            .await
            .expect("the socket stays open");
        let mut answer = [0_u8; 4];
        let read = tokio::time::timeout(
            std::time::Duration::from_millis(300),
            stream.read_exact(&mut answer),
        )
        .await;
        read.is_err()
    }

    #[tokio::test]
    async fn a_stalled_connection_stays_open_and_silent() {
        let proxy = TcpProxy::start(echo_server().await.to_string()).await;
        let mut stalled = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut stalled).await, "forwarded");
        proxy.stall_connections();
        assert!(
            sends_without_answer(&mut stalled).await,
            "a stalled connection carries nothing"
        );
        let mut fresh = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut fresh).await, "new connections are forwarded");
    }

    #[tokio::test]
    async fn a_partial_hold_lets_its_allowance_through_on_open_connections_only() {
        let proxy = TcpProxy::start(echo_server().await.to_string()).await;
        let mut open = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut open).await, "forwarded");
        proxy.hold_open_connections_to_server_after(6);
        open.write_all(b"pingpong").await.expect("send");
        let mut answer = [0_u8; 6];
        open.read_exact(&mut answer)
            .await
            .expect("the allowance passes");
        assert_eq!(&answer, b"pingpo");
        assert!(
            sends_without_answer(&mut open).await,
            "past the allowance, bytes are held"
        );
        let mut fresh = TcpStream::connect(proxy.address()).await.expect("connect");
        assert!(echoes(&mut fresh).await, "a new connection is not held");
        proxy.release_held();
        let mut rest = [0_u8; 6];
        open.read_exact(&mut rest).await.expect("released");
        assert_eq!(&rest, b"ngping");
        assert!(echoes(&mut open).await, "forwarded after the release");
    }

    #[tokio::test]
    async fn held_bytes_are_forwarded_on_release() {
        let proxy = TcpProxy::start(echo_server().await.to_string()).await;
        for hold in [TcpProxy::hold_to_server, TcpProxy::hold_to_client] {
            let mut connection = TcpStream::connect(proxy.address()).await.expect("connect");
            assert!(echoes(&mut connection).await, "forwarded");
            hold(&proxy);
            assert!(
                sends_without_answer(&mut connection).await,
                "held bytes do not pass"
            );
            proxy.release_held();
            let mut answer = [0_u8; 4];
            connection
                .read_exact(&mut answer)
                .await
                .expect("the held bytes arrive on release");
            assert_eq!(&answer, b"ping");
            assert!(echoes(&mut connection).await, "forwarded after the release");
        }
    }
}
