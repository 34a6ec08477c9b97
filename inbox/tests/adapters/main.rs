//! The conformance suite of the inbox adapters: every scenario the Kafka,
//! RabbitMQ, Redis Streams and NATS JetStream adapters share is written once, generic over
//! the broker side ([`broker::BrokerSide`]) and the database
//! (`InboxBackend`), and run on every broker and on PostgreSQL, MariaDB
//! and SQLite against the real services (`scripts/test.sh
//! --services-only` starts them; a missing one fails the test naming it). Tests are named
//! `scenario_file::broker::backend::scenario`.
//!
//! The shared guarantees (`docs/inbox.md`): each event applied once however
//! often and however concurrently it arrives ([`duplicates`]); a failing
//! handler retried in place, and dead-lettered with its reason once out of
//! attempts ([`retries`]); poison dead-lettered at once while consuming
//! goes on ([`poison`]); a database outage ridden out without losing or
//! acknowledging anything early ([`database_outage`]). What only one broker
//! has stays in its own file: Kafka's offsets across rebalances and crashes
//! ([`kafka_offsets`]), RabbitMQ's reconnection ([`rabbitmq_connection`])
//! and topology ([`rabbitmq_topology`]), Redis's group, claims, dead-letter
//! stream and reconnection ([`redis_streams`]), NATS's durable consumer,
//! progress acknowledgements and dead-letter subject ([`nats_jetstream`]);
//! a batching consumer killed mid-stream on each broker ([`kills`]).

/// One test per scenario on every broker and the listed backends, in the
/// calling scenario module: each message in a transaction of its own, and
/// in batches ([`broker::Batched`]: `kafka_batched`, `rabbitmq_batched`,
/// `redis_batched`, `nats_batched`).
macro_rules! on_every_broker {
    ($backends:tt $($scenario:ident),+ $(,)?) => {
        outbox_testkit::test_on_backends_for!(
            [
                kafka: $crate::kafka_side::KafkaSide,
                rabbitmq: $crate::rabbitmq_side::RabbitMqSide,
                kafka_batched: $crate::broker::Batched<$crate::kafka_side::KafkaSide>,
                rabbitmq_batched: $crate::broker::Batched<$crate::rabbitmq_side::RabbitMqSide>,
                redis: $crate::redis_side::RedisSide,
                redis_batched: $crate::broker::Batched<$crate::redis_side::RedisSide>,
                nats: $crate::nats_side::NatsSide,
                nats_batched: $crate::broker::Batched<$crate::nats_side::NatsSide>,
            ]
            $backends
            $($scenario),+
        );
    };
}

mod broker;
mod fixture;
mod kafka_side;
mod ledger;
mod nats_side;
mod rabbitmq_side;
mod redis_side;

mod database_outage;
mod duplicates;
mod kafka_offsets;
mod kills;
mod nats_jetstream;
mod poison;
mod rabbitmq_connection;
mod rabbitmq_topology;
mod redis_streams;
mod retries;
