//! Every example, run as its own process the way a user runs it: the
//! quickstart on SQLite; the orders service on a fresh PostgreSQL database;
//! the billing consumer fed by the relay through the real RabbitMQ, and
//! through Redis Streams.
//!
//! `cargo test -p outbox-e2e` (and `cargo test --workspace`) builds the
//! examples next to this test's binary. With a target filter
//! (`cargo test -p outbox-e2e --test examples`) it does not: run
//! `cargo build -p outbox-e2e --examples` first.

mod support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use outbox::{OutboxMessage, OutboxWriter};
use outbox_relay::publish::nats::{NatsPublisher, NatsPublisherConfig};
use outbox_relay::publish::redis::{RedisEndpoint, RedisPublisher, RedisPublisherConfig};
use outbox_relay::publish::{
    PublishFailure, Publisher, RabbitMqPublisher, RabbitMqPublisherConfig,
};
use outbox_relay::{OutboundEvent, RelayConfig, RelayService};
use outbox_testkit::nats as nats_kit;
use outbox_testkit::rabbitmq::{amqp_url, delete_topology, require_rabbitmq};
use outbox_testkit::redis as redis_kit;
use serde_json::json;
use support::example::{Example, PATIENCE, example_binary, http};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Run the quickstart to its end, at most [`PATIENCE`].
async fn run_quickstart() -> std::process::Output {
    let run = Command::new(example_binary("quickstart"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the quickstart exits")
        .expect("the quickstart starts")
}

/// The quickstart succeeded, published the two committed orders and
/// ignored the duplicate delivery.
fn assert_quickstart_output(output: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );

    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("stdout holds one CloudEvent per line"))
        .collect();
    let orders: Vec<&str> = events
        .iter()
        .map(|event| event["partitionkey"].as_str().expect("a partition key"))
        .collect();
    assert_eq!(
        orders,
        ["o-1", "o-3"],
        "the rolled-back o-2 is not published"
    );

    let first_id = events[0]["id"].as_str().expect("an id");
    assert_eq!(
        stderr.matches("processed, invoice recorded").count(),
        2,
        "{stderr}"
    );
    let duplicate = format!("event {first_id} (order o-1): duplicate delivery, ignored");
    assert_eq!(stderr.matches(&duplicate).count(), 1, "{stderr}");
    assert!(
        stderr.contains("invoices per order: o-1: 1, o-3: 1"),
        "{stderr}"
    );
}

#[tokio::test]
async fn quickstart_relays_the_committed_orders_and_ignores_the_duplicate() {
    assert_quickstart_output(&run_quickstart().await);
}

#[tokio::test]
async fn two_quickstarts_started_at_once_both_succeed() {
    let (first, second) = tokio::join!(run_quickstart(), run_quickstart());
    assert_quickstart_output(&first);
    assert_quickstart_output(&second);
}

/// A request the service must refuse, and what it must say.
struct BadRequest {
    body: &'static str,
    content_type: Option<&'static str>,
    status: u16,
    error_mentions: &'static str,
}

const BAD_REQUESTS: &[BadRequest] = &[
    BadRequest {
        body: r#"{"customer": "ada", "total_cents": "#,
        content_type: Some("application/json"),
        status: 400,
        error_mentions: "JSON",
    },
    BadRequest {
        body: r#"{"customer": "ada"}"#,
        content_type: Some("application/json"),
        status: 422,
        error_mentions: "missing field `total_cents`",
    },
    BadRequest {
        body: r#"{"customer": "ada", "total_cents": "12.50"}"#,
        content_type: Some("application/json"),
        status: 422,
        error_mentions: "total_cents",
    },
    BadRequest {
        body: r#"{"customer": "ada", "total_cents": 0}"#,
        content_type: Some("application/json"),
        status: 422,
        error_mentions: "`total_cents` must be more than zero",
    },
    BadRequest {
        body: r#"{"customer": "  ", "total_cents": 500}"#,
        content_type: Some("application/json"),
        status: 422,
        error_mentions: "`customer` is empty",
    },
    BadRequest {
        body: r#"{"customer": "ada", "total_cents": 500, "coupon": "FREE"}"#,
        content_type: Some("application/json"),
        status: 422,
        error_mentions: "unknown field `coupon`",
    },
    BadRequest {
        body: r#"{"customer": "ada", "total_cents": 500}"#,
        content_type: None,
        status: 415,
        error_mentions: "Content-Type",
    },
];

