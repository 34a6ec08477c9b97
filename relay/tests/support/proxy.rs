//! A loopback TCP proxy that a test can cut, stall and restore, to take a
//! broker away from one client while the broker itself keeps running for
//! the others.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// Forwards every connection to its target until told otherwise.
pub struct TcpProxy {
    address: String,
    refusing: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    /// Cancelled to make the connections open so far go silent.
    stall: Arc<Mutex<CancellationToken>>,
    accept_loop: AbortHandle,
}

impl TcpProxy {
    /// Listen on a free loopback port and forward to `target` (`host:port`).
    pub async fn start(target: &str) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let address = listener.local_addr().expect("proxy address").to_string();
        let refusing = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let stall = Arc::new(Mutex::new(CancellationToken::new()));
        let target = target.to_owned();
        let accept_loop = {
            let refusing = Arc::clone(&refusing);
            let connections = Arc::clone(&connections);
            let stall = Arc::clone(&stall);
            tokio::spawn(async move {
                loop {
                    let Ok((mut inbound, _)) = listener.accept().await else {
                        continue;
                    };
                    if refusing.load(Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let target = target.clone();
                    let stalled = stall.lock().map(|token| token.clone()).unwrap_or_default();
                    let forward = tokio::spawn(async move {
                        let Ok(mut outbound) = TcpStream::connect(&target).await else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            () = stalled.cancelled() => {
                                // Keep both sockets open and silent, like a
                                // peer that stopped answering.
                                std::future::pending::<()>().await;
                            }
                        }
                    });
                    if let Ok(mut open) = connections.lock() {
                        open.push(forward.abort_handle());
                    }
                }
            })
            .abort_handle()
        };
        TcpProxy {
            address,
            refusing,
            connections,
            stall,
            accept_loop,
        }
    }

    /// `host:port` of the proxy.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Close every forwarded connection; new ones are still forwarded.
    pub fn drop_connections(&self) {
        if let Ok(mut open) = self.connections.lock() {
            for connection in open.drain(..) {
                connection.abort();
            }
        }
    }

    /// Close every forwarded connection and refuse new ones.
    pub fn cut(&self) {
        self.refusing.store(true, Ordering::SeqCst);
        self.drop_connections();
    }

    /// Forward new connections again after [`TcpProxy::cut`].
    pub fn restore(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }

    /// The connections open so far stop carrying bytes but stay open (a
    /// peer gone silent, a connection the broker blocked); new connections
    /// are forwarded as usual.
    pub fn stall_connections(&self) {
        if let Ok(mut token) = self.stall.lock() {
            token.cancel();
            *token = CancellationToken::new();
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        self.drop_connections();
    }
}
