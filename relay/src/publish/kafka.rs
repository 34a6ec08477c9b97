//! [`KafkaPublisher`]: publishes outbox events to Kafka as CloudEvents in
//! binary content mode (CONTRACT §3).
//!
//! One record per event: topic = `topic`, key = `aggregate_id`, value = the
//! payload's JSON bytes, headers `ce_specversion`, `ce_id`, `ce_source`,
//! `ce_type`, `ce_time`, `content-type: application/json` and `ce_<name>`
//! for every extension attribute (see [`crate::publish::cloudevent`]). When
//! the `headers` column carries W3C trace context (`traceparent`,
//! `tracestate`), it is also sent as plain `traceparent` / `tracestate`
//! headers, where Kafka tracing instrumentations look for it.
//!
//! The producer is idempotent with `acks=all`, so librdkafka's own retries
//! neither duplicate nor reorder the records of one partition, and records
//! with one key (one aggregate) land on one partition in send order.
//!
//! A producer whose state is broken is replaced by a fresh one: after a
//! librdkafka fatal error, and after the broker answers that the producer's
//! id, epoch or sequence is no longer valid (fenced, out of sequence,
//! unknown producer id). librdkafka never leaves those states by itself;
//! the events of the failed records are reported unavailable and go out
//! again through the new producer, under their own ids.
//!
//! A topic is checked for existence (one metadata request, cached) before
//! the first record is sent to it. librdkafka would otherwise hold records
//! for a missing topic until `message.timeout.ms` runs out and report a
//! timeout, which says nothing about the cause; instead such events fail at
//! once with [`PublishFailure::Rejected`] naming the topic, or the topic is
//! created first when [`KafkaPublisherConfig::create_missing_topics`] is on.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::statistics::Statistics;

use crate::OutboundEvent;
use crate::publish::cloudevent::CloudEvent;
use crate::publish::{PublishFailure, Publisher};

/// Extra time, past `message.timeout.ms`, before the publisher stops waiting
/// for a delivery report librdkafka should have produced by then.
const DELIVERY_GRACE: Duration = Duration::from_secs(5);

/// How long to wait before retrying when librdkafka's queue is full and none
/// of this batch's records are in flight to wait for.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(10);

/// Settings of a [`KafkaPublisher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaPublisherConfig {
    /// Bootstrap brokers, `host:port` each.
    pub brokers: Vec<String>,
    /// How long librdkafka may try to deliver one record
    /// (`message.timeout.ms`); a record not acknowledged by then is
    /// [`PublishFailure::Unavailable`]. Default 30 s.
    pub message_timeout: Duration,
    /// Bound of one topic lookup or topic creation. Default 10 s.
    pub metadata_timeout: Duration,
    /// Create a topic that does not exist before sending to it, instead of
    /// rejecting its events. Default off.
    pub create_missing_topics: bool,
    /// Partitions of a topic created by `create_missing_topics`. Default 1.
    pub new_topic_partitions: i32,
    /// Replication factor of a topic created by `create_missing_topics`.
    /// Default 1.
    pub new_topic_replication_factor: i32,
    /// librdkafka client options (`security.protocol`, `sasl.*`,
    /// `compression.type`, `message.max.bytes`, ...), applied after the
    /// publisher's own settings, so they can override them.
    pub client_options: BTreeMap<String, String>,
}

impl KafkaPublisherConfig {
    /// The default settings for `brokers`.
    pub fn new(brokers: Vec<String>) -> Self {
        Self {
            brokers,
            message_timeout: Duration::from_secs(30),
            metadata_timeout: Duration::from_secs(10),
            create_missing_topics: false,
            new_topic_partitions: 1,
            new_topic_replication_factor: 1,
            client_options: BTreeMap::new(),
        }
    }

