//! `cargo run -p outbox-e2e --example billing-consumer`
//!
//! Consumes the `order.created` events that `outbox-relay` publishes to
//! RabbitMQ and records one invoice per order, through the inbox: the
//! invoice and the inbox row commit in one transaction, so a redelivered
//! event records nothing. Run it next to the orders service and the relay:
//!
//! ```sh
//! cargo run -p outbox-e2e --example orders-service &
//! cargo run -p outbox-relay -- run --database-url postgres://postgres@127.0.0.1:5432/test \
//!     --broker amqp://guest:guest@127.0.0.1:5672/%2f &
//! cargo run -p outbox-e2e --example billing-consumer
//! ```
//!
//! It declares the exchange `orders` (durable, topic), the queue
//! `billing.orders` (durable) and their binding for `order.created`, then
//! consumes the queue until SIGTERM or Ctrl-C, finishing the deliveries in
//! flight.
//!
//! On Redis Streams, run the relay with `--broker redis://127.0.0.1:6379`
//! and this consumer with `--redis-url redis://127.0.0.1:6379`: it reads the
//! stream `orders` through the consumer group `billing` (created when
//! missing, from the start of the stream) instead.
//!
//! On NATS JetStream, run the relay with `--broker nats://127.0.0.1:4222`
//! and this consumer with `--nats-url nats://127.0.0.1:4222`: it makes the
//! stream `ORDERS` (`--nats-stream`) for the subjects `orders` and
//! `orders.dlq` when missing, then reads `orders` through the durable
//! consumer `billing`. Start it once before the relay, so the stream is
//! there when the relay publishes.
//!
//! Settings: `--database-url` / `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `--amqp-url` / `AMQP_URL`
//! (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `--redis-url` /
//! `REDIS_URL` (none: RabbitMQ), `--nats-url` / `NATS_URL` and
//! `--nats-stream` / `ORDERS_STREAM`, `--exchange` /
//! `ORDERS_EXCHANGE`, `--queue` / `BILLING_QUEUE`, `--batch-size N` /
//! `BILLING_BATCH_SIZE` for N deliveries per inbox transaction, and
//! `--exit-after N` to stop after N deliveries. Stdout gets one line when it consumes and one
//! summary when it stops; logs go to stderr (`RUST_LOG`).

mod config;
mod invoices;
mod nats_stream;
mod schema;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use outbox_inbox::ConsumerStats;
use outbox_inbox::Inbox;
use outbox_inbox::nats::{NatsConsumerConfig, NatsInboxConsumer};
use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
use outbox_inbox::redis::{RedisConsumerConfig, RedisInboxConsumer};
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::invoices::{InvoiceHandler, ORDER_CREATED};
use crate::nats_stream::ensure_stream;
use crate::schema::create_schema;

/// The name the inbox records this consumer's deliveries under.
const CONSUMER: &str = "billing";

/// Connections to the database: one per delivery processed at once, and
/// the inbox pruning.
const POOL_SIZE: u32 = 10;

/// Longest a batch waits to fill (`--batch-size` above 1).
const BATCH_WAIT: Duration = Duration::from_millis(20);

