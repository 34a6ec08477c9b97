//! The Redis Streams side of the suite: streams and a consumer group of
//! each test's own on the real Redis (`OUTBOX_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379`), entries added exactly as the relay writes
//! them (`outbox_testkit::redis::RelayEntry`, `docs/wire-format.md`), and
//! [`RedisInboxConsumer`]. A side with several "partitions" has as many
//! streams, all read by the one group: an entry goes to the stream its
//! message names, else to the stream its key hashes to.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outbox_inbox::redis::{
    DEAD_LETTER_REASON_FIELD, DEAD_LETTER_SOURCE_FIELD, DEAD_LETTER_SUFFIX, RedisConsumerConfig,
    RedisInboxConsumer,
};
use outbox_inbox::{Handler, Inbox, InboxBackend};
use outbox_testkit::redis::{
    RelayEntry, add_entries, read_stream, redis_url, require_redis, stream_length,
};
use outbox_testkit::unique_name;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamInfoGroupsReply;

use crate::broker::{BrokerSide, DeadLetter, Message, Running, Settings};

/// How long an entry of a consumer that is gone stays pending before
/// another consumer of the suite takes it over.
pub const CLAIM_IDLE: Duration = Duration::from_millis(500);

/// Streams of the test's own and the consumer group that reads them.
pub struct RedisSide {
    connection: MultiplexedConnection,
    pub streams: Vec<String>,
    pub group: String,
    published: AtomicU64,
    /// `stream/entry id` of every entry added, in order.
    origins: Mutex<Vec<String>>,
}

impl RedisSide {
    /// The dead-letter stream of `stream`.
    pub fn dead_letter_stream(stream: &str) -> String {
        format!("{stream}{DEAD_LETTER_SUFFIX}")
    }

    /// A connection of the test's own to the test server.
    pub fn connection(&self) -> MultiplexedConnection {
        self.connection.clone()
    }

    /// The consumer configuration for `settings`.
    pub fn config(&self, settings: Settings) -> RedisConsumerConfig {
        let mut config =
            RedisConsumerConfig::new(redis_url(), self.group.clone(), self.streams.clone());
        config.max_in_flight = usize::from(settings.in_flight);
        config.read_count = usize::from(settings.in_flight);
        config.max_attempts = settings.max_attempts;
        config.retry_base_delay = settings.retry_base_delay;
        config.retry_max_delay = settings.retry_max_delay;
        config.batch_size = settings.batch_size;
        config.batch_wait = crate::broker::BATCH_WAIT;
        config.block = Duration::from_millis(200);
        config.claim_idle = CLAIM_IDLE;
        config
    }