    /// The librdkafka configuration of the producer.
    fn producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", "outbox-relay")
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // A batch is handed over whole and then awaited: lingering
            // longer only delays its last request.
            .set("linger.ms", "1")
            .set("message.timeout.ms", duration_millis(self.message_timeout))
            // The partitioner of the Java client: a key lands on the same
            // partition as when a JVM producer (Debezium, Kafka Connect) sends it.
            .set("partitioner", "murmur2_random")
            // Off, so that the topic lookup before the first send does not
            // create the topic as a side effect: brokers that auto-create
            // (tansu does, on a Metadata request that allows it) would
            // otherwise ignore `create_missing_topics` and its partition
            // count. A client option can turn it back on.
            .set("allow.auto.create.topics", "false")
            // Broker states for `is_connected`, see `RelayContext::stats`.
            .set("statistics.interval.ms", "10000");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        config
    }

    /// The librdkafka configuration of the admin client that creates topics:
    /// the connection settings, without the producer's own ones.
    fn admin_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers.join(","))
            .set("client.id", "outbox-relay-admin");
        for (key, value) in &self.client_options {
            config.set(key, value);
        }
        config
    }

    fn validate(&self) -> Result<(), crate::Error> {
        if self.brokers.is_empty() || self.brokers.iter().any(|broker| broker.trim().is_empty()) {
            return Err(crate::Error::InvalidBrokerUrl {
                url: self.brokers.join(","),
                reason: "no Kafka broker given (expected host:port[,host:port...])".to_owned(),
            });
        }
        if self.message_timeout.is_zero() {
            return Err(config_error("message_timeout", "must be more than zero"));
        }
        if self.metadata_timeout.is_zero() {
            return Err(config_error("metadata_timeout", "must be more than zero"));
        }
        if self.new_topic_partitions < 1 {
            return Err(config_error("new_topic_partitions", "must be at least 1"));
        }
        if self.new_topic_replication_factor < 1 {
            return Err(config_error(
                "new_topic_replication_factor",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

fn config_error(field: &str, reason: &str) -> crate::Error {
    crate::Error::Config {
        path: "--config".to_owned(),
        reason: format!("kafka.{field} {reason}"),
    }
}

fn duration_millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

/// The librdkafka client context: forwards librdkafka's logs and errors to
/// `tracing` and keeps the connection state for
/// [`Publisher::is_connected`].
struct RelayContext {
    connected: Arc<AtomicBool>,
}

impl ClientContext for RelayContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(facility, message, "librdkafka"),
            RDKafkaLogLevel::Warning => tracing::warn!(facility, message, "librdkafka"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(facility, message, "librdkafka")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(facility, message, "librdkafka"),
        }
    }

    fn stats(&self, statistics: Statistics) {
        // Only ever raises the flag: a broker may close an idle connection
        // without anything being wrong. Losing every broker is reported
        // through `error` (AllBrokersDown).
        if statistics
            .brokers
            .values()
            .any(|broker| broker.state == "UP")
        {
            self.connected.store(true, Ordering::Relaxed);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.connected.store(false, Ordering::Relaxed);
        }
        tracing::warn!(%error, reason, "kafka client error");
    }
}

type RelayProducer = FutureProducer<RelayContext>;

/// Publishes outbox events to Kafka (see the module documentation).
pub struct KafkaPublisher {
    config: KafkaPublisherConfig,
    producer_config: ClientConfig,
    /// Replaced when librdkafka reports a fatal error: an idempotent
    /// producer cannot be used after one.
    producer: RwLock<RelayProducer>,
    admin: Mutex<Option<Arc<AdminClient<DefaultClientContext>>>>,
    /// Topics found to exist. A missing topic is not remembered: the next
    /// publish that names it looks it up again, so an event retried after
    /// the topic was created is not rejected from memory.
    topics: Mutex<HashSet<String>>,
    connected: Arc<AtomicBool>,
    /// How long a batch waits for its delivery reports: librdkafka's
    /// effective `message.timeout.ms` plus a grace period.
    delivery_wait: Duration,
    /// Set when the broker said the producer's state is broken; the
    /// producer is replaced once the batch in hand is done.
    broken: AtomicBool,
    /// Producers replaced because their state was broken.
    rebuilds: AtomicU64,
}

impl std::fmt::Debug for KafkaPublisher {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KafkaPublisher")
            .field("brokers", &self.config.brokers)
            .field("connected", &self.connected.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl KafkaPublisher {
    /// Create the producer. Does not contact the brokers (see
    /// [`KafkaPublisher::check_connection`]), but fails at once on a setting
    /// librdkafka does not accept, such as an unknown client option.
    pub fn new(config: KafkaPublisherConfig) -> Result<Self, crate::Error> {
        config.validate()?;
        let producer_config = config.producer_config();
        let connected = Arc::new(AtomicBool::new(false));
        let producer = create_producer(&producer_config, &connected)?;
        // A client option may have replaced `message_timeout`; 0 means no
        // timeout to librdkafka, and the publisher then waits as configured.
        let message_timeout = ["message.timeout.ms", "delivery.timeout.ms"]
            .iter()
            .find_map(|key| config.client_options.get(*key))
            .and_then(|millis| millis.parse::<u64>().ok())
            .filter(|millis| *millis > 0)
            .map_or(config.message_timeout, Duration::from_millis);
        Ok(Self {
            config,
            producer_config,
            producer: RwLock::new(producer),
            admin: Mutex::new(None),
            topics: Mutex::new(HashSet::new()),
            connected,
            delivery_wait: message_timeout + DELIVERY_GRACE,
            broken: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
        })
    }

    /// Put the current producer into librdkafka's fatal error state, as a
    /// fenced or out-of-sequence idempotent producer would be, through
    /// librdkafka's own test hook (`rd_kafka_test_fatal_error`). Meant for
    /// fault-injection tests of the recovery path: the next publish fails
    /// as unavailable and replaces the producer.
    ///
    /// # Errors
    /// [`crate::Error::Config`] when `reason` contains a NUL byte, and
    /// [`crate::Error::Kafka`] when the producer is already in a fatal
    /// error state.
    pub fn inject_fatal_error(&self, reason: &str) -> Result<(), crate::Error> {
        let reason = CString::new(reason).map_err(|_| crate::Error::Config {
            path: "inject_fatal_error".to_owned(),
            reason: "the reason contains a NUL byte".to_owned(),
        })?;
        let producer = self.producer();
        // SAFETY: the client pointer is valid while `producer` is held, and
        // librdkafka copies `reason` before returning.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                producer.client().native_ptr(),
                rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            )
        };
        match RDKafkaErrorCode::from(code) {
            RDKafkaErrorCode::NoError => Ok(()),
            other => Err(crate::Error::Kafka(KafkaError::MessageProduction(other))),
        }
    }

    /// The settings this publisher was created with.
    pub fn config(&self) -> &KafkaPublisherConfig {
        &self.config
    }

    /// Fetch the cluster metadata once: succeeds when a broker answers
    /// within `metadata_timeout`, and updates [`Publisher::is_connected`].
    pub async fn check_connection(&self) -> Result<(), crate::Error> {
        let producer = self.producer();
        let timeout = self.config.metadata_timeout;
        let result =
            tokio::task::spawn_blocking(move || producer.client().fetch_metadata(None, timeout))
                .await
                .map_err(|error| crate::Error::Io(std::io::Error::other(error)))?;
        match result {
            Ok(_) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                self.connected.store(false, Ordering::Relaxed);
                Err(crate::Error::Kafka(error))
            }
        }
    }

    fn producer(&self) -> RelayProducer {
        self.producer
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replace the producer by a fresh one (new producer id, empty
    /// queues). The old one is dropped off the async threads: dropping
    /// purges its queues and may wait for librdkafka's threads.
    fn recreate_producer(&self, reason: &str) -> Result<(), crate::Error> {
        match create_producer(&self.producer_config, &self.connected) {
            Ok(producer) => {
                let old = std::mem::replace(
                    &mut *self
                        .producer
                        .write()
                        .unwrap_or_else(PoisonError::into_inner),
                    producer,
                );
                self.broken.store(false, Ordering::Relaxed);
                self.rebuilds.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(reason, "replaced the kafka producer with a new one");
                drop(tokio::task::spawn_blocking(move || drop(old)));
                Ok(())
            }
            Err(error) => {
                tracing::error!(reason, %error, "creating a new kafka producer failed");
                Err(error)
            }
        }
    }

    /// After a batch: replace the producer when librdkafka reports a fatal
    /// error or the broker said its state is broken.
    fn replace_broken_producer(&self, producer: &RelayProducer) {
        let reason = match producer.client().fatal_error() {
            Some((code, reason)) => Some(format!("fatal error {code}: {reason}")),
            None if self.broken.load(Ordering::Relaxed) => {
                Some("the broker no longer accepts its producer id or sequence".to_owned())
            }
            None => None,
        };
        if let Some(reason) = reason {
            // A failure is logged; the next batch tries again.
            let _ = self.recreate_producer(&reason);
        }
    }

    fn admin(&self) -> Result<Arc<AdminClient<DefaultClientContext>>, KafkaError> {
        let mut admin = self.admin.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = admin.as_ref() {
            return Ok(Arc::clone(client));
        }
        let client: Arc<AdminClient<DefaultClientContext>> =
            Arc::new(self.config.admin_config().create()?);
        *admin = Some(Arc::clone(&client));
        Ok(client)
    }

    /// Look up (or create) every topic of `topics` not known to exist yet.
    /// Returns the failure of each topic that cannot be sent to.
    async fn resolve_topics(&self, topics: HashSet<&str>) -> HashMap<String, PublishFailure> {
        let mut failures = HashMap::new();
        let unknown: Vec<&str> = {
            let known = self.topics.lock().unwrap_or_else(PoisonError::into_inner);
            topics
                .into_iter()
                .filter(|topic| !known.contains(*topic))
                .collect()
        };
        let lookups = unknown.iter().map(|topic| self.resolve_topic(topic));
        for (topic, outcome) in unknown.iter().zip(join_all(lookups).await) {
            if let Err(failure) = outcome {
                failures.insert((*topic).to_owned(), failure);
            }
        }
        failures
    }

    async fn resolve_topic(&self, topic: &str) -> Result<(), PublishFailure> {
        let exists = self.topic_exists(topic).await?;
        if exists {
            self.remember_topic(topic);
            return Ok(());
        }
        if !self.config.create_missing_topics {
            tracing::warn!(topic, "kafka topic does not exist; its events are rejected");
            return Err(missing_topic_failure(topic));
        }
        self.create_topic(topic).await?;
        self.remember_topic(topic);
        Ok(())
    }

    fn remember_topic(&self, topic: &str) {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(topic.to_owned());
    }

    fn forget_topic(&self, topic: &str) {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(topic);
    }

    /// One metadata request for `topic`.
    async fn topic_exists(&self, topic: &str) -> Result<bool, PublishFailure> {
        let producer = self.producer();
        let timeout = self.config.metadata_timeout;
        let topic_name = topic.to_owned();
        let metadata = tokio::task::spawn_blocking(move || {
            producer.client().fetch_metadata(Some(&topic_name), timeout)
        })
        .await
        .map_err(|error| {
            PublishFailure::Unavailable(format!(
                "kafka metadata lookup of topic {topic} failed: {error}"
            ))
        })?
        .map_err(|error| {
            self.connected.store(false, Ordering::Relaxed);
            PublishFailure::Unavailable(format!(
                "kafka metadata lookup of topic {topic} failed: {error}"
            ))
        })?;
        self.connected.store(true, Ordering::Relaxed);
        let Some(entry) = metadata.topics().iter().find(|entry| entry.name() == topic) else {
            return Ok(false);
        };
        match entry.error().map(RDKafkaErrorCode::from) {
            None => Ok(!entry.partitions().is_empty()),
            Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
                Ok(false)
            }
            // Exists but has no leader yet (just created, or electing one):
            // librdkafka holds the records until it has one.
            Some(RDKafkaErrorCode::LeaderNotAvailable) => Ok(true),
            Some(RDKafkaErrorCode::TopicAuthorizationFailed) => Err(PublishFailure::Rejected(
                format!("not authorized to write to kafka topic {topic}"),
            )),
            Some(RDKafkaErrorCode::InvalidTopic) => Err(PublishFailure::Rejected(format!(
                "invalid kafka topic name {topic:?}"
            ))),
            Some(code) => Err(PublishFailure::Unavailable(format!(
                "kafka metadata lookup of topic {topic} failed: {code}"
            ))),
        }
    }

    async fn create_topic(&self, topic: &str) -> Result<(), PublishFailure> {
        let admin = self.admin().map_err(|error| {
            PublishFailure::Unavailable(format!(
                "cannot create a kafka admin client to create topic {topic}: {error}"
            ))
        })?;
        let new_topic = NewTopic::new(
            topic,
            self.config.new_topic_partitions,
            TopicReplication::Fixed(self.config.new_topic_replication_factor),
        );
        let options = AdminOptions::new()
            .request_timeout(Some(self.config.metadata_timeout))
            .operation_timeout(Some(self.config.metadata_timeout));
        let results = admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(|error| {
                PublishFailure::Unavailable(format!("cannot create kafka topic {topic}: {error}"))
            })?;
        for result in results {
            match result {
                Ok(_) => {
                    tracing::info!(
                        topic,
                        partitions = self.config.new_topic_partitions,
                        replication_factor = self.config.new_topic_replication_factor,
                        "created kafka topic"
                    );
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    let message = format!("cannot create kafka topic {topic}: {code}");
                    return Err(match code {
                        RDKafkaErrorCode::InvalidTopic
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::PolicyViolation => PublishFailure::Rejected(message),
                        _ => PublishFailure::Unavailable(message),
                    });
                }
            }
        }
        Ok(())
    }

    async fn publish_batch(&self, events: &[OutboundEvent]) -> Vec<Result<(), PublishFailure>> {
        let mut outcomes: Vec<Option<Result<(), PublishFailure>>> = vec![None; events.len()];

        let mut cloud_events: Vec<Option<CloudEvent>> = Vec::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            if let Err(reason) = check_topic_name(&event.topic) {
                outcomes[index] = Some(Err(PublishFailure::Rejected(reason)));
                cloud_events.push(None);
                continue;
            }
            match CloudEvent::from_outbound(event) {
                Ok(cloud_event) => cloud_events.push(Some(cloud_event)),
                Err(failure) => {
                    outcomes[index] = Some(Err(failure));
                    cloud_events.push(None);
                }
            }
        }

        let topics: HashSet<&str> = events
            .iter()
            .zip(&cloud_events)
            .filter(|(_, cloud_event)| cloud_event.is_some())
            .map(|(event, _)| event.topic.as_str())
            .collect();
        let topic_failures = self.resolve_topics(topics).await;

        let producer = self.producer();
        let deadline = tokio::time::Instant::now() + self.delivery_wait;
        let mut in_flight: VecDeque<(usize, DeliveryFuture)> =
            VecDeque::with_capacity(events.len());

        for (index, (event, cloud_event)) in events.iter().zip(&cloud_events).enumerate() {
            let Some(cloud_event) = cloud_event else {
                continue;
            };
            if let Some(failure) = topic_failures.get(&event.topic) {
                outcomes[index] = Some(Err(failure.clone()));
                continue;
            }
            let mut record = FutureRecord::to(&event.topic)
                .key(event.aggregate_id.as_str())
                .payload(event.payload.as_str())
                .headers(kafka_headers(cloud_event, event));
            loop {
                match producer.send_result(record) {
                    Ok(delivery) => {
                        in_flight.push_back((index, delivery));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                        record = returned;
                        if tokio::time::Instant::now() >= deadline {
                            outcomes[index] = Some(Err(PublishFailure::Unavailable(
                                "kafka producer queue stayed full until the delivery deadline"
                                    .to_owned(),
                            )));
                            break;
                        }
                        // Make room by waiting for this batch's oldest record.
                        if let Some((earlier, delivery)) = in_flight.pop_front() {
                            outcomes[earlier] = Some(
                                self.await_delivery(delivery, deadline, &events[earlier])
                                    .await,
                            );
                        } else {
                            tokio::time::sleep(QUEUE_FULL_PAUSE).await;
                        }
                    }
                    Err((error, _)) => {
                        outcomes[index] = Some(Err(self.classify(&error, event)));
                        break;
                    }
                }
            }
        }

        while let Some((index, delivery)) = in_flight.pop_front() {
            outcomes[index] = Some(
                self.await_delivery(delivery, deadline, &events[index])
                    .await,
            );
        }

        self.replace_broken_producer(&producer);

        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    Err(PublishFailure::Unavailable(
                        "kafka publish ended without an outcome".to_owned(),
                    ))
                })
            })
            .collect()
    }

    async fn await_delivery(
        &self,
        delivery: DeliveryFuture,
        deadline: tokio::time::Instant,
        event: &OutboundEvent,
    ) -> Result<(), PublishFailure> {
        match tokio::time::timeout_at(deadline, delivery).await {
            Ok(Ok(Ok(_))) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok(())
            }
            Ok(Ok(Err((error, _message)))) => Err(self.classify(&error, event)),
            Ok(Err(_canceled)) => Err(PublishFailure::Unavailable(
                "kafka producer was shut down before the delivery report".to_owned(),
            )),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "no kafka delivery report within {} ms",
                self.delivery_wait.as_millis()
            ))),
        }
    }

    /// Turn a send or delivery error into the event's failure, and keep the
    /// publisher's state in step with it.
    fn classify(&self, error: &KafkaError, event: &OutboundEvent) -> PublishFailure {
        let topic = event.topic.as_str();
        let Some(code) = error.rdkafka_error_code() else {
            return PublishFailure::Unavailable(format!("kafka: {error}"));
        };
        match code {
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownTopicId => {
                self.forget_topic(topic);
                missing_topic_failure(topic)
            }
            RDKafkaErrorCode::MessageSizeTooLarge
            | RDKafkaErrorCode::InvalidMessageSize
            | RDKafkaErrorCode::MessageBatchTooLarge => PublishFailure::Rejected(format!(
                "kafka message too large for topic {topic} ({} payload bytes): {code}",
                event.payload.len()
            )),
            RDKafkaErrorCode::TopicAuthorizationFailed => {
                PublishFailure::Rejected(format!("not authorized to write to kafka topic {topic}"))
            }
            RDKafkaErrorCode::UnknownPartition
            | RDKafkaErrorCode::InvalidTopic
            | RDKafkaErrorCode::InvalidRecord
            | RDKafkaErrorCode::InvalidMessage
            | RDKafkaErrorCode::InvalidTimestamp
            | RDKafkaErrorCode::PolicyViolation
            | RDKafkaErrorCode::BadMessage => PublishFailure::Rejected(format!(
                "kafka rejected the message for topic {topic}: {code}"
            )),
            RDKafkaErrorCode::MessageTimedOut => {
                // librdkafka also times out records of a topic deleted since
                // it was looked up: look it up again before the next send.
                self.forget_topic(topic);
                self.connected.store(false, Ordering::Relaxed);
                PublishFailure::Unavailable(format!("kafka topic {topic}: {code}"))
            }
            RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure => {
                self.connected.store(false, Ordering::Relaxed);
                PublishFailure::Unavailable(format!("kafka topic {topic}: {code}"))
            }
            RDKafkaErrorCode::Fatal => {
                let detail = self
                    .producer()
                    .client()
                    .fatal_error()
                    .map(|(fatal_code, reason)| format!("{fatal_code}: {reason}"))
                    .unwrap_or_else(|| code.to_string());
                self.broken.store(true, Ordering::Relaxed);
                PublishFailure::Unavailable(format!(
                    "kafka producer fatal error {detail}; replacing the producer"
                ))
            }
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::OutOfOrderSequenceNumber
            | RDKafkaErrorCode::UnknownProducerId
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::InvalidTransactionalState => {
                self.broken.store(true, Ordering::Relaxed);
                PublishFailure::Unavailable(format!(
                    "kafka topic {topic}: {code}; the producer's state is broken, \
                     replacing the producer"
                ))
            }
            _ => PublishFailure::Unavailable(format!("kafka topic {topic}: {code}")),
        }
    }
}

