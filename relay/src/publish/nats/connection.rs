//! The publisher's NATS client, one generation at a time.
//!
//! async-nats reconnects by itself: after a lost connection it opens a new
//! one and writes the commands still queued for the client, while those
//! already in the old connection's write buffer are lost. Pipelined
//! publishes of one aggregate would then reach the stream out of order:
//! the lost ones are sent again later, behind the ones written after the
//! reconnect. So a [`Session`] never outlives its connection: its client
//! answers the server's login with the real credentials until its first
//! connect succeeds, and fails every later login ("armed"). The one
//! reconnect attempt it is allowed per server (`max_reconnects`) then
//! fails before anything is written, the client's connection task ends,
//! every publish still unacknowledged on it fails (broken pipe) and every
//! later one is refused. The publisher opens a new client, a new
//! generation, whose sends wait until those of the old one are settled
//! ([`SendOrder`](crate::publish::send_order::SendOrder)).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, context::ContextBuilder};
use async_nats::{Auth, AuthError, ConnectOptions};

use super::config::{NatsCredentials, NatsPublisherConfig};
use crate::publish::PublishFailure;
use crate::publish::client_slot::SlotClient;

/// Publishes that may await their acknowledgement at once on one client:
/// far more than the events the relay keeps in flight (a fetch leaves out
/// at most 10 000 ids at the largest `batch_size`, plus the batch being
/// sent), so that handing a batch over never meets the bound. Past it, a
/// publish is not sent and its event is unavailable
/// (`backpressure_on_inflight` is off: waiting for a permit inside a
/// hand-over would wait for acknowledgements the relay awaits only after
/// it).
const MAX_ACK_INFLIGHT: usize = 100_000;

/// One client and its generation.
pub(super) struct Session {
    pub(super) client: async_nats::Client,
    pub(super) jetstream: jetstream::Context,
    /// Grows with every client the publisher opens.
    pub(super) generation: u64,
    /// Set once a publish on it failed for want of the connection: the
    /// next send opens a new client.
    broken: AtomicBool,
}

impl SlotClient for Session {
    /// Not broken, and still on its first connection: once disconnected,
    /// a client never carries a publish again.
    fn is_live(&self) -> bool {
        !self.is_broken() && self.client.connection_state() == State::Connected
    }
}

impl Session {
    pub(super) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    pub(super) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Relaxed);
    }
}

/// The credentials a login answers with.
#[derive(Clone)]
enum Login {
    None,
    UserPassword(String, String),
    Token(String),
    /// A user JWT and the key pair of its seed, which signs the nonce.
    Jwt(String, Arc<nkeys::KeyPair>),
}

impl Login {
    async fn load(credentials: &NatsCredentials) -> Result<Self, String> {
        Ok(match credentials {
            NatsCredentials::None => Login::None,
            NatsCredentials::UserPassword { user, password } => {
                Login::UserPassword(user.clone(), password.clone())
            }
            NatsCredentials::Token(token) => Login::Token(token.clone()),
            NatsCredentials::CredsFile(path) => {
                let contents = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
                let (jwt, key_pair) = read_creds(&contents, path)?;
                Login::Jwt(jwt, Arc::new(key_pair))
            }
            other => {
                return Err(format!(
                    "this version of the relay cannot log in with {other:?}"
                ));
            }
        })
    }

    /// The answer to a login whose nonce is `nonce`.
    fn answer(&self, nonce: &[u8]) -> Result<Auth, AuthError> {
        let mut auth = Auth::new();
        match self {
            Login::None => {}
            Login::UserPassword(user, password) => {
                auth.username = Some(user.clone());
                auth.password = Some(password.clone());
            }
            Login::Token(token) => auth.token = Some(token.clone()),
            Login::Jwt(jwt, key_pair) => {
                auth.jwt = Some(jwt.clone());
                auth.signature = Some(key_pair.sign(nonce).map_err(AuthError::new)?);
            }
        }
        Ok(auth)
    }
}

/// The user JWT and the key pair of the `.creds` file at `path`, whose
/// text is `contents`.
pub(super) fn read_creds(
    contents: &str,
    path: &std::path::Path,
) -> Result<(String, nkeys::KeyPair), String> {
    let (jwt, seed) = parse_creds(contents).ok_or_else(|| {
        format!(
            "{} is not a NATS .creds file (a user JWT and an nkey seed)",
            path.display()
        )
    })?;
    let key_pair = nkeys::KeyPair::from_seed(seed)
        .map_err(|error| format!("the seed in {} is not valid: {error}", path.display()))?;
    Ok((jwt.to_owned(), key_pair))
}