async fn count(pool: &sqlx::PgPool, table_count_sql: &'static str) -> i64 {
    sqlx::query_scalar(table_count_sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|error| panic!("{table_count_sql}: {error}"))
}

#[tokio::test]
async fn orders_service_writes_each_order_with_its_event_and_refuses_bad_input() {
    let db = outbox_testkit::postgres().await;
    let mut service = Example::spawn(
        "orders-service",
        &["--database-url", db.url(), "--listen", "127.0.0.1:0"],
    );
    let line = service.next_line().await;
    let address = line
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("expected `listening on http://ADDRESS`, got `{line}`"))
        .to_owned();

    let (status, body) = http(&address, "GET", "/healthz", None, "").await;
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));

    let (status, body) = http(
        &address,
        "POST",
        "/orders",
        Some("application/json"),
        r#"{"customer": "ada", "total_cents": 1250}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let placed: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    let order_id: Uuid = placed["order_id"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("no order_id in {body}"));
    let event_id: Uuid = placed["event_id"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("no event_id in {body}"));

    let (customer, total_cents, order_xid): (String, i64, String) =
        sqlx::query_as("SELECT customer, total_cents, xmin::text FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_one(db.pool())
            .await
            .expect("the order row");
    assert_eq!((customer.as_str(), total_cents), ("ada", 1250));
    let (event_type, aggregate_id, topic, payload, event_xid): (
        String,
        String,
        String,
        serde_json::Value,
        String,
    ) = sqlx::query_as(
        "SELECT event_type, aggregate_id, topic, payload, xmin::text \
         FROM outbox_events WHERE event_id = $1",
    )
    .bind(event_id)
    .fetch_one(db.pool())
    .await
    .expect("the outbox row");
    assert_eq!(event_type, "order.created");
    assert_eq!(aggregate_id, order_id.to_string());
    assert_eq!(topic, "orders");
    assert_eq!(
        payload,
        json!({ "order_id": order_id, "customer": "ada", "total_cents": 1250 })
    );
    assert_eq!(
        order_xid, event_xid,
        "the order and its event were written by one transaction"
    );

    for bad in BAD_REQUESTS {
        let (status, body) = http(&address, "POST", "/orders", bad.content_type, bad.body).await;
        assert_eq!(status, bad.status, "{} answered {body}", bad.body);
        let problem: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|error| {
            panic!("{} answered a non-JSON body {body}: {error}", bad.body)
        });
        let message = problem["error"].as_str().unwrap_or_default();
        assert!(
            message.contains(bad.error_mentions),
            "{} answered `{message}`, which does not mention `{}`",
            bad.body,
            bad.error_mentions
        );
        assert!(!message.contains('\n'), "a one-line error: {message}");
    }
    assert_eq!(count(db.pool(), "SELECT COUNT(*) FROM orders").await, 1);
    assert_eq!(
        count(db.pool(), "SELECT COUNT(*) FROM outbox_events").await,
        1
    );

    service.terminate();
    let (status, _rest, log) = service.wait().await;
    assert!(
        status.success(),
        "stopped on SIGTERM with {status}; stderr:\n{log}"
    );
}

/// Place one order through the service at `address`; returns its id.
async fn place_order(address: &str, customer: &str) -> Uuid {
    let body = format!(r#"{{"customer": "{customer}", "total_cents": 1250}}"#);
    let (status, body) = http(address, "POST", "/orders", Some("application/json"), &body).await;
    assert_eq!(status, 201, "{body}");
    let placed: serde_json::Value = serde_json::from_str(&body).expect("a JSON body");
    placed["order_id"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("no order_id in {body}"))
}

/// The address an orders service printed as `listening on http://ADDRESS`.
async fn listening_address(service: &mut Example) -> String {
    let line = service.next_line().await;
    line.strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("expected `listening on http://ADDRESS`, got `{line}`"))
        .to_owned()
}

