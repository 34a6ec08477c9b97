//! [`RabbitMqPublisher`]: publishes outbox events to RabbitMQ (AMQP 0-9-1)
//! as CloudEvents in binary content mode (CONTRACT §3).
//!
//! One message per event: exchange = `topic`, routing key = `event_type`
//! (or the routing key configured for the topic), `mandatory`, persistent
//! (delivery mode 2), with properties `message_id` = `event_id`, `type` =
//! `event_type`, `content_type` = `application/json`, `timestamp` =
//! `created_at` (Unix seconds), and every CloudEvents attribute of
//! [`crate::publish::cloudevent`] in the headers table as
//! `cloudEvents:<name>`. W3C trace context in the `headers` column
//! (`traceparent`, `tracestate`) is also sent under its plain name.
//!
//! Publishing is pipelined on a channel in confirm mode: every message of a
//! batch is sent, then every confirm is awaited. An event counts as
//! published only on an Ack without a returned message. An unroutable
//! message (returned, since it is `mandatory`) or a Nack is
//! [`PublishFailure::Rejected`]. Returned messages are matched to their
//! event by `message_id`, not by the confirm they arrive with.
//!
//! Publishing to an exchange that does not exist makes RabbitMQ close the
//! channel (404), failing every message in flight on it. So an exchange is
//! checked with a passive declare on a throwaway channel before the first
//! publish to it; a missing exchange rejects its events without publishing.
//! Only exchanges found to exist are remembered: a missing one is looked up
//! again on the next publish that names it, so an event retried after the
//! exchange was declared is not rejected from memory.
//!
//! The connection is opened on the first publish and again on the first
//! publish after it was lost; every event of a publish that cannot connect
//! is [`PublishFailure::Unavailable`]. Concurrent publishes each use their
//! own channel from a small pool, so the confirms and returns of one batch
//! never mix with another's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};

use crate::OutboundEvent;
use crate::config::RoutingKey;
use crate::publish::cloudevent::CloudEvent;
use crate::publish::{PublishFailure, Publisher};

/// How long closing a broken channel may take before it is abandoned.
const CHANNEL_CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Idle channels kept open for later publishes.
const MAX_IDLE_CHANNELS: usize = 8;

/// Prefix of the CloudEvents attributes in the AMQP headers table.
const HEADER_PREFIX: &str = "cloudEvents:";

/// AMQP reply codes the publisher tells apart.
const REPLY_ACCESS_REFUSED: u16 = 403;
const REPLY_NOT_FOUND: u16 = 404;
const REPLY_PRECONDITION_FAILED: u16 = 406;

/// Settings of a [`RabbitMqPublisher`].
#[derive(Clone, PartialEq, Eq)]
pub struct RabbitMqPublisherConfig {
    /// `amqp://user:pass@host:port/vhost`, or `amqps://` for TLS.
    pub url: String,
    /// Routing key per exchange (`topic`), replacing `default_routing_key`
    /// for every event of that exchange.
    pub routing_keys: BTreeMap<String, RoutingKey>,
    /// Routing key of exchanges without an entry in `routing_keys`. Default:
    /// the event type.
    pub default_routing_key: RoutingKey,
    /// How long sending a batch and receiving its confirms may take; an
    /// event not confirmed by then is [`PublishFailure::Unavailable`].
    /// Default 30 s.
    pub confirm_timeout: Duration,
    /// Bound of opening the connection, a channel, or an exchange lookup.
    /// Default 10 s.
    pub connect_timeout: Duration,
}

