//! [`Session`]: one connection to NATS and the durable consumer bound on
//! it; the acknowledgements, the dead letters and the "in progress" of
//! the messages in flight go through it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::{self, AckKind};
use async_nats::{ConnectErrorKind, ConnectOptions, ServerAddr};
use tokio::time::Instant;

use super::config::{NatsConsumerConfig, NatsCredentials, config_error};
use super::message::{NatsMessage, dead_letter_headers};
use crate::consumer::OpenError;
use crate::error::Error;

/// One connection and the durable consumer bound on it.
pub(crate) struct Session {
    pub(crate) config: Arc<NatsConsumerConfig>,
    pub(crate) jetstream: jetstream::Context,
    pub(crate) consumer: PullConsumer,
    /// The consumer's `ack_wait` on the server (it may have been created
    /// with other settings than these).
    pub(crate) ack_wait: Duration,
    /// The messages received and not yet settled, by stream sequence.
    in_flight: Mutex<HashMap<u64, jetstream::Message>>,
}

impl Session {
    /// Connect and bind to the durable consumer, creating it when missing.
    pub(crate) async fn open(config: &Arc<NatsConsumerConfig>) -> Result<Self, OpenError> {
        let client = connect(config).await?;
        let mut jetstream = jetstream::new(client);
        jetstream.set_timeout(config.request_timeout);
        let consumer = bind(config, &jetstream).await?;
        let ack_wait = consumer.cached_info().config.ack_wait;
        Ok(Session {
            config: Arc::clone(config),
            jetstream,
            consumer,
            ack_wait: if ack_wait.is_zero() {
                config.ack_wait
            } else {
                ack_wait
            },
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// Keep `message` as in flight; `false` when it is already (the server
    /// delivered it again while this consumer holds it).
    pub(crate) fn hold(&self, message: &NatsMessage) -> bool {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if in_flight.contains_key(&message.sequence) {
            return false;
        }
        in_flight.insert(message.sequence, message.message.clone());
        true
    }

    /// Forget the settled `messages`.
    pub(crate) fn release<'m>(&self, messages: impl IntoIterator<Item = &'m NatsMessage>) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for message in messages {
            in_flight.remove(&message.sequence);
        }
    }

    /// Tell the server that every message held is in progress, so that it
    /// does not deliver it again after `ack_wait`.
    pub(crate) async fn refresh_in_flight(&self) {
        let held: Vec<jetstream::Message> = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for message in held {
            if let Err(error) = message.ack_with(AckKind::Progress).await {
                tracing::debug!(%error, "cannot mark a message in progress");
            }
        }
    }

    /// Send `kind` for `message`, awaiting the server's confirmation. A
    /// failure is logged: the message comes again after `ack_wait`, and
    /// the inbox recognises it as a duplicate.
    pub(crate) async fn acknowledge(&self, message: &NatsMessage, kind: AckKind) {
        let name = ack_name(kind);
        let sent = tokio::time::timeout(
            self.config.request_timeout,
            message.message.double_ack_with(kind),
        )
        .await;
        let error = match sent {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(_) => "not confirmed in time".to_owned(),
        };
        tracing::warn!(
            subject = %message.message.subject,
            stream_sequence = message.sequence,
            %error,
            "cannot {name} the message; it comes again after ack_wait"
        );
    }

    /// Publish the dead letter of `message` with `reason` and await the
    /// stream's acknowledgement: the dead-letter subject once stored.
    pub(crate) async fn dead_letter(
        &self,
        message: &NatsMessage,
        reason: &str,
    ) -> Result<String, Error> {
        let subject = self.config.dead_letter_subject(&message.message.subject);
        let headers = dead_letter_headers(message, &self.config.stream, reason);
        let publishing = async {
            self.jetstream
                .publish_with_headers(subject.clone(), headers, message.message.payload.clone())
                .await?
                .await
        };
        match tokio::time::timeout(self.config.request_timeout, publishing).await {
            Ok(Ok(_ack)) => Ok(subject),
            Ok(Err(error)) if error.kind() == PublishErrorKind::StreamNotFound => {
                Err(Error::DeadLetter(format!(
                    "no stream takes the dead-letter subject {subject} (no responders): \
                     add it to a stream"
                )))
            }
            Ok(Err(error)) => Err(Error::DeadLetter(format!("{subject}: {error}"))),
            Err(_) => Err(Error::DeadLetter(format!(
                "{subject}: not acknowledged within {} ms",
                self.config.request_timeout.as_millis()
            ))),
        }
    }
}

/// Connect to one of the servers.
async fn connect(config: &NatsConsumerConfig) -> Result<async_nats::Client, OpenError> {
    let mut options = ConnectOptions::new()
        .name("outbox-inbox")
        .connection_timeout(config.request_timeout)
        .request_timeout(Some(config.request_timeout));
    options = match &config.credentials {
        NatsCredentials::None => options,
        NatsCredentials::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        NatsCredentials::Token(token) => options.token(token.clone()),
        NatsCredentials::CredsFile(path) => {
            options.credentials_file(path).await.map_err(|error| {
                OpenError::Refused(config_error(
                    "credentials",
                    &format!("cannot read the .creds file {}: {error}", path.display()),
                ))
            })?
        }
        other => {
            return Err(OpenError::Refused(config_error(
                "credentials",
                &format!("this version of the inbox cannot log in with {other:?}"),
            )));
        }
    };
    if let Some(path) = &config.tls_ca_file {
        options = options
            .add_root_certificates(path.clone())
            .require_tls(true);
    }
    let servers: Vec<ServerAddr> = config
        .servers
        .iter()
        .map(|server| server.parse())
        .collect::<Result<_, _>>()
        .map_err(|error| {
            OpenError::Refused(config_error("servers", &format!("do not parse: {error}")))
        })?;
    options
        .connect(servers)
        .await
        .map_err(|error| match error.kind() {
            ConnectErrorKind::Authentication | ConnectErrorKind::AuthorizationViolation => {
                OpenError::Refused(config_error(
                    "credentials",
                    &format!("were refused by the server: {error}"),
                ))
            }
            ConnectErrorKind::ServerParse | ConnectErrorKind::Tls => {
                OpenError::Refused(config_error("servers", &format!("cannot be used: {error}")))
            }
            _ => OpenError::Unreachable(error.to_string()),
        })
}

/// Bind to the durable consumer, creating it (deliver all, explicit
/// acknowledgement) when missing.
async fn bind(
    config: &NatsConsumerConfig,
    jetstream: &jetstream::Context,
) -> Result<PullConsumer, OpenError> {
    let stream = jetstream
        .get_stream(&config.stream)
        .await
        .map_err(|error| {
            let text = error.to_string();
            if text.contains("not found") {
                OpenError::Refused(config_error(
                    "stream",
                    &format!("{} does not exist on the server: {text}", config.stream),
                ))
            } else {
                OpenError::Unreachable(format!("stream {}: {text}", config.stream))
            }
        })?;
    let mut consumer_config = pull::Config {
        durable_name: Some(config.durable.clone()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        // The inbox's policy bounds the attempts and dead-letters; a server
        // limit would drop a message without a dead letter.
        max_deliver: -1,
        ..Default::default()
    };
    if let Some(subject) = &config.filter_subject {
        consumer_config.filter_subject.clone_from(subject);
    }
    let started = Instant::now();
    let consumer = stream
        .get_or_create_consumer(&config.durable, consumer_config)
        .await
        .map_err(|error| {
            let text = error.to_string();
            if text.contains("timed out") || text.contains("request") {
                OpenError::Unreachable(format!("durable consumer {}: {text}", config.durable))
            } else {
                OpenError::Refused(config_error(
                    "durable",
                    &format!("{} cannot be bound or created: {text}", config.durable),
                ))
            }
        })?;
    tracing::debug!(
        durable = %config.durable,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "bound to the durable consumer"
    );
    Ok(consumer)
}

fn ack_name(kind: AckKind) -> &'static str {
    match kind {
        AckKind::Ack => "ACK",
        AckKind::Nak(_) => "NAK",
        AckKind::Progress => "mark in progress",
        AckKind::Next => "ACK NEXT",
        AckKind::Term => "TERM",
    }
}