#[tokio::test]
async fn two_orders_services_started_at_once_on_a_fresh_database_both_serve() {
    let db = outbox_testkit::postgres().await;
    let args = ["--database-url", db.url(), "--listen", "127.0.0.1:0"];
    let mut first = Example::spawn("orders-service", &args);
    let mut second = Example::spawn("orders-service", &args);
    let (first_address, second_address) = tokio::join!(
        listening_address(&mut first),
        listening_address(&mut second)
    );

    let first_order = place_order(&first_address, "ada").await;
    let second_order = place_order(&second_address, "grace").await;
    assert_ne!(first_order, second_order);
    assert_eq!(count(db.pool(), "SELECT COUNT(*) FROM orders").await, 2);
    assert_eq!(
        count(db.pool(), "SELECT COUNT(*) FROM outbox_events").await,
        2
    );

    for service in [first, second] {
        service.terminate();
        let (status, _rest, log) = service.wait().await;
        assert!(
            status.success(),
            "stopped on SIGTERM with {status}; stderr:\n{log}"
        );
    }
}

/// A publisher that publishes the first event it is handed a second time,
/// as a relay does that crashed after the broker acknowledged an event and
/// before it marked it published.
struct RepublishFirst {
    inner: Box<dyn Publisher>,
    republished: AtomicBool,
}

impl Publisher for RepublishFirst {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move {
            let outcomes = self.inner.publish(events).await;
            if let (Some(first), Some(Ok(()))) = (events.first(), outcomes.first())
                && !self.republished.swap(true, Ordering::SeqCst)
            {
                let again = self.inner.publish(std::slice::from_ref(first)).await;
                assert_eq!(again, vec![Ok(())], "republishing the first event failed");
            }
            outcomes
        })
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

/// Write `orders` (id, total in cents) as the orders service does, each
/// with its `order.created` event to `exchange`, in one transaction.
async fn write_orders(pool: &sqlx::PgPool, exchange: &str, orders: &[(Uuid, i64)]) {
    let mut tx = pool.begin().await.expect("begin");
    let messages = orders
        .iter()
        .map(|(order_id, total_cents)| {
            let payload =
                json!({ "order_id": order_id, "customer": "ada", "total_cents": total_cents });
            OutboxMessage::new(
                "order.created",
                "/orders",
                "order",
                order_id.to_string(),
                exchange,
                serde_json::value::to_raw_value(&payload).expect("a JSON payload"),
            )
        })
        .collect();
    OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue the orders");
    tx.commit().await.expect("commit");
}

/// A publisher that sends every event `TIMES` times, in order: the
/// redeliveries an at-least-once pipeline may make, all at once.
struct PublishEach<const TIMES: usize> {
    inner: Box<dyn Publisher>,
}

impl<const TIMES: usize> Publisher for PublishEach<TIMES> {
    fn publish<'a>(
        &'a self,
        events: &'a [OutboundEvent],
    ) -> BoxFuture<'a, Vec<Result<(), PublishFailure>>> {
        Box::pin(async move {
            let mut outcomes = Vec::new();
            for _ in 0..TIMES {
                outcomes = self.inner.publish(events).await;
                if outcomes.iter().any(Result::is_err) {
                    break;
                }
            }
            outcomes
        })
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

/// Delete what the billing consumer declared on the shared broker.
async fn delete_billing_topology(exchange: &str, queue: &str) {
    let connection = require_rabbitmq().await;
    let (dead_letter_queue, dead_letter_exchange) =
        (format!("{queue}.dlq"), format!("{queue}.dlx"));
    delete_topology(
        &connection,
        &[queue, &dead_letter_queue],
        &[exchange, &dead_letter_exchange],
    )
    .await;
    // The connection goes with the test; a failed close changes nothing.
    let _ = connection.close(200, "OK".into()).await;
}

/// The broker between the relay and the billing consumer.
#[derive(Clone, Copy)]
enum BillingBroker {
    RabbitMq,
    Redis,
    /// NATS JetStream: the orders go to the subject `exchange`, in the
    /// stream named `queue`, which the consumer makes when missing.
    Nats,
}