fn create_producer(
    config: &ClientConfig,
    connected: &Arc<AtomicBool>,
) -> Result<RelayProducer, crate::Error> {
    let context = RelayContext {
        connected: Arc::clone(connected),
    };
    Ok(config.create_with_context(context)?)
}

fn missing_topic_failure(topic: &str) -> PublishFailure {
    PublishFailure::Rejected(format!("kafka topic {topic} does not exist"))
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
fn check_topic_name(topic: &str) -> Result<(), String> {
    let valid = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "invalid kafka topic name {topic:?} (1 to 249 of a-z, A-Z, 0-9, '.', '_', '-')"
        ))
    }
}

/// The headers of the binary content mode of the CloudEvents Kafka binding.
fn kafka_headers(cloud_event: &CloudEvent, event: &OutboundEvent) -> OwnedHeaders {
    let attributes = cloud_event.attributes();
    let mut headers = OwnedHeaders::new_with_capacity(attributes.len() + 2);
    for (name, value) in &attributes {
        if *name == "datacontenttype" {
            headers = headers.insert(Header {
                key: "content-type",
                value: Some(value.as_str()),
            });
        } else {
            let key = format!("ce_{name}");
            headers = headers.insert(Header {
                key: key.as_str(),
                value: Some(value.as_str()),
            });
        }
    }
    for trace_header in ["traceparent", "tracestate"] {
        if let Some(value) = event.headers.get(trace_header) {
            headers = headers.insert(Header {
                key: trace_header,
                value: Some(value.as_str()),
            });
        }
    }
    headers
}

