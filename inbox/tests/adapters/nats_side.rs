//! The NATS JetStream side of the suite: a stream and a dead-letter stream
//! of each test's own on the real server (`OUTBOX_TEST_NATS_URL`, default
//! `nats://127.0.0.1:4222`), messages published exactly as the relay
//! publishes them (`docs/wire-format.md`), and [`NatsInboxConsumer`] on a
//! durable consumer of the test's own. A side has one stream whatever the
//! "partitions" asked for: JetStream keeps one order per stream.
//!
//! The messages carry no `Nats-Msg-Id`: the stream's duplicate window
//! would drop the copies the scenarios publish to test the inbox's own
//! deduplication.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use outbox::wire;
use outbox_inbox::nats::{
    DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER, NatsConsumerConfig, NatsInboxConsumer,
};
use outbox_inbox::{Handler, Inbox, InboxBackend};
use outbox_testkit::nats::{StoredMessage, TestStream, nats_url, require_nats};
use outbox_testkit::unique_name;

use crate::broker::{BrokerSide, DeadLetter, Message, Running, Settings};

/// How long the server waits for an acknowledgement before it delivers a
/// message again, in the suite: a killed consumer's messages come again
/// after it.
pub const ACK_WAIT: Duration = Duration::from_millis(1_000);

/// A stream, its dead-letter stream and the durable consumer's name.
pub struct NatsSide {
    pub jetstream: jetstream::Context,
    pub stream: String,
    pub subject: String,
    pub durable: String,
    dead_letter_stream: String,
    published: AtomicU64,
    /// The stream sequence of every message published, in order.
    sequences: Mutex<Vec<u64>>,
}

impl NatsSide {
    /// The consumer configuration for `settings`.
    pub fn config(&self, settings: Settings) -> NatsConsumerConfig {
        let mut config =
            NatsConsumerConfig::new(&nats_url(), self.stream.clone(), self.durable.clone());
        config.max_in_flight = usize::from(settings.in_flight);
        config.fetch_size = usize::from(settings.in_flight);
        config.fetch_wait = Duration::from_millis(200);
        config.ack_wait = ACK_WAIT;
        config.max_attempts = settings.max_attempts;
        config.retry_base_delay = settings.retry_base_delay;
        config.retry_max_delay = settings.retry_max_delay;
        config.batch_size = settings.batch_size;
        config.batch_wait = crate::broker::BATCH_WAIT;
        config
    }

    /// Start a consumer with `config` as it is.
    pub fn start_configured<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        config: NatsConsumerConfig,
    ) -> Running {
        let consumer = NatsInboxConsumer::new(inbox, handler, config).expect("nats consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    /// The durable consumer's state on the server, if it exists.
    pub async fn consumer_info(&self) -> Option<jetstream::consumer::Info> {
        let stream = self.jetstream.get_stream(&self.stream).await.ok()?;
        let mut consumer: jetstream::consumer::PullConsumer =
            stream.get_consumer(&self.durable).await.ok()?;
        consumer.info().await.ok().cloned()
    }

    /// Messages delivered and not yet acknowledged (or terminated).
    pub async fn unacknowledged(&self) -> u64 {
        self.consumer_info()
            .await
            .map_or(0, |info| info.num_ack_pending as u64)
    }

    /// The dead-letter stream, read back.
    pub fn dead_letter_stream(&self) -> TestStream {
        TestStream::existing(&self.jetstream, &self.dead_letter_stream)
    }
}

/// `message` as the relay publishes it: `ce-` headers, percent-encoded,
/// `Content-Type`, the payload.
pub fn relay_headers(message: &Message) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let mut attribute = |name: &str, value: &str| {
        headers.insert(
            wire::nats_header_name(name).as_str(),
            wire::percent_encode_header_value(value).as_str(),
        );
    };
    if let Some(id) = &message.id {
        attribute("id", id);
    }
    attribute("type", &message.event_type);
    attribute("source", &message.source);
    attribute("specversion", "1.0");
    attribute("time", "2026-01-01T00:00:00Z");
    attribute("aggregatetype", &message.aggregate_type);
    attribute("eventversion", &message.event_version);
    attribute("partitionkey", &message.key);
    attribute("tenant", "acme");
    headers.insert(wire::NATS_CONTENT_TYPE_HEADER, "application/json");
    headers
}

