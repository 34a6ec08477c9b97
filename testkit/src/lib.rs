//! Test support for the outbox workspace.
//!
//! Every test that needs a database calls [`postgres`], [`mysql`] or
//! [`sqlite`] and gets a database of its own: a fresh database on the real
//! PostgreSQL or MariaDB server, or a temporary SQLite file. It is dropped
//! when the [`TestDatabase`] is. [`test_on_every_backend!`] writes one test
//! per scenario and backend.
//!
//! [`kafka`] and [`rabbitmq`] hold the broker side: topics, exchanges and
//! queues of each test's own, producers and publishers that write as the
//! relay does, and consumers that collect what arrived ([`Collected`]).
//! [`redis`] holds the same for Redis Streams, on the shared server and
//! on the three-master cluster `scripts/test.sh` starts, and [`nats`] for
//! NATS JetStream streams.
//! [`PrivateRabbitMq`] runs a RabbitMQ node of one test's own, for broker
//! settings the shared one keeps at their defaults (a small
//! `max_message_size`). [`PrivateTansu`] does the same for a Kafka-API
//! broker that a bench freezes.
//!
//! A service that cannot be reached fails the test with a message naming it
//! and `scripts/test.sh --services-only`; nothing is skipped. Services are
//! found through `OUTBOX_TEST_POSTGRES_URL`, `OUTBOX_TEST_MYSQL_URL`,
//! `OUTBOX_TEST_KAFKA_BROKERS` and `OUTBOX_TEST_AMQP_URL`, defaulting to the
//! loopback services that `scripts/test.sh` starts.
//!
//! [`ReplicationSlotGuard`] drops a replication slot a test made, even when
//! the test fails; a PostgreSQL test database drops its slots before it is
//! dropped itself.
//!
//! [`TcpProxy`] stands between the code under test and a server, so a test
//! can cut that code off its database or broker (and let it back) while the
//! shared server keeps running for every other test.
//!
//! [`browser::Browser`] drives headless Chromium through ChromeDriver, for
//! the tests of the relay's operators' page.

mod backends;
pub mod browser;
mod database;
pub mod kafka;
pub mod nats;
mod proxy;
mod query;
pub mod rabbitmq;
mod rabbitmq_private;
mod received;
pub mod redis;
mod services;
mod slots;
mod tansu_private;

pub use database::{TestDatabase, mysql, postgres, sqlite, sqlite_unopened};
pub use proxy::TcpProxy;
pub use query::TestBackend;
pub use rabbitmq_private::{DEFAULT_RABBITMQ_SERVER, PrivateRabbitMq};
pub use received::{Collected, Received};
pub use services::unique_name;
pub use slots::{ReplicationSlotGuard, unique_slot_name};
pub use tansu_private::PrivateTansu;

/// A deterministic shuffle (xorshift) of `items`, so that a failure can be
/// replayed with the same `seed`.
pub fn shuffled<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    let mut state = seed.max(1);
    for index in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(index, (state % (index as u64 + 1)) as usize);
    }
    items
}
