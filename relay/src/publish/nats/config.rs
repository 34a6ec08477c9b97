//! [`NatsPublisherConfig`]: the servers a [`NatsPublisher`](super::NatsPublisher)
//! connects to, how it logs in, the subject of each topic, and the
//! timeouts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::Error;
use crate::publish::SubjectTemplate;

pub use outbox::broker::nats::NatsCredentials;

/// Settings of a [`NatsPublisher`](super::NatsPublisher).
///
/// ```
/// use std::time::Duration;
/// use outbox_relay::publish::nats::{NatsCredentials, NatsPublisherConfig, SubjectTemplate};
///
/// let mut config = NatsPublisherConfig::new(vec!["nats://127.0.0.1:4222".to_owned()]);
/// config.credentials = NatsCredentials::Token("s3cret".to_owned());
/// config.subjects.insert(
///     "orders".to_owned(),
///     SubjectTemplate::parse("orders.{aggregate_type}.{event_type}").unwrap(),
/// );
/// config.ack_timeout = Duration::from_secs(5);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsPublisherConfig {
    /// The servers, each `nats://host:port` or `tls://host:port`; the client
    /// connects to one of them.
    pub servers: Vec<String>,
    /// How the publisher logs in. Default none.
    pub credentials: NatsCredentials,
    /// The subject of each topic; a topic without an entry goes to the
    /// subject named after it.
    pub subjects: BTreeMap<String, SubjectTemplate>,
    /// How long a publish waits for the stream's acknowledgement; an event
    /// without one by then is
    /// [`PublishFailure::Unavailable`](crate::publish::PublishFailure::Unavailable),
    /// and the client is replaced. Default 5 s.
    pub ack_timeout: Duration,
    /// Bound of opening a connection. Default 5 s.
    pub connect_timeout: Duration,
    /// PEM certificates of the authorities the servers' TLS certificates
    /// must chain to, instead of the system's roots; setting it requires
    /// TLS. Default none.
    pub tls_ca_file: Option<PathBuf>,
}

impl NatsPublisherConfig {
    /// The default settings for `servers`.
    pub fn new(servers: Vec<String>) -> Self {
        NatsPublisherConfig {
            servers,
            credentials: NatsCredentials::None,
            subjects: BTreeMap::new(),
            ack_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            tls_ca_file: None,
        }
    }

    /// The subject template of `topic`.
    pub(super) fn subject_of(&self, topic: &str) -> &SubjectTemplate {
        static DEFAULT: std::sync::OnceLock<SubjectTemplate> = std::sync::OnceLock::new();
        self.subjects
            .get(topic)
            .unwrap_or_else(|| DEFAULT.get_or_init(SubjectTemplate::default))
    }

    /// The servers, for logs and errors (they never hold credentials).
    pub(super) fn servers_text(&self) -> String {
        self.servers.join(",")
    }

    /// Checks the server URLs (as the client reads them), the timeouts, and
    /// that a `.creds` file can be read (it is read again at every connect,
    /// so that a renewed file is used).
    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.servers.is_empty() {
            return Err(Error::InvalidBrokerUrl {
                url: "nats://".to_owned(),
                reason: "no servers".to_owned(),
            });
        }
        for server in &self.servers {
            if let Err(error) = server.parse::<async_nats::ServerAddr>() {
                return Err(Error::InvalidBrokerUrl {
                    url: outbox::mask_password(server),
                    reason: error.to_string(),
                });
            }
        }
        if self.ack_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::Config {
                path: "--config".to_owned(),
                reason: "nats.ack_timeout and nats.connect_timeout must be more than zero"
                    .to_owned(),
            });
        }
        if let Some(path) = &self.tls_ca_file
            && let Err(error) = std::fs::read(path)
        {
            return Err(Error::Config {
                path: "--config".to_owned(),
                reason: format!("nats.tls_ca_file: cannot read {}: {error}", path.display()),
            });
        }
        if let NatsCredentials::CredsFile(path) = &self.credentials {
            let read = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))
                .and_then(|contents| super::connection::read_creds(&contents, path).map(drop));
            if let Err(reason) = read {
                return Err(Error::Config {
                    path: "--config".to_owned(),
                    reason: format!("nats.creds_file: {reason}"),
                });
            }
        }
        Ok(())
    }
}
