//! The RabbitMQ side of the inbox tests: an exchange and queue of each
//! test's own on the real RabbitMQ (`outbox_testkit::rabbitmq`), and
//! messages published exactly as the relay publishes them (`cloudEvents:`
//! headers, `message_id`, `type`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection};
use outbox::Event;
use outbox_inbox::rabbitmq::RabbitMqConsumerConfig;
use outbox_testkit::rabbitmq::{
    amqp_url, declare_bound_queue, declare_topic_exchange, delete_topology_blocking, headers,
    require_rabbitmq,
};
use outbox_testkit::unique_name;

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
        let connection = require_rabbitmq().await;
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let exchange = unique_name(&format!("{prefix}-x"));
        let queue = unique_name(prefix);
        declare_topic_exchange(&channel, &exchange).await;
        declare_bound_queue(&channel, &exchange, &queue).await;
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
            let headers = headers(&message.delivery.properties);
            messages.push((headers, message.delivery.data.clone()));
        }
        messages
    }
}

/// Delete the queues and exchanges of the test, also when it failed.
impl Drop for Broker {
    fn drop(&mut self) {
        let queues = vec![self.queue.clone(), self.dead_letter_queue()];
        let exchanges = vec![self.exchange.clone(), format!("{}.dlx", self.queue)];
        delete_topology_blocking(queues, exchanges);
    }
}
