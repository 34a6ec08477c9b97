//! The two brokers the relay publishes to: where they are, a fresh topic or
//! exchange per case, their raw client, and a consumer.

use outbox_testkit::kafka;

use crate::Settings;
use crate::consumer_process::spawn_consumer;
use crate::support::consumers::{Arrivals, Deliveries, amqp_deliveries, kafka_deliveries};
use crate::support::events::unique_name;
use crate::support::raw::{RawRate, RawRecord, raw_lapin, raw_rdkafka};
use crate::support::targets::{AmqpTarget, amqp_target};

/// Publisher confirms in flight at most for raw lapin.
const AMQP_WINDOW: usize = 5_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broker {
    Kafka,
    RabbitMq,
}

/// A topic (Kafka) or an exchange with a bound queue (RabbitMQ) of one case.
pub(crate) enum Target {
    Topic { name: String, brokers: String },
    Exchange(Box<AmqpTarget>),
}

impl Broker {
    pub(crate) fn parse(name: &str) -> Broker {
        match name.trim() {
            "kafka" => Broker::Kafka,
            "rabbitmq" => Broker::RabbitMq,
            other => panic!("unknown broker {other}: kafka or rabbitmq"),
        }
    }

    pub(crate) fn path(self) -> &'static str {
        match self {
            Broker::Kafka => "PostgreSQL → Kafka (tansu)",
            Broker::RabbitMq => "PostgreSQL → RabbitMQ",
        }
    }

    /// The relay's `--broker`.
    pub(crate) fn url(self, settings: &Settings) -> String {
        match self {
            Broker::Kafka => format!("kafka://{}", settings.kafka_brokers),
            Broker::RabbitMq => settings.amqp_url.clone(),
        }
    }

    /// Process names of the broker, for its CPU time.
    pub(crate) fn processes(self) -> &'static [&'static str] {
        match self {
            Broker::Kafka => &["tansu"],
            Broker::RabbitMq => &["beam.smp"],
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
        }
    }

    /// The raw client's rate on a target of its own: rdkafka idempotent
    /// with acks=all, or lapin with publisher confirms.
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
    /// the topic from its beginning, or the exchange's queue.
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
        }
    }
}

impl Target {
    /// The topic or exchange name: the events' `topic` column.
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Topic { name, .. } => name,
            Target::Exchange(exchange) => &exchange.exchange,
        }
    }

    pub(crate) async fn remove(self) {
        match self {
            Target::Topic { name, brokers } => kafka::delete_topic(&brokers, &name).await,
            Target::Exchange(exchange) => exchange.remove().await,
        }
    }
}
