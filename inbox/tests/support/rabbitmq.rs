//! The RabbitMQ side of the inbox tests: a real RabbitMQ
//! (`OUTBOX_TEST_AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`),
//! an exchange and queue of each test's own, and messages published
//! exactly as the relay publishes them (`cloudEvents:` headers,
//! `message_id`, `type`). A broker that cannot be reached fails the test
//! with a message naming it.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox::Event;
use outbox_inbox::rabbitmq::RabbitMqConsumerConfig;

fn amqp_url() -> String {
    std::env::var("OUTBOX_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

pub fn unique_name(prefix: &str) -> String {
    format!("outbox-inbox-{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// The relay's side: a topic exchange (the event's `topic`) with the
/// consumer's queue bound to it, and a publisher writing messages as the
/// relay does.
pub struct Broker {
    connection: Connection,
    channel: Channel,
    exchange: String,
    pub queue: String,
}

impl Broker {
    pub async fn new(prefix: &str) -> Broker {
        let url = amqp_url();
        let connected = tokio::time::timeout(
            Duration::from_secs(10),
            Connection::connect(&url, ConnectionProperties::default()),
        )
        .await;
        let connection = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => panic!(
                "RabbitMQ is not reachable at {url}: {error}; start the test services with `scripts/test.sh --services-only`"
            ),
            Err(_) => panic!(
                "RabbitMQ at {url} did not answer within 10 s; start the test services with `scripts/test.sh --services-only`"
            ),
        };
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let exchange = unique_name(&format!("{prefix}-x"));
        let queue = unique_name(prefix);
        channel
            .exchange_declare(
                exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("declare exchange");
        channel
            .queue_declare(
                queue.as_str().into(),
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
                queue.as_str().into(),
                exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind queue");
        Broker {
            connection,
            channel,
            exchange,
            queue,
        }
    }

    pub fn config(&self) -> RabbitMqConsumerConfig {
        let mut config = RabbitMqConsumerConfig::new(amqp_url(), self.queue.clone());
        config.retry_base_delay = Duration::from_millis(50);
        config.retry_max_delay = Duration::from_millis(200);
        config
    }

    pub fn dead_letter_queue(&self) -> String {
        format!("{}.dlq", self.queue)
    }

    /// Publish one `payment.received`-like message as the relay would;
    /// `id` `None` leaves out both the `message_id` property and the
    /// `cloudEvents:id` header.
    pub async fn publish_raw(&self, id: Option<&str>, event_type: &str, body: &[u8]) {
        let attributes = BTreeMap::from([
            ("source", "/payments".to_owned()),
            ("partitionkey", "p".to_owned()),
            ("aggregatetype", "payment".to_owned()),
            ("eventversion", "1".to_owned()),
        ]);
        self.publish_attributes(id, event_type, attributes, body)
            .await;
    }

    /// Publish `event` with CloudEvents id `id` as the relay would.
    pub async fn publish_event<E: Event>(&self, id: &str, event: &E) {
        let attributes = BTreeMap::from([
            ("source", E::SOURCE.to_owned()),
            ("partitionkey", event.aggregate_id()),
            ("aggregatetype", E::AGGREGATE_TYPE.to_owned()),
            ("eventversion", E::EVENT_VERSION.to_string()),
        ]);
        let body = event.payload().expect("payload").get().as_bytes().to_vec();
        self.publish_attributes(Some(id), E::EVENT_TYPE, attributes, &body)
            .await;
    }

    /// Publish one message with `cloudEvents:` headers for `attributes` and
    /// the attributes every event has, confirmed and routed.
    async fn publish_attributes(
        &self,
        id: Option<&str>,
        event_type: &str,
        mut attributes: BTreeMap<&str, String>,
        body: &[u8],
    ) {
        attributes.extend([
            ("specversion", "1.0".to_owned()),
            ("type", event_type.to_owned()),
            ("time", "2026-01-01T00:00:00Z".to_owned()),
            ("datacontenttype", "application/json".to_owned()),
        ]);
        if let Some(id) = id {
            attributes.insert("id", id.to_owned());
        }
        let mut headers = FieldTable::default();
        for (name, value) in attributes {
            headers.insert(
                ShortString::from(format!("cloudEvents:{name}")),
                AMQPValue::LongString(LongString::from(value)),
            );
        }
        let mut properties = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_type(event_type.into())
            .with_timestamp(1_767_225_600)
            .with_headers(headers);
        if let Some(id) = id {
            properties = properties.with_message_id(id.into());
        }
        let confirm = self
            .channel
            .basic_publish(
                self.exchange.as_str().into(),
                event_type.into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                body,
                properties,
            )
            .await
            .expect("publish");
        let confirmation = confirm.await.expect("confirm");
        assert!(confirmation.is_ack(), "publish not acked");
        assert!(confirmation.take_message().is_none(), "message unroutable");
    }

    /// Ready messages in `queue`; 0 while it does not exist yet (a passive
    /// declare of a missing queue closes its channel, so it gets its own).
    pub async fn message_count(&self, queue: &str) -> u32 {
        let channel = self.connection.create_channel().await.expect("channel");
        let declared = channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        match declared {
            Ok(found) => {
                let _ = channel.close(200, "OK".into()).await;
                found.message_count()
            }
            Err(error) if error.to_string().contains("NOT_FOUND") => 0,
            Err(error) => panic!("queue {queue}: {error}"),
        }
    }

    /// Take every message of the dead-letter queue: (headers as text, body).
    pub async fn take_dead_letters(&self) -> Vec<(HashMap<String, String>, Vec<u8>)> {
        let mut messages = Vec::new();
        let queue = self.dead_letter_queue();
        while let Some(message) = self
            .channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic_get")
        {
            let headers = message
                .delivery
                .properties
                .headers()
                .as_ref()
                .map(|table| {
                    table
                        .inner()
                        .iter()
                        .map(|(name, value)| (name.to_string(), text(value)))
                        .collect()
                })
                .unwrap_or_default();
            messages.push((headers, message.delivery.data.clone()));
        }
        messages
    }
}

/// Delete the queues and exchanges of the test, also when it failed (on a
/// thread of its own: `Drop` cannot await).
impl Drop for Broker {
    fn drop(&mut self) {
        let queues = [self.queue.clone(), self.dead_letter_queue()];
        let exchanges = [self.exchange.clone(), format!("{}.dlx", self.queue)];
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
                let Ok(Ok(connection)) =
                    tokio::time::timeout(Duration::from_secs(5), connecting).await
                else {
                    eprintln!("cannot connect to RabbitMQ to delete the test queues {queues:?}");
                    return;
                };
                if let Ok(channel) = connection.create_channel().await {
                    for queue in &queues {
                        let _ = channel
                            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                            .await;
                    }
                    for exchange in &exchanges {
                        let _ = channel
                            .exchange_delete(
                                exchange.as_str().into(),
                                ExchangeDeleteOptions::default(),
                            )
                            .await;
                    }
                }
                let _ = connection.close(200, "OK".into()).await;
            });
        });
        let _ = cleanup.join();
    }
}

pub fn text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(text) => String::from_utf8_lossy(text.as_bytes()).into_owned(),
        AMQPValue::ShortString(text) => text.to_string(),
        AMQPValue::LongLongInt(number) => number.to_string(),
        AMQPValue::LongInt(number) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// Close, on the broker's side, every connection whose client name
/// contains `name` (as a broker restart or a network cut would drop it).
pub fn close_connections_named(name: &str) -> usize {
    let listing = std::process::Command::new("rabbitmqctl")
        .args([
            "list_connections",
            "--quiet",
            "--no-table-headers",
            "pid",
            "client_properties",
        ])
        .output()
        .unwrap_or_else(|error| {
            panic!("rabbitmqctl (of the RabbitMQ test service) cannot be run: {error}")
        });
    assert!(
        listing.status.success(),
        "rabbitmqctl list_connections failed: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    let mut closed = 0;
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        if !line.contains(name) {
            continue;
        }
        let Some(pid) = line.split('\t').next() else {
            continue;
        };
        let closing = std::process::Command::new("rabbitmqctl")
            .args([
                "close_connection",
                pid.trim(),
                "closed by the reconnect test",
            ])
            .output()
            .expect("rabbitmqctl close_connection");
        assert!(
            closing.status.success(),
            "rabbitmqctl close_connection {pid} failed: {}",
            String::from_utf8_lossy(&closing.stderr)
        );
        closed += 1;
    }
    closed
}

/// Messages in `queue`, ready or delivered and not yet acknowledged, as
/// the broker counts them (`rabbitmqctl list_queues`).
pub fn queue_depth(queue: &str) -> u64 {
    let listing = std::process::Command::new("rabbitmqctl")
        .args([
            "list_queues",
            "--quiet",
            "--no-table-headers",
            "name",
            "messages",
        ])
        .output()
        .unwrap_or_else(|error| {
            panic!("rabbitmqctl (of the RabbitMQ test service) cannot be run: {error}")
        });
    assert!(
        listing.status.success(),
        "rabbitmqctl list_queues failed: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .find_map(|line| {
            let (name, messages) = line.split_once('\t')?;
            (name.trim() == queue).then(|| messages.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("rabbitmqctl does not list queue {queue}"))
}
