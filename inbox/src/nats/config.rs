//! [`NatsConsumerConfig`]: the settings of a NATS JetStream inbox consumer.

use std::path::PathBuf;
use std::time::Duration;

pub use crate::consumer::DEAD_LETTER_SUFFIX;
use crate::consumer::{impl_batch_settings, impl_retry_settings};
use crate::error::Error;
use crate::prune::PruneSettings;

pub use outbox::broker::nats::NatsCredentials;

/// Settings of a [`NatsInboxConsumer`](super::NatsInboxConsumer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsConsumerConfig {
    /// The servers, each `nats://host:port` or `tls://host:port`; the
    /// client connects to one of them and fails over to the others.
    pub servers: Vec<String>,
    /// How the consumer logs in.
    pub credentials: NatsCredentials,
    /// PEM certificates of the authorities the servers' TLS certificates
    /// must chain to, instead of the system's roots; setting it requires
    /// TLS. Default none.
    pub tls_ca_file: Option<PathBuf>,
    /// The stream read. It must exist: the consumer does not create it.
    pub stream: String,
    /// The durable pull consumer on `stream`, created when missing
    /// (deliver all, explicit acknowledgement), bound to when present.
    pub durable: String,
    /// The subject (wildcards allowed) the durable consumer takes, when it
    /// is created; `None` (the default) for every subject of the stream.
    pub filter_subject: Option<String>,
    /// How long the server waits for a message's acknowledgement before it
    /// delivers it again. The consumer sends "in progress" for every
    /// message it holds (running, retrying, or waiting behind an earlier
    /// message of its aggregate) every third of it. Default 30 s.
    pub ack_wait: Duration,
    /// Most messages received and not yet finished; also the durable
    /// consumer's `max_ack_pending` when it is created. At least
    /// `batch_size`. Default 32.
    pub max_in_flight: usize,
    /// Most messages one pull request asks for, bounded by the free room of
    /// `max_in_flight`. Default 32.
    pub fetch_size: usize,
    /// How long one pull request waits for messages. Default 1 s.
    pub fetch_wait: Duration,
    /// Messages handled in one inbox transaction (`docs/inbox.md`,
    /// "Batches"). 1 (the default): a transaction per message.
    pub batch_size: usize,
    /// Longest a batch waits to fill once its first message arrived.
    /// Default 20 ms.
    pub batch_wait: Duration,
    /// Handler attempts per message before it is dead-lettered; at least 1.
    /// Earlier deliveries of the message (its delivery count) count as
    /// attempts. Default 5.
    pub max_attempts: u32,
    /// Backoff before the first retry; it doubles per retry, with jitter.
    /// Also the first pause after a database outage, a failed dead letter
    /// or a failed pull, and the delay of the `NAK` of a message given up.
    /// Default 200 ms.
    pub retry_base_delay: Duration,
    /// Longest backoff. Default 30 s.
    pub retry_max_delay: Duration,
    /// Suffix of the dead-letter subject: a message of subject `s` is
    /// dead-lettered to `s<suffix>`. Default [`DEAD_LETTER_SUFFIX`]
    /// (`.dlq`). A stream must take those subjects.
    pub dead_letter_suffix: String,
    /// Bound of connecting, of creating the consumer and of every
    /// acknowledgement and dead-letter publish. Default 10 s.
    pub request_timeout: Duration,
    /// Pruning of the inbox rows, done by a background task of the consumer.
    pub prune: PruneSettings,
}

impl_retry_settings!(NatsConsumerConfig, "nats");
impl_batch_settings!(NatsConsumerConfig, "nats", max_in_flight, "max_in_flight");

impl NatsConsumerConfig {
    /// The default settings for durable consumer `durable` on `stream` at
    /// `servers` (comma-separated).
    ///
    /// ```
    /// use std::time::Duration;
    /// use outbox_inbox::nats::{NatsConsumerConfig, NatsCredentials};
    ///
    /// let mut config = NatsConsumerConfig::new("nats://127.0.0.1:4222", "ORDERS", "billing");
    /// config.credentials = NatsCredentials::Token("s3cret".to_owned());
    /// config.ack_wait = Duration::from_secs(60);
    /// assert_eq!(config.dead_letter_subject("orders.created"), "orders.created.dlq");
    /// ```
    pub fn new(servers: &str, stream: impl Into<String>, durable: impl Into<String>) -> Self {
        NatsConsumerConfig {
            servers: servers
                .split(',')
                .map(str::trim)
                .filter(|server| !server.is_empty())
                .map(str::to_owned)
                .collect(),
            credentials: NatsCredentials::None,
            tls_ca_file: None,
            stream: stream.into(),
            durable: durable.into(),
            filter_subject: None,
            ack_wait: Duration::from_secs(30),
            max_in_flight: 32,
            fetch_size: 32,
            fetch_wait: Duration::from_secs(1),
            batch_size: 1,
            batch_wait: Duration::from_millis(20),
            max_attempts: 5,
            retry_base_delay: Duration::from_millis(200),
            retry_max_delay: Duration::from_secs(30),
            dead_letter_suffix: DEAD_LETTER_SUFFIX.to_owned(),
            request_timeout: Duration::from_secs(10),
            prune: PruneSettings::default(),
        }
    }