impl BillingBroker {
    /// The billing consumer's flags for this broker, the orders going to
    /// `exchange` (the stream, on Redis) and billing reading `queue`.
    fn consumer_args(self, exchange: &str, queue: &str) -> Vec<String> {
        let mut args = vec!["--exchange".to_owned(), exchange.to_owned()];
        match self {
            BillingBroker::RabbitMq => {
                args.extend(["--amqp-url".to_owned(), amqp_url()]);
                args.extend(["--queue".to_owned(), queue.to_owned()]);
            }
            BillingBroker::Redis => args.extend(["--redis-url".to_owned(), redis_kit::redis_url()]),
            BillingBroker::Nats => {
                args.extend(["--nats-url".to_owned(), nats_kit::nats_url()]);
                args.extend(["--nats-stream".to_owned(), queue.to_owned()]);
            }
        }
        args
    }

    /// The relay's publisher to this broker.
    fn publisher(self) -> Box<dyn Publisher> {
        match self {
            BillingBroker::RabbitMq => Box::new(
                RabbitMqPublisher::new(RabbitMqPublisherConfig::new(amqp_url()))
                    .expect("a RabbitMQ publisher"),
            ),
            BillingBroker::Redis => Box::new(
                RedisPublisher::new(RedisPublisherConfig::new(RedisEndpoint::Server(
                    redis_kit::redis_url(),
                )))
                .expect("a Redis publisher"),
            ),
            BillingBroker::Nats => Box::new(
                NatsPublisher::new(NatsPublisherConfig::new(vec![nats_kit::nats_url()]))
                    .expect("a NATS publisher"),
            ),
        }
    }

    /// What the consumer prints once it consumes.
    fn consuming_line(self) -> &'static str {
        match self {
            BillingBroker::RabbitMq => "consuming queue",
            BillingBroker::Redis => "consuming stream",
            BillingBroker::Nats => "consuming subject",
        }
    }

    async fn require(self) {
        match self {
            BillingBroker::RabbitMq => drop(require_rabbitmq().await),
            BillingBroker::Redis => drop(redis_kit::require_redis().await),
            BillingBroker::Nats => drop(nats_kit::require_nats().await),
        }
    }

    /// Messages still to consume: the queue's depth, or the stream's
    /// entries the group has not read or not acknowledged.
    async fn backlog(self, exchange: &str, queue: &str) -> u64 {
        match self {
            BillingBroker::RabbitMq => queue_depth(queue).await,
            BillingBroker::Redis => {
                let mut connection = redis_kit::require_redis().await;
                redis_kit::group_backlog(&mut connection, exchange, "billing").await
            }
            BillingBroker::Nats => {
                let jetstream = nats_kit::require_nats().await;
                nats_kit::consumer_backlog(&jetstream, queue, "billing").await
            }
        }
    }

    /// Delete what the test made on the shared broker.
    async fn clean_up(self, exchange: &str, queue: &str) {
        match self {
            BillingBroker::RabbitMq => delete_billing_topology(exchange, queue).await,
            BillingBroker::Redis => {
                let mut connection = redis_kit::require_redis().await;
                redis_kit::delete_keys(
                    &mut connection,
                    &[exchange.to_owned(), format!("{exchange}.dlq")],
                )
                .await;
            }
            BillingBroker::Nats => {
                let jetstream = nats_kit::require_nats().await;
                nats_kit::TestStream::existing(&jetstream, queue)
                    .delete()
                    .await;
            }
        }
    }
}

#[tokio::test]
async fn billing_consumer_invoices_each_order_once_when_an_event_arrives_twice() {
    invoices_each_order_once_when_an_event_arrives_twice(BillingBroker::RabbitMq).await;
}

#[tokio::test]
async fn billing_consumer_on_redis_invoices_each_order_once_when_an_event_arrives_twice() {
    invoices_each_order_once_when_an_event_arrives_twice(BillingBroker::Redis).await;
}