impl RabbitMqPublisherConfig {
    /// The default settings for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            routing_keys: BTreeMap::new(),
            default_routing_key: RoutingKey::EventType,
            confirm_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for RabbitMqPublisherConfig {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqPublisherConfig")
            .field("url", &mask_password(&self.url))
            .field("routing_keys", &self.routing_keys)
            .field("default_routing_key", &self.default_routing_key)
            .field("confirm_timeout", &self.confirm_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// One open connection and its idle channels in confirm mode.
struct Session {
    connection: Connection,
    idle_channels: Mutex<Vec<Channel>>,
}

impl Session {
    fn is_connected(&self) -> bool {
        self.connection.status().connected()
    }
}

/// Publishes outbox events to RabbitMQ (see the module documentation).
pub struct RabbitMqPublisher {
    config: RabbitMqPublisherConfig,
    /// Display form of the URL, password masked.
    display_url: String,
    current: Mutex<Option<Arc<Session>>>,
    /// Held while connecting, so that concurrent publishes open one
    /// connection, not one each.
    connecting: tokio::sync::Mutex<()>,
    /// Exchanges found to exist.
    exchanges: Mutex<HashSet<String>>,
    /// Connections replaced after the previous one was closed by the broker
    /// or stuck.
    rebuilds: AtomicU64,
    /// Whether a connection was ever opened: a later one is a rebuild.
    ever_connected: AtomicBool,
}

impl std::fmt::Debug for RabbitMqPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RabbitMqPublisher")
            .field("url", &self.display_url)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

/// What a publish left of its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChannelState {
    /// Usable again.
    Healthy,
    /// Closed or in a bad state: close it, keep the connection.
    Broken,
    /// A send or confirm timed out: the connection itself may be stuck.
    Stuck,
}

/// The state of one event of a batch as it moves through the publish.
enum Slot {
    /// Not sent; this is its outcome.
    Done(Result<(), PublishFailure>),
    /// Ready to be sent.
    Ready(Box<Message>),
}

struct Message {
    exchange: ShortString,
    routing_key: ShortString,
    properties: BasicProperties,
}

impl RabbitMqPublisher {
    /// A publisher for `config`. Does not connect: the connection is opened
    /// by the first publish or by [`RabbitMqPublisher::connect`].
    pub fn new(config: RabbitMqPublisherConfig) -> Result<Self, crate::Error> {
        let display_url = mask_password(&config.url);
        if let Err(reason) = config.url.parse::<lapin::uri::AMQPUri>() {
            return Err(crate::Error::InvalidBrokerUrl {
                url: display_url,
                reason,
            });
        }
        if config.confirm_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(crate::Error::Config {
                path: "--config".to_owned(),
                reason:
                    "rabbitmq.confirm_timeout and rabbitmq.connect_timeout must be more than zero"
                        .to_owned(),
            });
        }
        let no_exchange = String::new();
        let fixed_keys = config
            .routing_keys
            .iter()
            .chain(std::iter::once((&no_exchange, &config.default_routing_key)));
        for (exchange, routing_key) in fixed_keys {
            let key_length = match routing_key {
                RoutingKey::EventType => 0,
                RoutingKey::Fixed(key) => key.len(),
            };
            if exchange.len() > 255 || key_length > 255 {
                return Err(crate::Error::Config {
                    path: "--config".to_owned(),
                    reason: format!(
                        "rabbitmq.routing_keys: {exchange:?} or its routing key is longer than 255 bytes"
                    ),
                });
            }
        }
        Ok(Self {
            config,
            display_url,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            exchanges: Mutex::new(HashSet::new()),
            rebuilds: AtomicU64::new(0),
            ever_connected: AtomicBool::new(false),
        })
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &RabbitMqPublisherConfig {
        &self.config
    }

    /// Open the connection now (publishes open it on demand), bounded by
    /// `connect_timeout`.
    pub async fn connect(&self) -> Result<(), PublishFailure> {
        self.session().await.map(|_| ())
    }

    fn live_session(&self) -> Option<Arc<Session>> {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        current
            .as_ref()
            .filter(|session| session.is_connected())
            .cloned()
    }

    /// The open session, connecting when there is none.
    async fn session(&self) -> Result<Arc<Session>, PublishFailure> {
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(session) = self.live_session() {
            return Ok(session);
        }
        // A session left here is closed (not live): drop it.
        drop(
            self.current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let properties =
            ConnectionProperties::default().with_connection_name("outbox-relay".into());
        let connected = tokio::time::timeout(
            self.config.connect_timeout,
            Connection::connect(&self.config.url, properties),
        )
        .await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                tracing::warn!(url = %self.display_url, %error, "cannot connect to rabbitmq");
                return Err(PublishFailure::Unavailable(format!(
                    "cannot connect to rabbitmq at {}: {error}",
                    self.display_url
                )));
            }
            Err(_elapsed) => {
                tracing::warn!(url = %self.display_url, timeout_ms = self.config.connect_timeout.as_millis(), "rabbitmq connection timed out");
                return Err(PublishFailure::Unavailable(format!(
                    "cannot connect to rabbitmq at {}: no connection within {} ms",
                    self.display_url,
                    self.config.connect_timeout.as_millis()
                )));
            }
        };
        if self.ever_connected.swap(true, Ordering::Relaxed) {
            self.rebuilds.fetch_add(1, Ordering::Relaxed);
            tracing::info!(url = %self.display_url, "reconnected to rabbitmq");
        } else {
            tracing::info!(url = %self.display_url, "connected to rabbitmq");
        }
        let session = Arc::new(Session {
            connection,
            idle_channels: Mutex::new(Vec::new()),
        });
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&session));
        Ok(session)
    }

    /// An idle channel of `session` in confirm mode, or a new one.
    async fn take_channel(&self, session: &Session) -> Result<Channel, PublishFailure> {
        loop {
            let idle = session
                .idle_channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match idle {
                Some(channel) if channel.status().connected() => return Ok(channel),
                Some(_closed) => continue,
                None => break,
            }
        }
        let opened = tokio::time::timeout(self.config.connect_timeout, async {
            let channel = session.connection.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<Channel, lapin::Error>(channel)
        })
        .await;
        match opened {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(error)) => Err(PublishFailure::Unavailable(format!(
                "cannot open a rabbitmq channel: {error}"
            ))),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "cannot open a rabbitmq channel: no answer within {} ms",
                self.config.connect_timeout.as_millis()
            ))),
        }
    }

    fn return_channel(&self, session: &Session, channel: Channel) {
        let mut idle = session
            .idle_channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if channel.status().connected() && idle.len() < MAX_IDLE_CHANNELS {
            idle.push(channel);
        }
    }

    /// Look up every exchange of `exchanges` not known to exist yet; returns
    /// the failure of each exchange that cannot be published to.
    async fn resolve_exchanges(
        &self,
        session: &Session,
        exchanges: HashSet<&str>,
    ) -> HashMap<String, PublishFailure> {
        let mut failures = HashMap::new();
        let unknown: Vec<&str> = {
            let known = self
                .exchanges
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // The default exchange always exists and cannot be declared.
            exchanges
                .into_iter()
                .filter(|exchange| !exchange.is_empty() && !known.contains(*exchange))
                .collect()
        };
        let lookups = unknown
            .iter()
            .map(|exchange| self.exchange_exists(session, exchange));
        let results = join_all(lookups).await;
        let mut cache = self
            .exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (exchange, result) in unknown.into_iter().zip(results) {
            match result {
                Ok(true) => {
                    cache.insert(exchange.to_owned());
                }
                Ok(false) => {
                    tracing::warn!(
                        exchange,
                        "rabbitmq exchange does not exist; its events are rejected"
                    );
                    failures.insert(exchange.to_owned(), missing_exchange_failure(exchange));
                }
                Err(failure) => {
                    failures.insert(exchange.to_owned(), failure);
                }
            }
        }
        failures
    }

    /// A passive declare of `exchange` on a throwaway channel (RabbitMQ
    /// closes the channel when the exchange does not exist).
    async fn exchange_exists(
        &self,
        session: &Session,
        exchange: &str,
    ) -> Result<bool, PublishFailure> {
        let Ok(name) = ShortString::try_new(exchange) else {
            return Err(PublishFailure::Rejected(format!(
                "rabbitmq exchange name is longer than 255 bytes: {exchange:.40}..."
            )));
        };
        let lookup = tokio::time::timeout(self.config.connect_timeout, async {
            let probe = session.connection.create_channel().await?;
            let options = ExchangeDeclareOptions {
                passive: true,
                ..ExchangeDeclareOptions::default()
            };
            let declared = probe
                .exchange_declare(name, ExchangeKind::Direct, options, FieldTable::default())
                .await;
            if declared.is_ok() {
                close_channel(&probe).await;
            }
            Ok::<Result<(), lapin::Error>, lapin::Error>(declared)
        })
        .await;
        match lookup {
            Ok(Ok(Ok(()))) => Ok(true),
            Ok(Ok(Err(error))) if reply_code(&error) == Some(REPLY_NOT_FOUND) => Ok(false),
            Ok(Ok(Err(error))) | Ok(Err(error)) => Err(PublishFailure::Unavailable(format!(
                "cannot look up rabbitmq exchange {exchange}: {error}"
            ))),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "cannot look up rabbitmq exchange {exchange}: no answer within {} ms",
                self.config.connect_timeout.as_millis()
            ))),
        }
    }

    fn forget_exchange(&self, exchange: &str) {
        self.exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(exchange);
    }

    /// The message of `event`, or its failure.
    fn prepare(&self, event: &OutboundEvent) -> Result<Message, PublishFailure> {
        let cloud_event = CloudEvent::from_outbound(event)?;
        let routing_key_text = self.routing_key(event);
        let exchange = ShortString::try_new(event.topic.as_str()).map_err(|_| {
            PublishFailure::Rejected(format!(
                "rabbitmq exchange name is longer than 255 bytes: {:.40}...",
                event.topic
            ))
        })?;
        let routing_key = ShortString::try_new(routing_key_text).map_err(|_| {
            PublishFailure::Rejected(format!(
                "rabbitmq routing key is longer than 255 bytes: {routing_key_text:.40}..."
            ))
        })?;
        let message_type = ShortString::try_new(event.event_type.as_str()).map_err(|_| {
            PublishFailure::Rejected(format!(
                "event_type is longer than the 255 bytes of the AMQP type property: {:.40}...",
                event.event_type
            ))
        })?;

        let mut headers = FieldTable::default();
        for (name, value) in cloud_event.attributes() {
            let key = format!("{HEADER_PREFIX}{name}");
            match ShortString::try_new(key) {
                Ok(key) => {
                    headers.insert(key, AMQPValue::LongString(LongString::from(value)));
                }
                Err(_) => {
                    tracing::warn!(event_id = %event.event_id, header = name, "header name longer than an AMQP field name allows; header not published");
                }
            }
        }
        for trace_header in ["traceparent", "tracestate"] {
            if let Some(value) = event.headers.get(trace_header) {
                headers.insert(
                    ShortString::from(trace_header),
                    AMQPValue::LongString(LongString::from(value.as_str())),
                );
            }
        }

        let timestamp = u64::try_from(event.created_at.timestamp()).unwrap_or(0);
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from(
                crate::publish::cloudevent::CONTENT_TYPE_JSON,
            ))
            .with_delivery_mode(2)
            .with_message_id(ShortString::from(cloud_event.id()))
            .with_type(message_type)
            .with_timestamp(timestamp)
            .with_headers(headers);
        Ok(Message {
            exchange,
            routing_key,
            properties,
        })
    }

    async fn publish_batch(&self, events: &[OutboundEvent]) -> Vec<Result<(), PublishFailure>> {
        let mut slots: Vec<Slot> = events
            .iter()
            .map(|event| match self.prepare(event) {
                Ok(message) => Slot::Ready(Box::new(message)),
                Err(failure) => Slot::Done(Err(failure)),
            })
            .collect();
        if !slots.iter().any(|slot| matches!(slot, Slot::Ready(_))) {
            return finish(slots);
        }

        let session = match self.session().await {
            Ok(session) => session,
            Err(failure) => return fail_ready(slots, &failure),
        };

        let exchanges: HashSet<&str> = events
            .iter()
            .zip(&slots)
            .filter(|(_, slot)| matches!(slot, Slot::Ready(_)))
            .map(|(event, _)| event.topic.as_str())
            .collect();
        let exchange_failures = self.resolve_exchanges(&session, exchanges).await;
        for (slot, event) in slots.iter_mut().zip(events) {
            if let (Slot::Ready(_), Some(failure)) = (&slot, exchange_failures.get(&event.topic)) {
                *slot = Slot::Done(Err(failure.clone()));
            }
        }
        if !slots.iter().any(|slot| matches!(slot, Slot::Ready(_))) {
            return finish(slots);
        }

        let channel = match self.take_channel(&session).await {
            Ok(channel) => channel,
            Err(failure) => return fail_ready(slots, &failure),
        };

        let (outcomes, channel_state) = self.publish_on(&channel, events, slots).await;
        match channel_state {
            ChannelState::Healthy => self.return_channel(&session, channel),
            ChannelState::Broken => close_channel(&channel).await,
            ChannelState::Stuck => {
                // A connection that took no message or gave no confirm in
                // time (blocked by the broker, or its peer gone silent) may
                // never recover: the next publish opens a new one.
                let blocked = session.connection.status().blocked();
                self.discard_session(
                    &session,
                    if blocked {
                        "the broker blocked the connection and it did not unblock within confirm_timeout"
                    } else {
                        "no message was taken or confirmed within confirm_timeout"
                    },
                );
            }
        }
        outcomes
    }

    /// Drop `session` if it is still the current one, so that the next
    /// publish opens a new connection; it is closed in the background.
    fn discard_session(&self, session: &Arc<Session>, reason: &str) {
        let discarded = {
            let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            match current.as_ref() {
                Some(held) if Arc::ptr_eq(held, session) => current.take(),
                _ => None,
            }
        };
        let Some(discarded) = discarded else {
            return;
        };
        tracing::warn!(url = %self.display_url, reason, "dropping the rabbitmq connection; the next publish opens a new one");
        tokio::spawn(async move {
            let closing = discarded.connection.close(200, ShortString::from("OK"));
            if let Ok(Err(error)) = tokio::time::timeout(CHANNEL_CLOSE_TIMEOUT, closing).await {
                tracing::debug!(%error, "closing a dropped rabbitmq connection failed");
            }
        });
    }

    /// Send every ready message on `channel`, then await every confirm.
    /// Returns the outcomes and whether the channel can be used again.
    async fn publish_on(
        &self,
        channel: &Channel,
        events: &[OutboundEvent],
        slots: Vec<Slot>,
    ) -> (Vec<Result<(), PublishFailure>>, ChannelState) {
        let mut outcomes: Vec<Option<Result<(), PublishFailure>>> =
            Vec::with_capacity(events.len());
        let mut confirms = Vec::new();
        let mut channel_state = ChannelState::Healthy;
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        // One bound for sending and confirming: a send can block too, when
        // the socket stops draining (a dead peer, a blocked connection).
        let deadline = tokio::time::Instant::now() + self.config.confirm_timeout;

        for (index, (slot, event)) in slots.into_iter().zip(events).enumerate() {
            match slot {
                Slot::Done(outcome) => outcomes.push(Some(outcome)),
                Slot::Ready(_) if channel_state != ChannelState::Healthy => {
                    outcomes.push(Some(Err(PublishFailure::Unavailable(
                        "rabbitmq channel closed before the message was sent".to_owned(),
                    ))));
                }
                Slot::Ready(message) => {
                    let sending = channel.basic_publish(
                        message.exchange,
                        message.routing_key,
                        options,
                        event.payload.as_bytes(),
                        message.properties,
                    );
                    match tokio::time::timeout_at(deadline, sending).await {
                        Ok(Ok(confirm)) => {
                            outcomes.push(None);
                            confirms.push((index, confirm));
                        }
                        Ok(Err(error)) => {
                            channel_state = ChannelState::Broken;
                            outcomes.push(Some(Err(self.channel_failure(&error, event))));
                        }
                        Err(_elapsed) => {
                            channel_state = ChannelState::Stuck;
                            outcomes.push(Some(Err(PublishFailure::Unavailable(format!(
                                "rabbitmq did not take the message within {} ms",
                                self.config.confirm_timeout.as_millis()
                            )))));
                        }
                    }
                }
            }
        }

        let mut returned_ids: HashMap<String, (u16, String)> = HashMap::new();
        for (index, confirm) in confirms {
            let event = &events[index];
            let outcome = match tokio::time::timeout_at(deadline, confirm).await {
                Ok(Ok(confirmation)) => {
                    let nacked = confirmation.is_nack();
                    let requested = !matches!(confirmation, Confirmation::NotRequested);
                    if let Some(returned) = confirmation.take_message() {
                        let message_id = returned
                            .delivery
                            .properties
                            .message_id()
                            .as_ref()
                            .map(|id| id.as_str().to_owned())
                            .unwrap_or_default();
                        returned_ids.insert(
                            message_id,
                            (returned.reply_code, returned.reply_text.as_str().to_owned()),
                        );
                    }
                    if nacked {
                        Err(PublishFailure::Rejected(format!(
                            "rabbitmq nacked the message (exchange {}, routing key {})",
                            event.topic,
                            self.routing_key(event)
                        )))
                    } else if requested {
                        Ok(())
                    } else {
                        channel_state = ChannelState::Broken;
                        Err(PublishFailure::Unavailable(
                            "rabbitmq channel is not in confirm mode".to_owned(),
                        ))
                    }
                }
                Ok(Err(error)) => {
                    channel_state = ChannelState::Broken;
                    Err(self.channel_failure(&error, event))
                }
                Err(_elapsed) => {
                    channel_state = ChannelState::Stuck;
                    Err(PublishFailure::Unavailable(format!(
                        "no rabbitmq publisher confirm within {} ms",
                        self.config.confirm_timeout.as_millis()
                    )))
                }
            };
            outcomes[index] = Some(outcome);
        }

        if !returned_ids.is_empty() {
            for (outcome, event) in outcomes.iter_mut().zip(events) {
                if !matches!(outcome, Some(Ok(()))) {
                    continue;
                }
                if let Some((reply_code, reply_text)) =
                    returned_ids.get(&event.event_id.to_string())
                {
                    *outcome = Some(Err(PublishFailure::Rejected(format!(
                        "unroutable: no queue bound to exchange {} for routing key {} ({reply_code} {reply_text})",
                        event.topic,
                        self.routing_key(event)
                    ))));
                }
            }
        }

        let outcomes = outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    Err(PublishFailure::Unavailable(
                        "rabbitmq publish ended without an outcome".to_owned(),
                    ))
                })
            })
            .collect();
        (outcomes, channel_state)
    }

    fn routing_key<'a>(&'a self, event: &'a OutboundEvent) -> &'a str {
        let setting = self
            .config
            .routing_keys
            .get(&event.topic)
            .unwrap_or(&self.config.default_routing_key);
        match setting {
            RoutingKey::EventType => event.event_type.as_str(),
            RoutingKey::Fixed(key) => key.as_str(),
        }
    }

    /// The failure of `event` when its channel failed with `error`: a
    /// rejection when the broker closed the channel because of this event's
    /// exchange or size, otherwise the broker is unavailable.
    fn channel_failure(&self, error: &lapin::Error, event: &OutboundEvent) -> PublishFailure {
        let exchange = event.topic.as_str();
        if let lapin::ErrorKind::ProtocolError(amqp_error) = error.kind() {
            let text = amqp_error.get_message().as_str();
            let names_exchange = text.contains(&format!("exchange '{exchange}'"));
            match amqp_error.get_id() {
                REPLY_NOT_FOUND if names_exchange => {
                    self.forget_exchange(exchange);
                    return missing_exchange_failure(exchange);
                }
                REPLY_ACCESS_REFUSED if names_exchange => {
                    return PublishFailure::Rejected(format!(
                        "rabbitmq refused the publish to exchange {exchange}: {text}"
                    ));
                }
                REPLY_PRECONDITION_FAILED => {
                    if let Some(max_size) = max_message_size(text)
                        && event.payload.len() > max_size
                    {
                        return PublishFailure::Rejected(format!(
                            "message too large for rabbitmq ({} payload bytes, max {max_size}): {text}",
                            event.payload.len()
                        ));
                    }
                }
                _ => {}
            }
        }
        match error.kind() {
            lapin::ErrorKind::ProtocolError(amqp_error) => {
                PublishFailure::Unavailable(format!("rabbitmq closed the channel: {amqp_error}"))
            }
            _ => PublishFailure::Unavailable(format!("rabbitmq: {error}")),
        }
    }
}