    /// The dead-letter subject of a message of `subject`.
    pub fn dead_letter_subject(&self, subject: &str) -> String {
        format!("{subject}{}", self.dead_letter_suffix)
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.servers.is_empty() {
            return Err(config_error("servers", "must name at least one server"));
        }
        for server in &self.servers {
            check_server(server)?;
        }
        if let NatsCredentials::CredsFile(path) = &self.credentials
            && path.as_os_str().is_empty()
        {
            return Err(config_error("credentials", "name an empty .creds path"));
        }
        if let Some(path) = &self.tls_ca_file
            && let Err(error) = std::fs::read(path)
        {
            return Err(config_error(
                "tls_ca_file",
                &format!("cannot be read ({}): {error}", path.display()),
            ));
        }
        if self.stream.trim().is_empty() {
            return Err(config_error("stream", "is empty"));
        }
        if self.stream.contains(['.', '*', '>', ' ']) {
            return Err(config_error(
                "stream",
                &format!("{:?} may not hold '.', '*', '>' or spaces", self.stream),
            ));
        }
        if self.durable.trim().is_empty() {
            return Err(config_error("durable", "is empty"));
        }
        if self.durable.contains(['.', '*', '>', ' ']) {
            return Err(config_error(
                "durable",
                &format!("{:?} may not hold '.', '*', '>' or spaces", self.durable),
            ));
        }
        if let Some(subject) = &self.filter_subject
            && subject.trim().is_empty()
        {
            return Err(config_error("filter_subject", "is empty"));
        }
        if self.ack_wait < Duration::from_millis(3) {
            return Err(config_error(
                "ack_wait",
                "must be at least 3 ms: the server delivers a message again once it waited this \
                 long for its acknowledgement",
            ));
        }
        if self.max_in_flight == 0 {
            return Err(config_error("max_in_flight", "must be at least 1"));
        }
        if self.fetch_size == 0 {
            return Err(config_error("fetch_size", "must be at least 1"));
        }
        if self.fetch_wait < Duration::from_millis(1) {
            return Err(config_error("fetch_wait", "must be at least 1 ms"));
        }
        if self.request_timeout.is_zero() {
            return Err(config_error("request_timeout", "must be more than zero"));
        }
        if self.dead_letter_suffix.is_empty() || !self.dead_letter_suffix.starts_with('.') {
            return Err(config_error(
                "dead_letter_suffix",
                "must start with '.' (a subject token of its own, such as .dlq)",
            ));
        }
        self.check_retry_schedule()?;
        self.check_batch_settings()?;
        if self.prune.interval.is_zero() {
            return Err(config_error("prune.interval", "must be more than zero"));
        }
        Ok(())
    }
}

/// Refuse a server the client cannot connect to, naming why.
fn check_server(server: &str) -> Result<(), Error> {
    let refusal = match server.split_once("://") {
        Some(("nats" | "tls", rest)) if !rest.trim().is_empty() => None,
        Some(("nats" | "tls", _)) => Some("names no host".to_owned()),
        Some((scheme, _)) => Some(format!(
            "has scheme {scheme}://; the consumer takes nats:// or tls://"
        )),
        None => {
            Some("has no scheme; the consumer takes nats://host:port or tls://host:port".to_owned())
        }
    };
    if let Some(reason) = refusal {
        return Err(config_error(
            &format!("server {}", outbox::mask_password(server)),
            &reason,
        ));
    }
    server
        .parse::<async_nats::ServerAddr>()
        .map(drop)
        .map_err(|error| {
            config_error(
                &format!("server {}", outbox::mask_password(server)),
                &format!("does not parse: {error}"),
            )
        })
}

pub(crate) fn config_error(field: &str, reason: &str) -> Error {
    Error::Config(format!("nats consumer: {field} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NatsConsumerConfig {
        NatsConsumerConfig::new("nats://127.0.0.1:4222", "ORDERS", "billing")
    }

    fn refusal(config: NatsConsumerConfig) -> String {
        match config.validate() {
            Err(Error::Config(message)) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn validates_the_settings() {
        assert!(config().validate().is_ok());
        let secret = NatsConsumerConfig {
            credentials: NatsCredentials::Token("secret".to_owned()),
            ..config()
        };
        assert!(!format!("{secret:?}").contains("secret\""));
        let no_stream = NatsConsumerConfig {
            stream: " ".to_owned(),
            ..config()
        };
        assert!(refusal(no_stream).contains("stream is empty"));
        let zero_ack_wait = NatsConsumerConfig {
            ack_wait: Duration::ZERO,
            ..config()
        };
        assert!(refusal(zero_ack_wait).contains("ack_wait"));
        let no_durable = NatsConsumerConfig {
            durable: String::new(),
            ..config()
        };
        assert!(refusal(no_durable).contains("durable"));
        let unfillable = config().batch(64, Duration::ZERO);
        assert!(refusal(unfillable).contains("max_in_flight 32"));
        let unreadable_ca = NatsConsumerConfig {
            tls_ca_file: Some("/nonexistent/ca.pem".into()),
            ..config()
        };
        assert!(refusal(unreadable_ca).contains("tls_ca_file"));
    }

    #[test]
    fn refuses_servers_it_cannot_connect_to() {
        for (servers, named) in [
            ("", "at least one server"),
            ("redis://127.0.0.1:6379", "redis://"),
            ("127.0.0.1:4222", "no scheme"),
            ("nats://", "no host"),
            ("nats://127.0.0.1:notaport", "does not parse"),
        ] {
            let message = refusal(NatsConsumerConfig::new(servers, "S", "d"));
            assert!(message.contains(named), "{servers}: {message}");
        }
        let both = NatsConsumerConfig::new("nats://a:4222, tls://b:4222", "S", "d");
        assert_eq!(both.servers.len(), 2);
        assert!(both.validate().is_ok());
    }
}
