//! The brokers the relay publishes to: where they are, a fresh topic,
//! exchange or stream per case, their raw client, and a consumer.

use async_nats::jetstream::stream;
use outbox_testkit::nats::TestStream;
use outbox_testkit::{kafka, redis};

use crate::Settings;
use crate::consumer_process::spawn_consumer;
use crate::support::consumers::{
    Arrivals, Deliveries, amqp_deliveries, kafka_deliveries, nats_consume, noting, redis_consume,
};
use crate::support::events::unique_name;
use crate::support::raw::{
    RawRate, RawRecord, nats_jetstream, raw_lapin, raw_nats, raw_rdkafka, raw_redis,
};
use crate::support::targets::{AmqpTarget, amqp_target};

/// Publisher confirms in flight at most for raw lapin.
const AMQP_WINDOW: usize = 5_000;
/// `XADD`s per pipeline of raw redis-rs: the relay's batch size
/// (`batch_size`, 500 by default when polling).
const REDIS_PIPELINE: usize = 500;
/// Pipelines raw redis-rs keeps handed over and unanswered on its
/// connection. The relay keeps up to 1,000 events (two batches of 500)
/// in flight while it sends a third.
const REDIS_WINDOW: usize = 3;
/// Publish acknowledgements raw async-nats keeps outstanding: as many
/// messages as [`REDIS_WINDOW`] pipelines of [`REDIS_PIPELINE`], the
/// relay's two batches in flight and the one it sends.
const NATS_WINDOW: usize = REDIS_WINDOW * REDIS_PIPELINE;
/// Where each case's JetStream stream keeps its messages, for the raw
/// client and the relay alike: on disk, the server's default.
const NATS_STORAGE: stream::StorageType = stream::StorageType::File;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broker {
    Kafka,
    RabbitMq,
    Redis,
    Nats,
}

/// A topic (Kafka), an exchange with a bound queue (RabbitMQ), a stream
/// (Redis) or a JetStream stream (NATS) of one case.
pub(crate) enum Target {
    Topic {
        name: String,
        brokers: String,
    },
    Exchange(Box<AmqpTarget>),
    Stream {
        name: String,
        url: String,
    },
    /// A JetStream stream taking the one subject of the same name.
    JetStream {
        name: String,
        url: String,
    },
}

impl Broker {
    pub(crate) fn parse(name: &str) -> Broker {
        match name.trim() {
            "kafka" => Broker::Kafka,
            "rabbitmq" => Broker::RabbitMq,
            "redis" => Broker::Redis,
            "nats" => Broker::Nats,
            other => panic!("unknown broker {other}: kafka, rabbitmq, redis or nats"),
        }
    }

