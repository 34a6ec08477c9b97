//! The consumer's settings, from flags or the environment.

use clap::Parser;

/// Records one invoice per `order.created` event consumed from RabbitMQ
/// (or Redis Streams, or NATS JetStream), through the inbox, so a redelivered event changes
/// nothing.
#[derive(Debug, Parser)]
#[command(name = "billing-consumer")]
pub struct Config {
    /// PostgreSQL database for the invoices and the inbox table.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub database_url: String,

    /// RabbitMQ to consume from.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub amqp_url: String,

    /// Redis to consume from instead of RabbitMQ: the relay then runs with
    /// `--broker redis://...`, and the consumer reads the stream named by
    /// `--exchange` through the consumer group `billing`.
    #[arg(long, env = "REDIS_URL", conflicts_with = "nats_url")]
    pub redis_url: Option<String>,

    /// NATS to consume from instead of RabbitMQ: the relay then runs with
    /// `--broker nats://...`, and the consumer reads the JetStream stream
    /// `--nats-stream` through the durable consumer `billing`, filtered to
    /// the subject named by `--exchange`.
    #[arg(long, env = "NATS_URL")]
    pub nats_url: Option<String>,

    /// The JetStream stream to consume with `--nats-url`; created when
    /// missing, taking the `--exchange` subject and its dead letters
    /// (`<exchange>.dlq`).
    #[arg(long, env = "ORDERS_STREAM", default_value = "ORDERS")]
    pub nats_stream: String,

    /// The exchange the relay publishes orders to (the events' `topic`);
    /// declared as a durable topic exchange when missing. With
    /// `--redis-url`, the stream of that name (created when missing); with
    /// `--nats-url`, the subject of that name.
    #[arg(long, env = "ORDERS_EXCHANGE", default_value = "orders")]
    pub exchange: String,

    /// The queue to consume; declared durable and bound to the exchange
    /// for `order.created` when missing.
    #[arg(long, env = "BILLING_QUEUE", default_value = "billing.orders")]
    pub queue: String,

    /// Deliveries per inbox transaction: 1 records each delivery in a
    /// transaction of its own; more gathers up to this many (waiting at
    /// most 20 ms for them) into one transaction, acked after its commit.
    #[arg(
        long,
        env = "BILLING_BATCH_SIZE",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=4096)
    )]
    pub batch_size: u16,

    /// Stop after this many deliveries (first deliveries, redeliveries and
    /// duplicates alike), once each of them is settled.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub exit_after: Option<u64>,
}