impl Publisher for KafkaPublisher {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(self.publish_batch(events))
    }

    fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    fn recover(&self) -> BoxFuture<'_, Result<(), PublishFailure>> {
        Box::pin(async move {
            self.recreate_producer("every publish failed for a long while")
                .map_err(|error| {
                    PublishFailure::Unavailable(format!("cannot create a kafka producer: {error}"))
                })?;
            self.check_connection().await.map_err(|error| {
                PublishFailure::Unavailable(format!("kafka brokers do not answer: {error}"))
            })
        })
    }

    fn client_rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_carries_the_ce_outboxreplay_header() {
        use rdkafka::message::Headers;

        let mut event = OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "42".to_owned(),
            topic: "orders".to_owned(),
            payload: "{}".to_owned(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        };
        let replay_header = |event: &OutboundEvent| {
            let cloud_event = CloudEvent::from_outbound(event).expect("valid event");
            kafka_headers(&cloud_event, event)
                .iter()
                .find(|header| header.key == "ce_outboxreplay")
                .and_then(|header| header.value.map(<[u8]>::to_vec))
        };
        assert_eq!(replay_header(&event), None);
        event.replay = true;
        assert_eq!(replay_header(&event), Some(b"true".to_vec()));
    }

    #[tokio::test]
    async fn a_fenced_or_out_of_sequence_producer_is_replaced_after_the_batch() {
        let publisher =
            KafkaPublisher::new(KafkaPublisherConfig::new(vec!["127.0.0.1:9092".to_owned()]))
                .expect("publisher");
        let event = OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "42".to_owned(),
            topic: "orders".to_owned(),
            payload: "{}".to_owned(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        };
        for code in [
            RDKafkaErrorCode::ProducerFenced,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
            RDKafkaErrorCode::UnknownProducerId,
            RDKafkaErrorCode::InvalidProducerEpoch,
        ] {
            let before = publisher.client_rebuilds();
            let failure = publisher.classify(&KafkaError::MessageProduction(code), &event);
            match failure {
                PublishFailure::Unavailable(message) => {
                    assert!(message.contains(&format!("{code:?}")), "{message}")
                }
                other => panic!("{code:?} must be unavailable, not {other:?}"),
            }
            publisher.replace_broken_producer(&publisher.producer());
            assert_eq!(publisher.client_rebuilds(), before + 1, "{code:?}");
        }
        // A plain timeout leaves the producer alone.
        let _ = publisher.classify(
            &KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
            &event,
        );
        publisher.replace_broken_producer(&publisher.producer());
        assert_eq!(publisher.client_rebuilds(), 4);
    }

    #[test]
    fn topic_names() {
        assert!(check_topic_name("orders").is_ok());
        assert!(check_topic_name("orders.v1_x-y").is_ok());
        assert!(check_topic_name("").is_err());
        assert!(check_topic_name(".").is_err());
        assert!(check_topic_name("with space").is_err());
        assert!(check_topic_name(&"a".repeat(250)).is_err());
    }

    #[test]
    fn unknown_client_option_fails_creation() {
        let mut config = KafkaPublisherConfig::new(vec!["127.0.0.1:9092".to_owned()]);
        config
            .client_options
            .insert("no.such.option".to_owned(), "1".to_owned());
        let error = KafkaPublisher::new(config).expect_err("unknown option must fail");
        assert!(error.to_string().contains("no.such.option"), "{error}");
    }

    #[test]
    fn empty_broker_list_fails_creation() {
        let error = KafkaPublisher::new(KafkaPublisherConfig::new(Vec::new()))
            .expect_err("no brokers must fail");
        assert!(error.to_string().contains("no Kafka broker"), "{error}");
    }
}