/// The billing consumer, the relay (through `broker`) publishing the first
/// of two orders twice: one invoice per order, one duplicate ignored.
async fn invoices_each_order_once_when_an_event_arrives_twice(broker: BillingBroker) {
    broker.require().await;
    let producer = outbox_testkit::postgres().await;
    let billing = outbox_testkit::postgres().await;
    outbox::migrate(producer.pool())
        .await
        .expect("migrate the producer");
    let suffix = Uuid::now_v7().simple();
    let exchange = format!("orders-{suffix}");
    let queue = format!("billing-{suffix}");

    let mut args = vec![
        "--database-url".to_owned(),
        billing.url().to_owned(),
        "--exit-after".to_owned(),
        "3".to_owned(),
    ];
    args.extend(broker.consumer_args(&exchange, &queue));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut consumer = Example::spawn("billing-consumer", &args);
    let line = consumer.next_line().await;
    assert!(line.starts_with(broker.consuming_line()), "{line}");

    // Two orders, written as the orders service writes them, to this test's
    // own exchange (stream).
    let order_ids = [Uuid::now_v7(), Uuid::now_v7()];
    write_orders(
        producer.pool(),
        &exchange,
        &[(order_ids[0], 100), (order_ids[1], 200)],
    )
    .await;

    // The relay, with the first event published twice.
    let mut config = RelayConfig::default();
    config.poll_interval_max = Duration::from_millis(50);
    config.instance_id = Some("examples-test".to_owned());
    let republishing: Arc<dyn Publisher> = Arc::new(RepublishFirst {
        inner: broker.publisher(),
        republished: AtomicBool::new(false),
    });
    let relay = RelayService::builder()
        .database(producer.pool().clone())
        .broker(republishing)
        .config(config)
        .build()
        .expect("a relay");
    let stop_relay = CancellationToken::new();
    let relay_run = tokio::spawn(relay.run(stop_relay.clone()));

    let (status, stdout, consumer_log) = consumer.wait().await;
    stop_relay.cancel();
    let totals = relay_run
        .await
        .expect("the relay task")
        .expect("the relay runs");
    assert!(status.success(), "{status}\n{stdout}\n{consumer_log}");
    assert_eq!(totals.published, 2);
    assert!(
        stdout.contains(
            "stopped: 2 invoice(s) recorded, 1 duplicate(s) ignored, 0 retried, 0 dead-lettered, \
             0 database outage(s) waited out"
        ),
        "{stdout}"
    );

    let invoices: Vec<(Uuid, i64, i64)> = sqlx::query_as(
        "SELECT order_id, COUNT(*), SUM(amount_cents)::bigint FROM invoices GROUP BY order_id",
    )
    .fetch_all(billing.pool())
    .await
    .expect("read the invoices");
    let invoices: BTreeMap<Uuid, (i64, i64)> = invoices
        .into_iter()
        .map(|(order_id, count, amount)| (order_id, (count, amount)))
        .collect();
    let expected: BTreeMap<Uuid, (i64, i64)> =
        BTreeMap::from([(order_ids[0], (1, 100)), (order_ids[1], (1, 200))]);
    assert_eq!(invoices, expected, "exactly one invoice per order");
    assert_eq!(
        count(
            billing.pool(),
            "SELECT COUNT(*) FROM inbox_messages WHERE consumer = 'billing'"
        )
        .await,
        2
    );

    broker.clean_up(&exchange, &queue).await;
}

#[tokio::test]
async fn billing_consumer_stops_cleanly_on_sigterm() {
    require_rabbitmq().await;
    let billing = outbox_testkit::postgres().await;
    let suffix = Uuid::now_v7().simple();
    let exchange = format!("orders-{suffix}");
    let queue = format!("billing-{suffix}");
    let amqp = amqp_url();
    let mut consumer = Example::spawn(
        "billing-consumer",
        &[
            "--database-url",
            billing.url(),
            "--amqp-url",
            &amqp,
            "--exchange",
            &exchange,
            "--queue",
            &queue,
        ],
    );
    let line = consumer.next_line().await;
    assert!(line.starts_with("consuming queue"), "{line}");
    consumer.terminate();
    let (status, stdout, log) = consumer.wait().await;
    assert!(
        status.success(),
        "stopped on SIGTERM with {status}; stderr:\n{log}"
    );
    assert!(
        stdout.contains("stopped: 0 invoice(s) recorded, 0 duplicate(s) ignored"),
        "{stdout}"
    );
    delete_billing_topology(&exchange, &queue).await;
}

