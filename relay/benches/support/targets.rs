//! A RabbitMQ exchange and queue of a bench's own, through
//! `outbox_testkit::rabbitmq`.

use lapin::Connection;
use outbox_testkit::rabbitmq;

use super::events::unique_name;

/// An AMQP exchange with a durable queue bound to it (`#`), so that
/// mandatory messages are routed.
pub struct AmqpTarget {
    connection: Connection,
    pub exchange: String,
    pub queue: String,
}

pub async fn amqp_target(prefix: &str) -> AmqpTarget {
    let connection = rabbitmq::require_rabbitmq().await;
    let channel = connection.create_channel().await.expect("channel");
    let exchange = unique_name(prefix);
    let queue = format!("{exchange}.all");
    rabbitmq::declare_topic_exchange(&channel, &exchange).await;
    rabbitmq::declare_bound_queue(&channel, &exchange, &queue).await;
    AmqpTarget {
        connection,
        exchange,
        queue,
    }
}

impl AmqpTarget {
    pub async fn remove(self) {
        rabbitmq::delete_topology(&self.connection, &[&self.queue], &[&self.exchange]).await;
        let _ = self.connection.close(200, "bye".into()).await;
    }
}