impl Publisher for RabbitMqPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(self.publish_batch(events))
    }

    fn is_connected(&self) -> bool {
        self.live_session().is_some()
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(async move {
            let current = self
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if let Some(session) = current {
                self.discard_session(&session, "every publish failed for a long while");
            }
            self.session().await.map(|_| ())
        })
    }

    fn client_rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }
}

fn finish(slots: Vec<Slot>) -> Vec<Result<(), PublishFailure>> {
    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(outcome) => outcome,
            Slot::Ready(_) => Err(PublishFailure::Unavailable(
                "rabbitmq message was not sent".to_owned(),
            )),
        })
        .collect()
}

fn fail_ready(slots: Vec<Slot>, failure: &PublishFailure) -> Vec<Result<(), PublishFailure>> {
    slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Done(outcome) => outcome,
            Slot::Ready(_) => Err(failure.clone()),
        })
        .collect()
}

async fn close_channel(channel: &Channel) {
    if channel.status().connected() {
        let closing = channel.close(200, ShortString::from("OK"));
        if let Ok(Err(error)) = tokio::time::timeout(CHANNEL_CLOSE_TIMEOUT, closing).await {
            tracing::debug!(%error, "closing a rabbitmq channel failed");
        }
    }
}

fn missing_exchange_failure(exchange: &str) -> PublishFailure {
    PublishFailure::Rejected(format!("rabbitmq exchange {exchange} does not exist"))
}