/// The user JWT and the nkey seed of a `.creds` file: the first line
/// inside the `-----BEGIN NATS USER JWT-----` block and the first inside
/// the `-----BEGIN USER NKEY SEED-----` block.
fn parse_creds(contents: &str) -> Option<(&str, &str)> {
    let block = |begin: &str| {
        let mut lines = contents.lines().map(str::trim);
        lines.find(|line| line.starts_with("---") && line.contains(begin))?;
        lines.find(|line| !line.is_empty())
    };
    let jwt = block("BEGIN NATS USER JWT")?;
    let seed = block("BEGIN USER NKEY SEED")?;
    (!jwt.starts_with("---") && !seed.starts_with("---")).then_some((jwt, seed))
}

/// Open a client for `config`: connected, logged in, and armed so that it
/// never connects again.
pub(super) async fn open(
    config: &NatsPublisherConfig,
    generation: u64,
) -> Result<Session, PublishFailure> {
    crate::publish::tls_provider::use_ring_for_tls();
    let servers = config.servers_text();
    let login = Login::load(&config.credentials).await.map_err(|reason| {
        PublishFailure::Unavailable(format!("cannot log in to nats at {servers}: {reason}"))
    })?;
    let armed = Arc::new(AtomicBool::new(false));
    let answering = Arc::clone(&armed);
    let mut options = ConnectOptions::with_auth_callback(move |nonce: Vec<u8>| {
        let answer = if answering.load(Ordering::SeqCst) {
            Err(AuthError::new(
                "this client connected once; a new client replaces it",
            ))
        } else {
            login.answer(&nonce)
        };
        std::future::ready(answer)
    })
    .name("outbox-relay")
    .connection_timeout(config.connect_timeout)
    // One attempt per server on the first connect; after a disconnect,
    // as many, each failing at the login before anything is written.
    .max_reconnects(Some(config.servers.len().max(1)))
    // Two unanswered pings close a silent connection.
    .ping_interval(config.ack_timeout.max(Duration::from_secs(1)))
    .request_timeout(Some(config.ack_timeout));
    if let Some(path) = &config.tls_ca_file {
        options = options
            .add_root_certificates(path.clone())
            .require_tls(true);
    }

    let addresses: Vec<async_nats::ServerAddr> = config
        .servers
        .iter()
        .filter_map(|server| server.parse().ok())
        .collect();
    let bound = config.connect_timeout * u32::try_from(addresses.len().max(1)).unwrap_or(1)
        + config.ack_timeout;
    let client = match tokio::time::timeout(bound, options.connect(addresses)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => {
            return Err(PublishFailure::Unavailable(format!(
                "cannot connect to nats at {servers}: {error}"
            )));
        }
        Err(_elapsed) => {
            return Err(PublishFailure::Unavailable(format!(
                "nats at {servers} did not answer within {} ms",
                bound.as_millis()
            )));
        }
    };
    armed.store(true, Ordering::SeqCst);
    let jetstream = ContextBuilder::new()
        .timeout(config.ack_timeout)
        .ack_timeout(config.ack_timeout)
        .max_ack_inflight(MAX_ACK_INFLIGHT)
        .backpressure_on_inflight(false)
        .build(client.clone());
    Ok(Session {
        client,
        jetstream,
        generation,
        broken: AtomicBool::new(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creds_file_gives_its_jwt_and_seed() {
        let creds = "-----BEGIN NATS USER JWT-----\n\
                     eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5In0.e30.c2ln\n\
                     ------END NATS USER JWT------\n\
                     \n\
                     ************************* IMPORTANT *************************\n\
                     NKEY Seed printed below can be used to sign and prove identity.\n\
                     \n\
                     -----BEGIN USER NKEY SEED-----\n\
                     SUAIO3FHUX5PNV2LQIIP7TZ3N4L7TX3W53MQGEIVYFIGA635OZCKEYHFLM\n\
                     ------END USER NKEY SEED------\n";
        assert_eq!(
            parse_creds(creds),
            Some((
                "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5In0.e30.c2ln",
                "SUAIO3FHUX5PNV2LQIIP7TZ3N4L7TX3W53MQGEIVYFIGA635OZCKEYHFLM"
            ))
        );
        assert_eq!(parse_creds("not a creds file"), None);
    }

    #[test]
    fn a_token_login_answers_with_the_token() {
        let login = Login::Token("t".to_owned());
        let auth = login.answer(b"nonce").expect("a token");
        assert_eq!(auth.token.as_deref(), Some("t"));
    }
}