#[tokio::test]
async fn two_billing_consumers_started_at_once_on_a_fresh_database_both_consume() {
    require_rabbitmq().await;
    let billing = outbox_testkit::postgres().await;
    let suffix = Uuid::now_v7().simple();
    let exchange = format!("orders-{suffix}");
    let queue = format!("billing-{suffix}");
    let amqp = amqp_url();
    let args = [
        "--database-url",
        billing.url(),
        "--amqp-url",
        &amqp,
        "--exchange",
        &exchange,
        "--queue",
        &queue,
    ];
    let mut first = Example::spawn("billing-consumer", &args);
    let mut second = Example::spawn("billing-consumer", &args);
    let (first_line, second_line) = tokio::join!(first.next_line(), second.next_line());
    assert!(first_line.starts_with("consuming queue"), "{first_line}");
    assert!(second_line.starts_with("consuming queue"), "{second_line}");
    assert_eq!(
        count(billing.pool(), "SELECT COUNT(*) FROM invoices").await,
        0,
        "the invoices table exists"
    );

    for consumer in [first, second] {
        consumer.terminate();
        let (status, stdout, log) = consumer.wait().await;
        assert!(
            status.success(),
            "stopped on SIGTERM with {status}; stderr:\n{log}"
        );
        assert!(
            stdout.contains("stopped: 0 invoice(s) recorded"),
            "{stdout}"
        );
    }
    delete_billing_topology(&exchange, &queue).await;
}

#[tokio::test]
async fn billing_consumer_killed_mid_batch_invoices_each_order_once() {
    killed_mid_batch_invoices_each_order_once(BillingBroker::RabbitMq, 1).await;
}

#[tokio::test]
async fn billing_consumer_on_redis_killed_three_times_invoices_each_order_once() {
    killed_mid_batch_invoices_each_order_once(BillingBroker::Redis, 3).await;
}

/// On NATS the stream keeps one copy of each order's event (the relay's
/// three publishes share one `Nats-Msg-Id`); the redeliveries come from the
/// kills, the messages a killed consumer held unacknowledged.
#[tokio::test]
async fn billing_consumer_on_nats_killed_three_times_invoices_each_order_once() {
    killed_mid_batch_invoices_each_order_once(BillingBroker::Nats, 3).await;
}