fn reply_code(error: &lapin::Error) -> Option<u16> {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp_error) => Some(amqp_error.get_id()),
        _ => None,
    }
}

/// The limit in RabbitMQ's "message size N is larger than configured max
/// size M" channel error.
fn max_message_size(text: &str) -> Option<usize> {
    let (_, after) = text.split_once("max size ")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `url` with the password of its user info replaced by `***`.
fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((user_info, host)) = authority.rsplit_once('@') else {
        return url.to_owned();
    };
    match user_info.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_the_password() {
        assert_eq!(
            mask_password("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(
            mask_password("amqps://user@host/vh"),
            "amqps://user@host/vh"
        );
        assert_eq!(mask_password("amqp://host:5672"), "amqp://host:5672");
    }

    #[test]
    fn parses_the_max_message_size() {
        assert_eq!(
            max_message_size(
                "PRECONDITION_FAILED - message size 20480 is larger than configured max size 10000"
            ),
            Some(10000)
        );
        assert_eq!(
            max_message_size("PRECONDITION_FAILED - something else"),
            None
        );
    }

    #[test]
    fn rejects_a_bad_url() {
        let error = RabbitMqPublisher::new(RabbitMqPublisherConfig::new("http://nope"))
            .expect_err("bad scheme");
        assert!(error.to_string().contains("http://nope"), "{error}");
    }
}