impl BrokerSide for NatsSide {
    const ADAPTER: &'static str = "nats";
    const ORDERS_BY_KEY: bool = true;
    const COUNTS_ATTEMPTS: bool = false;
    const KEY_IS_ONE_LANE: bool = true;

    async fn create(prefix: &str, _partitions: i32) -> NatsSide {
        let jetstream = require_nats().await;
        let stream = unique_name(prefix);
        let subject = format!("{stream}.events");
        let dead_letter_stream = format!("{stream}-dlq");
        TestStream::create(&jetstream, &stream, std::slice::from_ref(&subject)).await;
        TestStream::create(
            &jetstream,
            &dead_letter_stream,
            &[format!(
                "{subject}{}",
                outbox_inbox::nats::DEAD_LETTER_SUFFIX
            )],
        )
        .await;
        NatsSide {
            jetstream,
            stream,
            subject,
            durable: unique_name("durable"),
            dead_letter_stream,
            published: AtomicU64::new(0),
            sequences: Mutex::new(Vec::new()),
        }
    }

    async fn publish(&self, messages: &[Message]) {
        for message in messages {
            let ack = self
                .jetstream
                .publish_with_headers(
                    self.subject.clone(),
                    relay_headers(message),
                    message.body.clone().into(),
                )
                .await
                .expect("publish")
                .await
                .expect("publish acknowledged");
            self.published.fetch_add(1, Ordering::SeqCst);
            self.sequences.lock().expect("sequences").push(ack.sequence);
        }
    }

    fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    fn start<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        settings: Settings,
    ) -> Running {
        self.start_configured(inbox, handler, self.config(settings))
    }

    /// Messages the durable consumer delivered and that are no longer
    /// pending (acknowledged or terminated).
    async fn acknowledged(&self) -> u64 {
        match self.consumer_info().await {
            Some(info) => info
                .delivered
                .stream_sequence
                .saturating_sub(info.num_ack_pending as u64),
            None => 0,
        }
    }

    async fn dead_letter_count(&self) -> u64 {
        self.dead_letter_stream().message_count().await
    }

    async fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        let mut dead_letters: Vec<DeadLetter> = self
            .dead_letter_stream()
            .messages(count, Duration::from_secs(10))
            .await
            .iter()
            .map(dead_letter)
            .collect();
        assert!(
            dead_letters.len() >= count,
            "only {} of {count} dead letters",
            dead_letters.len()
        );
        dead_letters.truncate(count);
        dead_letters
    }

    fn origin_of(&self, index: u64) -> String {
        let sequence =
            self.sequences.lock().expect("sequences")[usize::try_from(index).expect("an index")];
        format!("{}/{sequence}", self.stream)
    }
}

/// The value of header `name`, percent-decoded.
pub fn header(message: &StoredMessage, name: &str) -> Option<String> {
    message
        .headers
        .iter()
        .find(|(header, _)| header.eq_ignore_ascii_case(name))
        .map(|(_, value)| wire::percent_decode_header_value(value).unwrap_or_else(|| value.clone()))
}

/// A dead letter in the suite's terms.
pub fn dead_letter(message: &StoredMessage) -> DeadLetter {
    let required = |name: &str| {
        header(message, name).unwrap_or_else(|| panic!("no {name} header: {message:?}"))
    };
    DeadLetter {
        reason: required(DEAD_LETTER_REASON_HEADER),
        origin: required(DEAD_LETTER_SOURCE_HEADER),
        attempts: None,
        key: header(message, "ce-partitionkey"),
        source: header(message, "ce-source"),
        body: message.payload.clone(),
    }
}

/// Delete the streams (and with them the durable consumer), also when the
/// test failed.
impl Drop for NatsSide {
    fn drop(&mut self) {
        let streams = [self.stream.clone(), self.dead_letter_stream.clone()];
        let deleting = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let client = async_nats::connect(nats_url()).await?;
                let jetstream = jetstream::new(client);
                for stream in streams {
                    jetstream.delete_stream(&stream).await?;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        });
        if let Ok(Err(error)) = deleting.join() {
            eprintln!("cannot delete the test's streams: {error}");
        }
    }
}
