//! The RabbitMQ objects the consumer needs: the relay's exchange, the
//! billing queue, and the binding that routes `order.created` into it.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties, ExchangeKind};

use crate::invoices::ORDER_CREATED;

/// Declare the exchange (durable, topic), the queue (durable) and bind them
/// for `order.created`. Declaring what exists with the same settings
/// changes nothing.
///
/// # Errors
/// A name longer than 255 bytes, an unreachable broker, or an object that
/// exists with other settings.
pub async fn declare(
    amqp_url: &str,
    exchange: &str,
    queue: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let exchange = amqp_name("exchange", exchange)?;
    let queue = amqp_name("queue", queue)?;
    let connection = Connection::connect(amqp_url, ConnectionProperties::default())
        .await
        .map_err(|error| format!("cannot connect to rabbitmq: {error}"))?;
    let channel = connection.create_channel().await?;
    channel
        .exchange_declare(
            exchange.clone(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    channel
        .queue_declare(
            queue.clone(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    channel
        .queue_bind(
            queue,
            exchange,
            ShortString::from(ORDER_CREATED),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    connection.close(200, ShortString::from("OK")).await?;
    Ok(())
}

fn amqp_name(what: &str, name: &str) -> Result<ShortString, String> {
    if name.is_empty() {
        return Err(format!("the {what} name is empty"));
    }
    ShortString::try_new(name).map_err(|_| format!("the {what} name is longer than 255 bytes"))
}
