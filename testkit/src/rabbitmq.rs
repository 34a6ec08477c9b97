//! The RabbitMQ side of the tests: the real broker
//! (`OUTBOX_TEST_AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`),
//! exchanges and queues of each test's own, a collecting consumer, and the
//! broker's own view through `rabbitmqctl`.
//!
//! A broker that does not answer fails the test naming it and `scripts/test.sh
//! --services-only`; nothing is skipped. Nothing here stops or restarts the
//! shared broker.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::received::{Collected, Received};
use crate::services::{START_SERVICES, unique_name};

/// Default broker; `OUTBOX_TEST_AMQP_URL` overrides it.
pub const DEFAULT_AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// The AMQP URL of the tests, unchecked.
pub fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL").unwrap_or_else(|_| DEFAULT_AMQP_URL.to_owned())
}

/// A connection to the test broker, for the test's own declarations.
///
/// # Panics
/// When RabbitMQ does not answer within 10 s; the message names it and how
/// to start it.
pub async fn require_rabbitmq() -> Connection {
    let url = amqp_url();
    let connecting = Connection::connect(&url, ConnectionProperties::default());
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => panic!(
            "RabbitMQ is not reachable at {url} ({error}); {START_SERVICES} or point \
             OUTBOX_TEST_AMQP_URL at one"
        ),
        Err(_) => panic!(
            "RabbitMQ did not answer at {url} within 10 s; {START_SERVICES} or point \
             OUTBOX_TEST_AMQP_URL at one"
        ),
    }
}

/// Declare `exchange` as a durable topic exchange.
pub async fn declare_topic_exchange(channel: &Channel, exchange: &str) {
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare exchange");
}

/// Declare the durable `queue` and bind it to `exchange` with `#`.
pub async fn declare_bound_queue(channel: &Channel, exchange: &str, queue: &str) {
    declare_queue_bound_with(channel, exchange, queue, "#").await;
}

/// Declare the durable `queue` and bind it to `exchange` with
/// `binding_key`.
pub async fn declare_queue_bound_with(
    channel: &Channel,
    exchange: &str,
    queue: &str,
    binding_key: &str,
) {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declare queue");
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            binding_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind queue");
}

/// Declare a durable topic exchange with no queue bound to it: the broker
/// returns every message published to it as unroutable.
pub async fn declare_unbound_exchange(exchange: &str) {
    let connection = require_rabbitmq().await;
    let channel = connection.create_channel().await.expect("channel");
    declare_topic_exchange(&channel, exchange).await;
    let _ = connection.close(200, "OK".into()).await;
}

/// Delete `queues` and `exchanges` over `connection`; a failure is printed,
/// not raised (cleanup only).
pub async fn delete_topology(connection: &Connection, queues: &[&str], exchanges: &[&str]) {
    let Ok(channel) = connection.create_channel().await else {
        eprintln!("could not open a channel to delete {queues:?} and {exchanges:?}");
        return;
    };
    for queue in queues {
        if let Err(error) = channel
            .queue_delete((*queue).into(), QueueDeleteOptions::default())
            .await
        {
            eprintln!("could not delete queue {queue}: {error}");
        }
    }
    for exchange in exchanges {
        if let Err(error) = channel
            .exchange_delete((*exchange).into(), ExchangeDeleteOptions::default())
            .await
        {
            eprintln!("could not delete exchange {exchange}: {error}");
        }
    }
    // Closed here, not on drop: a close still under way when the caller
    // closes the connection is logged as a connection error.
    let _ = channel.close(200, "OK".into()).await;
}

/// [`delete_topology`] over a connection of its own, on a thread with its
/// own runtime: for `Drop`, which cannot await.
pub fn delete_topology_blocking(queues: Vec<String>, exchanges: Vec<String>) {
    let cleanup = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async move {
            let url = amqp_url();
            let connecting = Connection::connect(&url, ConnectionProperties::default());
            let Ok(Ok(connection)) = tokio::time::timeout(Duration::from_secs(5), connecting).await
            else {
                eprintln!("cannot connect to RabbitMQ to delete the test queues {queues:?}");
                return;
            };
            let queues: Vec<&str> = queues.iter().map(String::as_str).collect();
            let exchanges: Vec<&str> = exchanges.iter().map(String::as_str).collect();
            delete_topology(&connection, &queues, &exchanges).await;
            let _ = connection.close(200, "OK".into()).await;
        });
    });
    let _ = cleanup.join();
}

/// An AMQP header value as text.
pub fn text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(text) => String::from_utf8_lossy(text.as_bytes()).into_owned(),
        AMQPValue::ShortString(text) => text.to_string(),
        AMQPValue::LongLongInt(number) => number.to_string(),
        AMQPValue::LongInt(number) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every entry of the headers table of `properties`, as text.
pub fn headers(properties: &BasicProperties) -> HashMap<String, String> {
    properties
        .headers()
        .as_ref()
        .map(|table| {
            table
                .inner()
                .iter()
                .map(|(name, value)| (name.to_string(), text(value)))
                .collect()
        })
        .unwrap_or_default()
}

/// `delivery` as a [`Received`], read from the relay's `cloudEvents:`
/// headers and `message_id`.
pub fn received(delivery: &Delivery) -> Received {
    let headers = headers(&delivery.properties);
    Received {
        ce_id: headers.get("cloudEvents:id").cloned().unwrap_or_default(),
        aggregate_id: headers
            .get("cloudEvents:partitionkey")
            .cloned()
            .unwrap_or_default(),
        key: delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string())
            .unwrap_or_default(),
        payload: serde_json::from_slice(&delivery.data).unwrap_or(serde_json::Value::Null),
        headers,
    }
}

