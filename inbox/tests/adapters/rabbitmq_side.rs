//! The RabbitMQ side of the suite: an exchange and queue of each test's own
//! on the real RabbitMQ (`outbox_testkit::rabbitmq`; `OUTBOX_TEST_AMQP_URL`
//! overrides the loopback default), messages published exactly as the
//! relay publishes them (`cloudEvents:` headers, `message_id`, `type`,
//! `docs/wire-format.md`), and [`RabbitMqInboxConsumer`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, Queue};
use outbox_inbox::rabbitmq::{
    ATTEMPTS_HEADER, DEAD_LETTER_QUEUE_HEADER, DEAD_LETTER_REASON_HEADER, RabbitMqConsumerConfig,
    RabbitMqInboxConsumer,
};
use outbox_inbox::{Handler, Inbox, InboxBackend};
use outbox_testkit::rabbitmq::{
    amqp_url, declare_bound_queue, declare_topic_exchange, delete_topology_blocking, headers,
    queue_depth, require_rabbitmq,
};
use outbox_testkit::unique_name;

use crate::broker::{BrokerSide, DeadLetter, Message, Running, Settings};

/// The relay's side: a topic exchange with the consumer's queue bound to
/// it, and a publisher writing messages as the relay does.
pub struct RabbitMqSide {
    connection: Connection,
    channel: Channel,
    exchange: String,
    pub queue: String,
    published: AtomicU64,
}

impl RabbitMqSide {
    /// A side whose exchange and queue are named but not declared, for a
    /// consumer that declares them itself; deleted on drop all the same.
    pub async fn undeclared(prefix: &str) -> RabbitMqSide {
        let connection = require_rabbitmq().await;
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        RabbitMqSide {
            connection,
            channel,
            exchange: unique_name(&format!("{prefix}-x")),
            queue: unique_name(prefix),
            published: AtomicU64::new(0),
        }
    }

    /// The exchange the side publishes to.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    fn dead_letter_queue(&self) -> String {
        format!("{}.dlq", self.queue)
    }

    /// The consumer configuration for `settings`.
    pub fn config(&self, settings: Settings) -> RabbitMqConsumerConfig {
        let mut config = RabbitMqConsumerConfig::new(amqp_url(), self.queue.clone());
        config.prefetch = settings.in_flight;
        config.max_attempts = settings.max_attempts;
        config.retry_base_delay = settings.retry_base_delay;
        config.retry_max_delay = settings.retry_max_delay;
        config.batch_size = settings.batch_size;
        config.batch_wait = crate::broker::BATCH_WAIT;
        config
    }

    /// Publish one message with `cloudEvents:` headers, confirmed and
    /// routed.
    async fn publish_one(&self, message: &Message) {
        let mut attributes = BTreeMap::from([
            ("specversion", "1.0".to_owned()),
            ("type", message.event_type.clone()),
            ("source", message.source.clone()),
            ("time", "2026-01-01T00:00:00Z".to_owned()),
            ("datacontenttype", "application/json".to_owned()),
            ("partitionkey", message.key.clone()),
            ("aggregatetype", message.aggregate_type.clone()),
            ("eventversion", message.event_version.clone()),
        ]);
        if let Some(id) = &message.id {
            attributes.insert("id", id.clone());
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
            .with_type(message.event_type.as_str().into())
            .with_timestamp(1_767_225_600)
            .with_headers(headers);
        if let Some(id) = &message.id {
            properties = properties.with_message_id(id.as_str().into());
        }
        let confirm = self
            .channel
            .basic_publish(
                self.exchange.as_str().into(),
                message.event_type.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                &message.body,
                properties,
            )
            .await
            .expect("publish");
        let confirmation = confirm.await.expect("confirm");
        assert!(confirmation.is_ack(), "publish not acked");
        assert!(confirmation.take_message().is_none(), "message unroutable");
    }

    /// A passive declare of `queue`, `None` while it does not exist yet (a
    /// passive declare of a missing queue closes its channel, so it gets
    /// its own).
    async fn declared(&self, queue: &str) -> Option<Queue> {
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
                Some(found)
            }
            Err(error) if error.to_string().contains("NOT_FOUND") => None,
            Err(error) => panic!("queue {queue}: {error}"),
        }
    }
}

impl BrokerSide for RabbitMqSide {
    const ADAPTER: &'static str = "rabbitmq";
    const ORDERS_BY_KEY: bool = false;
    const COUNTS_ATTEMPTS: bool = true;

    async fn create(prefix: &str, _partitions: i32) -> RabbitMqSide {
        let side = RabbitMqSide::undeclared(prefix).await;
        declare_topic_exchange(&side.channel, &side.exchange).await;
        declare_bound_queue(&side.channel, &side.exchange, &side.queue).await;
        side
    }

    async fn publish(&self, messages: &[Message]) {
        for message in messages {
            self.publish_one(message).await;
            self.published.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn published(&self) -> u64 {
        self.published.load(Ordering::SeqCst)
    }

    fn start<DB: InboxBackend, H: Handler<DB>>(
        &self,
        inbox: Inbox<DB>,
        handler: H,
        settings: Settings,
    ) -> Running {
        let consumer =
            RabbitMqInboxConsumer::new(inbox, handler, self.config(settings)).expect("consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    /// Published, less what is still in the queue (ready or unacked).
    async fn acknowledged(&self) -> u64 {
        let queue = self.queue.clone();
        let in_queue = tokio::task::spawn_blocking(move || queue_depth(&queue))
            .await
            .expect("queue depth");
        self.published().saturating_sub(in_queue)
    }

    async fn dead_letter_count(&self) -> u64 {
        self.declared(&self.dead_letter_queue())
            .await
            .map_or(0, |queue| u64::from(queue.message_count()))
    }

    /// Take the dead letters off their queue.
    async fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        let mut dead_letters = Vec::new();
        let queue = self.dead_letter_queue();
        while dead_letters.len() < count {
            let message = self
                .channel
                .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
                .await
                .expect("basic_get")
                .unwrap_or_else(|| panic!("only {} of {count} dead letters", dead_letters.len()));
            let headers = headers(&message.delivery.properties);
            let header = |name: &str| {
                headers
                    .get(name)
                    .unwrap_or_else(|| panic!("no {name} header: {headers:?}"))
                    .clone()
            };
            dead_letters.push(DeadLetter {
                reason: header(DEAD_LETTER_REASON_HEADER),
                origin: header(DEAD_LETTER_QUEUE_HEADER),
                attempts: Some(header(ATTEMPTS_HEADER).parse().expect("attempts")),
                key: headers.get("cloudEvents:partitionkey").cloned(),
                source: headers.get("cloudEvents:source").cloned(),
                body: message.delivery.data.clone(),
            });
        }
        dead_letters
    }

    fn origin_of(&self, _index: u64) -> String {
        self.queue.clone()
    }
}

/// Delete the queues and exchanges of the test, also when it failed.
impl Drop for RabbitMqSide {
    fn drop(&mut self) {
        let queues = vec![self.queue.clone(), self.dead_letter_queue()];
        let exchanges = vec![self.exchange.clone(), format!("{}.dlx", self.queue)];
        delete_topology_blocking(queues, exchanges);
    }
}