    pub(crate) fn path(self) -> &'static str {
        match self {
            Broker::Kafka => "PostgreSQL → Kafka (tansu)",
            Broker::RabbitMq => "PostgreSQL → RabbitMQ",
            Broker::Redis => "PostgreSQL → Redis Streams",
            Broker::Nats => "PostgreSQL → NATS JetStream",
        }
    }

    /// The relay's `--broker`.
    pub(crate) fn url(self, settings: &Settings) -> String {
        match self {
            Broker::Kafka => format!("kafka://{}", settings.kafka_brokers),
            Broker::RabbitMq => settings.amqp_url.clone(),
            Broker::Redis => settings.redis_url.clone(),
            Broker::Nats => settings.nats_url.clone(),
        }
    }

    /// Process names of the broker, for its CPU time.
    pub(crate) fn processes(self) -> &'static [&'static str] {
        match self {
            Broker::Kafka => &["tansu"],
            Broker::RabbitMq => &["beam.smp"],
            Broker::Redis => &["redis-server"],
            Broker::Nats => &["nats-server"],
        }
    }

    pub(crate) async fn target(self, settings: &Settings, prefix: &str) -> Target {
        match self {
            Broker::Kafka => {
                let name = unique_name(prefix);
                kafka::create_topic(&settings.kafka_brokers, &name, settings.kafka_partitions)
                    .await;
                Target::Topic {
                    name,
                    brokers: settings.kafka_brokers.clone(),
                }
            }
            Broker::RabbitMq => Target::Exchange(Box::new(amqp_target(prefix).await)),
            // `XADD` makes the stream; nothing is there before.
            Broker::Redis => Target::Stream {
                name: unique_name(prefix),
                url: settings.redis_url.clone(),
            },
            Broker::Nats => {
                let name = unique_name(prefix);
                let jetstream = nats_jetstream(&settings.nats_url).await;
                TestStream::create_with(
                    &jetstream,
                    stream::Config {
                        name: name.clone(),
                        subjects: vec![name.clone()],
                        storage: NATS_STORAGE,
                        ..stream::Config::default()
                    },
                )
                .await;
                Target::JetStream {
                    name,
                    url: settings.nats_url.clone(),
                }
            }
        }
    }

    /// The raw client's rate on a target of its own: rdkafka idempotent
    /// with acks=all, lapin with publisher confirms, redis-rs pipelining
    /// the relay's `XADD`s on one multiplexed connection, or async-nats
    /// publishing with a window of acknowledgements outstanding.
    pub(crate) async fn raw(self, settings: &Settings, records: &[RawRecord]) -> RawRate {
        let target = self.target(settings, "raw").await;
        let rate = match self {
            Broker::Kafka => {
                raw_rdkafka(
                    &settings.kafka_brokers,
                    target.name(),
                    records,
                    self.processes(),
                )
                .await
            }
            Broker::RabbitMq => {
                raw_lapin(
                    &settings.amqp_url,
                    target.name(),
                    records,
                    AMQP_WINDOW,
                    self.processes(),
                )
                .await
            }
            Broker::Redis => {
                raw_redis(
                    &settings.redis_url,
                    target.name(),
                    records,
                    REDIS_PIPELINE,
                    REDIS_WINDOW,
                    self.processes(),
                )
                .await
            }
            Broker::Nats => {
                raw_nats(
                    &settings.nats_url,
                    target.name(),
                    records,
                    NATS_WINDOW,
                    self.processes(),
                )
                .await
            }
        };
        target.remove().await;
        rate
    }

    /// A consumer of `target` in a process of its own, stamping arrivals
    /// by event id.
    pub(crate) fn consumer(
        self,
        settings: &Settings,
        target: &Target,
    ) -> (Arrivals, tokio::task::JoinHandle<()>) {
        spawn_consumer(target, &settings.amqp_url)
    }

    /// A consumer of `target`, noting every delivery's event id in order:
    /// the topic or the stream from its beginning, or the exchange's queue.
    pub(crate) async fn deliveries(
        self,
        settings: &Settings,
        target: &Target,
    ) -> (Deliveries, tokio::task::JoinHandle<()>) {
        match target {
            Target::Topic { name, .. } => kafka_deliveries(&settings.kafka_brokers, name),
            Target::Exchange(exchange) => {
                amqp_deliveries(&settings.amqp_url, &exchange.queue).await
            }
            Target::Stream { name, url } => {
                let (deliveries, note) = noting();
                (deliveries, redis_consume(url, name, note).await)
            }
            Target::JetStream { name, url } => {
                let (deliveries, note) = noting();
                (deliveries, nats_consume(url, name, note).await)
            }
        }
    }
}

impl Target {
    /// The topic, exchange or stream name: the events' `topic` column.
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Topic { name, .. }
            | Target::Stream { name, .. }
            | Target::JetStream { name, .. } => name,
            Target::Exchange(exchange) => &exchange.exchange,
        }
    }

    pub(crate) async fn remove(self) {
        match self {
            Target::Topic { name, brokers } => kafka::delete_topic(&brokers, &name).await,
            Target::Exchange(exchange) => exchange.remove().await,
            Target::Stream { name, url } => {
                let mut connection = redis::connect_to(&url, "OUTBOX_TEST_REDIS_URL").await;
                redis::delete_keys(&mut connection, &[name]).await;
            }
            Target::JetStream { name, url } => {
                TestStream::existing(&nats_jetstream(&url).await, &name)
                    .delete()
                    .await;
            }
        }
    }
}