/// Declare a durable topic exchange and a durable queue `<exchange>.all`
/// bound to it with `#`, and consume the queue in the background (manual
/// ack), reconnecting when the connection is lost.
pub async fn exchange_consumer(exchange: &str) -> Collected {
    exchange_consumer_bound_with(exchange, "#").await
}

/// As [`exchange_consumer`], with the queue bound by `binding_key`: the
/// broker returns messages whose routing key it does not match.
pub async fn exchange_consumer_bound_with(exchange: &str, binding_key: &str) -> Collected {
    let connection = require_rabbitmq().await;
    consume_exchange(connection, amqp_url(), exchange, binding_key).await
}

/// As [`exchange_consumer`], on the broker at `url` instead of the shared
/// one (such as a [`crate::PrivateRabbitMq`]).
///
/// # Panics
/// When that broker does not answer within 10 s.
pub async fn exchange_consumer_at(url: &str, exchange: &str) -> Collected {
    let connecting = Connection::connect(url, ConnectionProperties::default());
    let connection = match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => panic!("RabbitMQ is not reachable at {url}: {error}"),
        Err(_) => panic!("RabbitMQ did not answer at {url} within 10 s"),
    };
    consume_exchange(connection, url.to_owned(), exchange, "#").await
}

/// Over `connection` to the broker at `url`: declare a durable topic
/// exchange and a durable queue `<exchange>.all` bound to it by
/// `binding_key`, and consume the queue in the background (manual ack),
/// reconnecting to `url` when the connection is lost.
async fn consume_exchange(
    connection: Connection,
    url: String,
    exchange: &str,
    binding_key: &str,
) -> Collected {
    let channel = connection.create_channel().await.expect("channel");
    declare_topic_exchange(&channel, exchange).await;
    let queue = format!("{exchange}.all");
    declare_queue_bound_with(&channel, exchange, &queue, binding_key).await;
    let collected = Collected::default();
    let sink = collected.clone();
    tokio::spawn(async move {
        // Reconnect after a lost connection; the durable queue kept its messages.
        let mut connection = Some(connection);
        loop {
            let active = match connection.take() {
                Some(connection) => connection,
                None => match Connection::connect(&url, ConnectionProperties::default()).await {
                    Ok(connection) => connection,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                },
            };
            consume_until_lost(&active, &queue, &sink).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    collected
}

/// Consume `queue` into `sink` until the connection or the consumer fails.
async fn consume_until_lost(connection: &Connection, queue: &str, sink: &Collected) {
    let Ok(channel) = connection.create_channel().await else {
        return;
    };
    let Ok(mut consumer) = channel
        .basic_consume(
            queue.into(),
            unique_name("consumer").as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    loop {
        // A consumer stream may stay silent instead of ending when the
        // broker goes away: check the connection while idle.
        let delivery = match tokio::time::timeout(Duration::from_secs(1), consumer.next()).await {
            Ok(Some(Ok(delivery))) => delivery,
            Ok(Some(Err(_)) | None) => return,
            Err(_) if connection.status().connected() => continue,
            Err(_) => return,
        };
        sink.push(received(&delivery));
        // An ack on a dying connection may never complete; the broker then
        // redelivers, which the tests count as a duplicate.
        let acked = tokio::time::timeout(
            Duration::from_secs(2),
            delivery.ack(BasicAckOptions::default()),
        )
        .await;
        if !matches!(acked, Ok(Ok(_))) {
            return;
        }
    }
}

/// Run `rabbitmqctl` (of the RabbitMQ test service) with `args`: its stdout.
fn rabbitmqctl(args: &[&str]) -> String {
    let output = std::process::Command::new("rabbitmqctl")
        .args(args)
        .output()
        .unwrap_or_else(|error| {
            panic!("rabbitmqctl (of the RabbitMQ test service) cannot be run: {error}")
        });
    assert!(
        output.status.success(),
        "rabbitmqctl {} failed: {}",
        args.first().copied().unwrap_or_default(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Close, on the broker's side, every connection whose client properties
/// contain `name` (as a network cut would drop it); the broker keeps
/// running. Returns how many were closed. Blocking.
pub fn close_connections_named(name: &str) -> usize {
    let listing = rabbitmqctl(&[
        "list_connections",
        "--quiet",
        "--no-table-headers",
        "pid",
        "client_properties",
    ]);
    let mut closed = 0;
    for line in listing.lines().filter(|line| line.contains(name)) {
        let Some(pid) = line.split('\t').next() else {
            continue;
        };
        rabbitmqctl(&[
            "close_connection",
            pid.trim(),
            "closed by the reconnect test",
        ]);
        closed += 1;
    }
    closed
}

/// Messages in `queue`, ready or delivered and not yet acknowledged, as the
/// broker counts them (`rabbitmqctl list_queues`). Blocking.
pub fn queue_depth(queue: &str) -> u64 {
    rabbitmqctl(&[
        "list_queues",
        "--quiet",
        "--no-table-headers",
        "name",
        "messages",
    ])
    .lines()
    .find_map(|line| {
        let (name, messages) = line.split_once('\t')?;
        (name.trim() == queue).then(|| messages.trim().parse().ok())?
    })
    .unwrap_or_else(|| panic!("rabbitmqctl does not list queue {queue}"))
}