/// How long to wait for a database connection before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = Config::parse();
    match consume(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("billing-consumer: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn consume(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let pool = PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(&config.database_url)
        .await
        .map_err(|error| format!("cannot connect to the database: {error}"))?;
    outbox::migrate(&pool).await?;
    create_schema(&pool).await?;

    let stop = CancellationToken::new();
    stop_on_signal(stop.clone())?;
    let handler = InvoiceHandler::new(config.exit_after, stop.clone());
    let inbox = Inbox::new(pool.clone(), CONSUMER)?;
    // One delivery per connection at once; a batch takes one connection,
    // and twice its size in flight lets the next batch fill meanwhile.
    let in_flight = u16::try_from(POOL_SIZE - 1)
        .unwrap_or(1)
        .max(config.batch_size.saturating_mul(2));
    let batch_size = usize::from(config.batch_size);
    let stats = match (&config.redis_url, &config.nats_url) {
        (Some(redis_url), _) => {
            consume_redis(inbox, handler, &config, redis_url, in_flight, stop).await?
        }
        (None, Some(nats_url)) => {
            consume_nats(inbox, handler, &config, nats_url, in_flight, stop).await?
        }
        (None, None) => {
            consume_rabbitmq(inbox, handler, &config, in_flight, batch_size, stop).await?
        }
    };
    pool.close().await;
    println!(
        "stopped: {} invoice(s) recorded, {} duplicate(s) ignored, {} retried, {} dead-lettered, \
         {} database outage(s) waited out",
        stats.processed,
        stats.duplicates,
        stats.retried,
        stats.dead_lettered,
        stats.database_outages
    );
    Ok(())
}

/// Consume the queue bound to the orders exchange until `stop`.
async fn consume_rabbitmq(
    inbox: Inbox<sqlx::Postgres>,
    handler: InvoiceHandler,
    config: &Config,
    prefetch: u16,
    batch_size: usize,
    stop: CancellationToken,
) -> Result<ConsumerStats, Box<dyn std::error::Error>> {
    let mut consumer_config =
        RabbitMqConsumerConfig::new(config.amqp_url.clone(), config.queue.clone())
            .bind(config.exchange.clone(), ORDER_CREATED);
    consumer_config.prefetch = prefetch;
    consumer_config = consumer_config.batch(batch_size, BATCH_WAIT);
    let consumer = RabbitMqInboxConsumer::new(inbox, handler, consumer_config)?;
    // Before saying it consumes: from then on, what the relay publishes is
    // routed to the queue.
    consumer.declare_topology().await?;
    println!(
        "consuming queue {} (exchange {}, routing key {ORDER_CREATED})",
        config.queue, config.exchange
    );
    Ok(consumer.run(stop).await?)
}

/// Consume the orders stream through the group `billing` until `stop`.
async fn consume_redis(
    inbox: Inbox<sqlx::Postgres>,
    handler: InvoiceHandler,
    config: &Config,
    redis_url: &str,
    in_flight: u16,
    stop: CancellationToken,
) -> Result<ConsumerStats, Box<dyn std::error::Error>> {
    let mut consumer_config = RedisConsumerConfig::new(redis_url, CONSUMER, [&config.exchange]);
    consumer_config.max_in_flight = usize::from(in_flight);
    consumer_config = consumer_config.batch(usize::from(config.batch_size), BATCH_WAIT);
    let consumer = RedisInboxConsumer::new(inbox, handler, consumer_config)?;
    // The group starts from the beginning of the stream, so what the relay
    // published before this line is read too.
    println!("consuming stream {} (group {CONSUMER})", config.exchange);
    Ok(consumer.run(stop).await?)
}

/// Consume the orders subject through the durable consumer `billing`
/// until `stop`.
async fn consume_nats(
    inbox: Inbox<sqlx::Postgres>,
    handler: InvoiceHandler,
    config: &Config,
    nats_url: &str,
    in_flight: u16,
    stop: CancellationToken,
) -> Result<ConsumerStats, Box<dyn std::error::Error>> {
    ensure_stream(nats_url, &config.nats_stream, &config.exchange).await?;
    let mut consumer_config = NatsConsumerConfig::new(nats_url, &config.nats_stream, CONSUMER);
    consumer_config.filter_subject = Some(config.exchange.clone());
    consumer_config.max_in_flight = usize::from(in_flight);
    consumer_config.batch_size = usize::from(config.batch_size);
    consumer_config.batch_wait = BATCH_WAIT;
    let consumer = NatsInboxConsumer::new(inbox, handler, consumer_config)?;
    // The durable consumer is made when missing and delivers the stream
    // from its start, so what the relay published before is read too.
    println!(
        "consuming subject {} (stream {}, durable {CONSUMER})",
        config.exchange, config.nats_stream
    );
    Ok(consumer.run(stop).await?)
}

/// Cancel `stop` on SIGTERM or SIGINT (Ctrl-C). The handlers are installed
/// before this returns, so a signal sent right after is not missed.
#[cfg(unix)]
fn stop_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
            () = stop.cancelled() => return,
        }
        tracing::info!("stop requested; finishing the deliveries in flight");
        stop.cancel();
    });
    Ok(())
}

/// Cancel `stop` on Ctrl-C.
#[cfg(not(unix))]
fn stop_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    tokio::spawn(async move {
        tokio::select! {
            result = tokio::signal::ctrl_c() => {
                if let Err(error) = result {
                    tracing::error!(%error, "cannot listen for Ctrl-C");
                    return;
                }
            }
            () = stop.cancelled() => return,
        }
        tracing::info!("stop requested; finishing the deliveries in flight");
        stop.cancel();
    });
    Ok(())
}
