//! The bench's settings, from `--name value` arguments (see the bench's
//! own documentation).

use std::fmt;

/// A broker whose consumers are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broker {
    RabbitMq,
    Kafka,
    Redis,
    Nats,
}

impl Broker {
    fn parse(name: &str) -> Broker {
        match name {
            "rabbitmq" | "amqp" => Broker::RabbitMq,
            "kafka" => Broker::Kafka,
            "redis" => Broker::Redis,
            "nats" => Broker::Nats,
            other => panic!("--brokers: unknown broker {other:?} (rabbitmq, kafka, redis, nats)"),
        }
    }
}

impl fmt::Display for Broker {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Broker::RabbitMq => "RabbitMQ",
            Broker::Kafka => "Kafka",
            Broker::Redis => "Redis Streams",
            Broker::Nats => "NATS JetStream",
        })
    }
}

/// One consumer measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    /// `RabbitMqInboxConsumer`, one inbox transaction per delivery.
    RabbitInbox,
    /// `RabbitMqInboxConsumer` with `batch_size` 512.
    RabbitInboxBatched,
    /// mq-bridge's route: AMQP, deduplication, `sqlx` output.
    MqBridge,
    /// `KafkaInboxConsumer`, one inbox transaction per delivery.
    KafkaInbox,
    /// `KafkaInboxConsumer` with `batch_size` 512.
    KafkaInboxBatched,
    /// An rdkafka consumer writing each batch in one plain transaction.
    RawKafka,
    /// `RedisInboxConsumer`, one inbox transaction per entry.
    RedisInbox,
    /// `RedisInboxConsumer` with `batch_size` 512.
    RedisInboxBatched,
    /// `XREADGROUP` of up to 512 entries, one plain transaction, `XACK`.
    RawRedis,
    /// `NatsInboxConsumer`, one inbox transaction per message.
    NatsInbox,
    /// `NatsInboxConsumer` with `batch_size` 512.
    NatsInboxBatched,
    /// A pull consumer fetching up to 512 messages, one plain transaction,
    /// then every message's acknowledgement.
    RawNats,
}

impl Case {
    /// Every case of `broker`, the reference (the ratios' denominator) last.
    pub(crate) fn of(broker: Broker) -> &'static [Case] {
        match broker {
            Broker::RabbitMq => &[Case::RabbitInbox, Case::RabbitInboxBatched, Case::MqBridge],
            Broker::Kafka => &[Case::KafkaInbox, Case::KafkaInboxBatched, Case::RawKafka],
            Broker::Redis => &[Case::RedisInbox, Case::RedisInboxBatched, Case::RawRedis],
            Broker::Nats => &[Case::NatsInbox, Case::NatsInboxBatched, Case::RawNats],
        }
    }

    /// The case the others of its broker are divided by.
    pub(crate) fn reference(broker: Broker) -> Case {
        match broker {
            Broker::RabbitMq => Case::MqBridge,
            Broker::Kafka => Case::RawKafka,
            Broker::Redis => Case::RawRedis,
            Broker::Nats => Case::RawNats,
        }
    }

    /// The name in `--cases`.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Case::RabbitInbox | Case::KafkaInbox | Case::RedisInbox | Case::NatsInbox => "inbox",
            Case::RabbitInboxBatched
            | Case::KafkaInboxBatched
            | Case::RedisInboxBatched
            | Case::NatsInboxBatched => "batched",
            Case::MqBridge => "mq-bridge",
            Case::RawKafka | Case::RawRedis | Case::RawNats => "raw",
        }
    }

    /// The name in the report.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Case::RabbitInbox => "inbox, per delivery (prefetch 32)",
            Case::RabbitInboxBatched => "inbox, batched (batch 512, prefetch 1000)",
            Case::MqBridge => "mq-bridge 1.2.0 (dedup + sqlx, batch 512, prefetch 1000)",
            Case::KafkaInbox => "inbox, per delivery (max_in_flight 32)",
            Case::KafkaInboxBatched => "inbox, batched (batch 512, max_in_flight 1024)",
            Case::RawKafka => "raw rdkafka, one transaction per batch of 512",
            Case::RedisInbox => "inbox, per entry (max_in_flight 32)",
            Case::RedisInboxBatched => "inbox, batched (batch 512, max_in_flight 1024)",
            Case::RawRedis => "raw XREADGROUP + XACK, one transaction per batch of 512",
            Case::NatsInbox => "inbox, per message (max_in_flight 32, fetch 32)",
            Case::NatsInboxBatched => "inbox, batched (batch 512, fetch 512, max_in_flight 1024)",
            Case::RawNats => {
                "raw pull consumer, fetch 512, one transaction per batch, acks after commit"
            }
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) brokers: Vec<Broker>,
    pub(crate) rounds: usize,
    /// Unique events; each is delivered twice.
    pub(crate) events: usize,
    cases: Option<Vec<String>>,
}

impl Settings {
    /// The settings of this run. Panics on a bad argument, naming it.
    pub(crate) fn load() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let value = |flag: &str| -> Option<String> {
            args.iter()
                .position(|arg| arg == flag)
                .map(|index| {
                    args.get(index + 1)
                        .cloned()
                        .unwrap_or_else(|| panic!("{flag} needs a value"))
                })
                .filter(|value| !value.trim().is_empty())
        };
        let list = |text: String| -> Vec<String> {
            text.split(',')
                .map(|item| item.trim().to_ascii_lowercase())
                .filter(|item| !item.is_empty())
                .collect()
        };
        let number = |flag: &str, default: usize| -> usize {
            value(flag).map_or(default, |text| {
                text.replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("{flag}: not a number: {text}"))
            })
        };
        let brokers = value("--brokers")
            .map_or_else(|| vec!["rabbitmq".to_owned(), "kafka".to_owned()], list)
            .iter()
            .map(|name| Broker::parse(name))
            .collect();
        let rounds = number("--rounds", 2);
        assert!(rounds >= 1, "--rounds must be at least 1");
        let events = number("--events", 10_000);
        assert!(events >= 1, "--events must be at least 1");
        Settings {
            brokers,
            rounds,
            events,
            cases: value("--cases").map(list),
        }
    }

    /// Whether `--cases` (all when absent) names `case`.
    pub(crate) fn runs(&self, case: Case) -> bool {
        self.cases
            .as_ref()
            .is_none_or(|cases| cases.iter().any(|name| name == case.key()))
    }

    /// Deliveries per run: every event twice.
    pub(crate) fn deliveries(&self) -> u64 {
        2 * self.events as u64
    }
}