/// A batching billing consumer SIGKILLed `kills` times while its batches
/// run, with every order delivered three times through `broker`: after a
/// restart, each order has exactly one invoice, the inbox one row per
/// order, and the queue (the stream's group) is drained without a dead
/// letter. The orders are written first, then relayed, then consumed, as
/// in production.
async fn killed_mid_batch_invoices_each_order_once(broker: BillingBroker, kills: usize) {
    const ORDERS: usize = 600;
    const COPIES: usize = 3;
    broker.require().await;
    let producer = outbox_testkit::postgres().await;
    let billing = outbox_testkit::postgres().await;
    outbox::migrate(producer.pool())
        .await
        .expect("migrate the producer");
    let suffix = Uuid::now_v7().simple();
    let exchange = format!("orders-{suffix}");
    let queue = format!("billing-{suffix}");
    let mut args = vec![
        "--database-url".to_owned(),
        billing.url().to_owned(),
        "--batch-size".to_owned(),
        "50".to_owned(),
    ];
    args.extend(broker.consumer_args(&exchange, &queue));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // The topology, from a first consumer that stops at once.
    let consumer = Example::spawn("billing-consumer", &args);
    let mut consumer = consumer;
    let line = consumer.next_line().await;
    assert!(line.starts_with(broker.consuming_line()), "{line}");
    consumer.terminate();
    let (status, _, log) = consumer.wait().await;
    assert!(status.success(), "{status}\n{log}");

    // The writers: every order with its event, in transactions of 50.
    let order_ids: Vec<Uuid> = (0..ORDERS).map(|_| Uuid::now_v7()).collect();
    for (chunk, ids) in order_ids.chunks(50).enumerate() {
        let orders: Vec<(Uuid, i64)> = ids
            .iter()
            .zip(0_i64..)
            .map(|(id, index)| (*id, 100 + 50 * chunk as i64 + index))
            .collect();
        write_orders(producer.pool(), &exchange, &orders).await;
    }

    // The relay publishes each of them three times, then stops.
    let publisher = broker.publisher();
    let mut config = RelayConfig::default();
    config.poll_interval_max = Duration::from_millis(50);
    config.instance_id = Some(format!("kill-test-{suffix}"));
    let thrice: Arc<dyn Publisher> = Arc::new(PublishEach::<COPIES> { inner: publisher });
    let relay = RelayService::builder()
        .database(producer.pool().clone())
        .broker(thrice)
        .config(config)
        .build()
        .expect("a relay");
    let stop_relay = CancellationToken::new();
    let relay_run = tokio::spawn(relay.run(stop_relay.clone()));
    let relayed = wait_for(PATIENCE, || async {
        count(
            producer.pool(),
            "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'",
        )
        .await
            == ORDERS as i64
    })
    .await;
    stop_relay.cancel();
    let totals = relay_run
        .await
        .expect("the relay task")
        .expect("the relay runs");
    assert!(
        relayed,
        "the relay published {} of {ORDERS}",
        totals.published
    );

    // Consumers killed while their batches run, each after the one before
    // it recorded more invoices.
    let mut invoiced_at_kill = 0;
    for kill in 0..kills {
        let consumer = Example::spawn("billing-consumer", &args);
        let mut consumer = consumer;
        let line = consumer.next_line().await;
        assert!(line.starts_with(broker.consuming_line()), "{line}");
        let progressed = wait_for(PATIENCE, || async {
            count(billing.pool(), "SELECT COUNT(*) FROM invoices").await > invoiced_at_kill
        })
        .await;
        assert!(progressed, "consumer {kill} recorded no invoice");
        consumer.kill().await;
        invoiced_at_kill = count(billing.pool(), "SELECT COUNT(*) FROM invoices").await;
        assert!(
            invoiced_at_kill < ORDERS as i64,
            "every order was invoiced before kill {kill}: the test did not kill mid-stream"
        );
    }

    // A new consumer finishes the queue.
    let consumer = Example::spawn("billing-consumer", &args);
    let mut consumer = consumer;
    let line = consumer.next_line().await;
    assert!(line.starts_with(broker.consuming_line()), "{line}");
    let drained = wait_for(PATIENCE, || async {
        count(billing.pool(), "SELECT COUNT(*) FROM invoices").await == ORDERS as i64
            && broker.backlog(&exchange, &queue).await == 0
    })
    .await;
    consumer.terminate();
    let (status, stdout, log) = consumer.wait().await;
    assert!(status.success(), "{status}\n{log}");
    assert!(
        drained,
        "the queue was not drained: {} invoice(s), {} left to consume; {stdout}\n{log}",
        count(billing.pool(), "SELECT COUNT(*) FROM invoices").await,
        broker.backlog(&exchange, &queue).await
    );
    assert!(stdout.contains("0 dead-lettered"), "{stdout}");
    assert!(
        log.contains("invoices recorded"),
        "no batch reached the handler's handle_batch:\n{log}"
    );

    let per_order: Vec<(Uuid, i64)> =
        sqlx::query_as("SELECT order_id, COUNT(*) FROM invoices GROUP BY order_id")
            .fetch_all(billing.pool())
            .await
            .expect("read the invoices");
    let per_order: BTreeMap<Uuid, i64> = per_order.into_iter().collect();
    let expected: BTreeMap<Uuid, i64> = order_ids.iter().map(|id| (*id, 1)).collect();
    assert_eq!(per_order, expected, "exactly one invoice per order");
    assert_eq!(
        count(
            billing.pool(),
            "SELECT COUNT(*) FROM inbox_messages WHERE consumer = 'billing'"
        )
        .await,
        ORDERS as i64
    );
    broker.clean_up(&exchange, &queue).await;
}

/// Poll `condition` until it holds or `patience` passes; whether it held.
async fn wait_for<F, Fut>(patience: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + patience;
    while tokio::time::Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Messages in `queue`, ready or delivered and not yet acknowledged.
async fn queue_depth(queue: &str) -> u64 {
    let queue = queue.to_owned();
    tokio::task::spawn_blocking(move || outbox_testkit::rabbitmq::queue_depth(&queue))
        .await
        .expect("read the queue depth")
}