    /// Start a consumer with `config` as it is.
    pub fn start_configured<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        config: RedisConsumerConfig,
    ) -> Running {
        let consumer = RedisInboxConsumer::new(inbox, handler, config).expect("redis consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    /// Add `entries` to the side's first stream as the relay writes them;
    /// their ids.
    pub async fn add(&self, entries: &[RelayEntry]) -> Vec<String> {
        let stream = self.streams[0].clone();
        let ids = add_entries(&mut self.connection(), &stream, entries).await;
        self.published
            .fetch_add(entries.len() as u64, Ordering::SeqCst);
        self.origins
            .lock()
            .expect("origins")
            .extend(ids.iter().map(|id| format!("{stream}/{id}")));
        ids
    }

    /// Entries pending in the group, on any consumer.
    pub async fn pending(&self) -> u64 {
        self.groups().await.iter().map(|(_, pending)| pending).sum()
    }

    /// Per stream: entries the group read, and entries pending.
    async fn groups(&self) -> Vec<(u64, u64)> {
        let mut connection = self.connection();
        let mut groups = Vec::with_capacity(self.streams.len());
        for stream in &self.streams {
            let exists: bool = connection.exists(stream).await.expect("EXISTS");
            if !exists {
                groups.push((0, 0));
                continue;
            }
            let reply: StreamInfoGroupsReply = connection
                .xinfo_groups(stream)
                .await
                .unwrap_or_else(|error| panic!("XINFO GROUPS {stream}: {error}"));
            let (read, pending) = reply
                .groups
                .iter()
                .find(|group| group.name == self.group)
                .map_or((0, 0), |group| {
                    (group.entries_read.unwrap_or(0) as u64, group.pending as u64)
                });
            groups.push((read, pending));
        }
        groups
    }
}

/// `message` as the relay writes it to a stream.
pub fn relay_entry(message: &Message) -> RelayEntry {
    RelayEntry {
        id: message.id.clone(),
        event_type: message.event_type.clone(),
        source: message.source.clone(),
        aggregate_type: message.aggregate_type.clone(),
        aggregate_id: message.key.clone(),
        event_version: message.event_version.clone(),
        headers: vec![("tenant".to_owned(), "acme".to_owned())],
        traceparent: None,
        tracestate: None,
        data: message.body.clone(),
    }
}

impl BrokerSide for RedisSide {
    const ADAPTER: &'static str = "redis";
    const ORDERS_BY_KEY: bool = true;
    const COUNTS_ATTEMPTS: bool = false;

    async fn create(prefix: &str, partitions: i32) -> RedisSide {
        let connection = require_redis().await;
        let base = unique_name(prefix);
        let streams = if partitions <= 1 {
            vec![base]
        } else {
            (0..partitions)
                .map(|index| format!("{base}-{index}"))
                .collect()
        };
        RedisSide {
            connection,
            streams,
            group: unique_name("group"),
            published: AtomicU64::new(0),
            origins: Mutex::new(Vec::new()),
        }
    }

    async fn publish(&self, messages: &[Message]) {
        let mut connection = self.connection();
        for message in messages {
            let index = match message.partition {
                Some(partition) => usize::try_from(partition).expect("a partition"),
                None => {
                    let hash = message.key.bytes().fold(0_usize, |hash, byte| {
                        hash.wrapping_mul(31) + usize::from(byte)
                    });
                    hash % self.streams.len()
                }
            };
            let stream = &self.streams[index % self.streams.len()];
            let ids = add_entries(&mut connection, stream, &[relay_entry(message)]).await;
            self.published.fetch_add(1, Ordering::SeqCst);
            self.origins
                .lock()
                .expect("origins")
                .extend(ids.iter().map(|id| format!("{stream}/{id}")));
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

    /// Entries the group read and acknowledged: read, less pending.
    async fn acknowledged(&self) -> u64 {
        self.groups()
            .await
            .iter()
            .map(|(read, pending)| read.saturating_sub(*pending))
            .sum()
    }

    async fn dead_letter_count(&self) -> u64 {
        let mut connection = self.connection();
        let mut count = 0;
        for stream in &self.streams {
            count +=
                stream_length(&mut connection, &RedisSide::dead_letter_stream(stream)).await as u64;
        }
        count
    }

    async fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        let mut connection = self.connection();
        let mut dead_letters = Vec::new();
        for stream in &self.streams {
            let dead_letter_stream = RedisSide::dead_letter_stream(stream);
            let length = stream_length(&mut connection, &dead_letter_stream).await;
            let entries = read_stream(
                &mut connection,
                &dead_letter_stream,
                length,
                Duration::from_secs(10),
            )
            .await;
            dead_letters.extend(entries.into_iter().map(|(_, fields)| dead_letter(&fields)));
        }
        assert!(
            dead_letters.len() >= count,
            "only {} of {count} dead letters",
            dead_letters.len()
        );
        dead_letters.truncate(count);
        dead_letters
    }

    fn origin_of(&self, index: u64) -> String {
        self.origins.lock().expect("origins")[usize::try_from(index).expect("an index")].clone()
    }
}

/// A dead letter's fields in the suite's terms.
pub fn dead_letter(fields: &HashMap<String, String>) -> DeadLetter {
    let field = |name: &str| {
        fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name} field: {fields:?}"))
            .clone()
    };
    DeadLetter {
        reason: field(DEAD_LETTER_REASON_FIELD),
        origin: field(DEAD_LETTER_SOURCE_FIELD),
        attempts: None,
        key: fields.get("ce_partitionkey").cloned(),
        source: fields.get("ce_source").cloned(),
        body: fields.get("data").cloned().unwrap_or_default().into_bytes(),
    }
}

/// Delete the streams and their dead-letter streams, also when the test
/// failed.
impl Drop for RedisSide {
    fn drop(&mut self) {
        let keys: Vec<String> = self
            .streams
            .iter()
            .flat_map(|stream| [stream.clone(), RedisSide::dead_letter_stream(stream)])
            .collect();
        let deleting = std::thread::spawn(move || {
            let client = redis::Client::open(redis_url())?;
            let mut connection = client.get_connection()?;
            redis::cmd("DEL").arg(&keys).query::<u64>(&mut connection)
        });
        if let Ok(Err(error)) = deleting.join() {
            eprintln!("cannot delete the test's streams: {error}");
        }
    }
}
