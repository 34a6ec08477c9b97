//! The queues and exchanges a consumer needs: its queue, which must exist
//! unless the consumer declares it with its bindings, and the dead-letter
//! exchange, declared with its queue by default.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

use super::config::{MAX_NAME_BYTES, RabbitMqConsumerConfig};

/// The consumer's queue, its name: checked with a passive declare, or,
/// with bindings configured, declared (durable) and bound to each binding's
/// exchange, declared as a durable topic exchange. Declaring what exists
/// with the same settings changes nothing; other settings are the broker's
/// `PRECONDITION_FAILED`.
pub(crate) async fn open_queue(
    channel: &Channel,
    config: &RabbitMqConsumerConfig,
) -> Result<ShortString, lapin::Error> {
    let queue = short(&config.queue)?;
    let declare = QueueDeclareOptions {
        passive: config.bindings.is_empty(),
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue.clone(), declare, FieldTable::default())
        .await?;
    for binding in &config.bindings {
        let exchange = short(&binding.exchange)?;
        declare_durable_exchange(channel, exchange.clone(), ExchangeKind::Topic).await?;
        channel
            .queue_bind(
                queue.clone(),
                exchange,
                short(&binding.routing_key)?,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok(queue)
}

/// Check that a configured dead-letter exchange exists; without one,
/// declare the durable fanout exchange `<queue>.dlx` bound to the durable
/// queue `<queue>.dlq`.
pub(crate) async fn declare_dead_letter_topology(
    channel: &Channel,
    config: &RabbitMqConsumerConfig,
) -> Result<(), lapin::Error> {
    let exchange = short(&config.dead_letter_exchange_name())?;
    if config.dead_letter_exchange.is_some() {
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        return channel
            .exchange_declare(
                exchange,
                ExchangeKind::Fanout,
                passive,
                FieldTable::default(),
            )
            .await;
    }
    declare_durable_exchange(channel, exchange.clone(), ExchangeKind::Fanout).await?;
    let dead_letter_queue = short(&config.default_dead_letter_queue_name())?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(dead_letter_queue.clone(), durable, FieldTable::default())
        .await?;
    channel
        .queue_bind(
            dead_letter_queue,
            exchange,
            ShortString::from(""),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Declare the durable exchange `exchange` of `kind`; nothing changes when
/// it exists with the same settings.
async fn declare_durable_exchange(
    channel: &Channel,
    exchange: ShortString,
    kind: ExchangeKind,
) -> Result<(), lapin::Error> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    channel
        .exchange_declare(exchange, kind, durable, FieldTable::default())
        .await
}

fn short(name: &str) -> Result<ShortString, lapin::Error> {
    ShortString::try_new(name).map_err(|_| {
        lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("AMQP name longer than {MAX_NAME_BYTES} bytes: {name:.40}..."),
        ))
    })
}
