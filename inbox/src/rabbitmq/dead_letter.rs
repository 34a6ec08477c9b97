//! [`DeadLetterExchange`]: publishes the messages the delivery policy gives
//! up on to the dead-letter exchange, confirmed.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::types::{AMQPValue, LongString, ShortString};
use lapin::{BasicProperties, Channel};
use outbox::broker::rabbitmq::{ConfirmFailure, MANDATORY, confirmed};

use super::config::RabbitMqConsumerConfig;
use super::headers::truncated;
use crate::error::Error;

/// Header counting the failed handler attempts of a message: read when it
/// arrives (absent = 0), written on its dead letter.
pub const ATTEMPTS_HEADER: &str = "x-outbox-attempts";

/// Header of a dead letter: why it was dead-lettered.
pub const DEAD_LETTER_REASON_HEADER: &str = "x-outbox-dead-letter-reason";

/// Header of a dead letter: the queue it was consumed from.
pub const DEAD_LETTER_QUEUE_HEADER: &str = "x-outbox-dead-letter-queue";

/// Where the dead letters of one consumer go.
#[derive(Debug)]
pub(crate) struct DeadLetterExchange {
    exchange: String,
    queue: String,
    confirm_timeout: Duration,
}

impl DeadLetterExchange {
    pub(crate) fn new(config: &RabbitMqConsumerConfig) -> Self {
        DeadLetterExchange {
            exchange: config.dead_letter_exchange_name(),
            queue: config.queue.clone(),
            confirm_timeout: config.connect_timeout,
        }
    }

    /// The queue the consumer reads.
    pub(crate) fn queue(&self) -> &str {
        &self.queue
    }

    /// Publish `delivery` to the dead-letter exchange (persistent,
    /// `mandatory`, with its routing key) with the original body, properties
    /// and headers plus the reason, the queue and the attempts; the
    /// exchange's name once the broker confirmed it.
    ///
    /// # Errors
    /// [`Error::Amqp`] when the channel fails; [`Error::DeadLetter`] when the
    /// broker nacks the message, cannot route it or does not confirm it in
    /// time.
    pub(crate) async fn publish(
        &self,
        publisher: &Channel,
        delivery: &Delivery,
        reason: &str,
        attempts: u32,
    ) -> Result<String, Error> {
        let mut headers = delivery.properties.headers().clone().unwrap_or_default();
        headers.insert(
            ShortString::from(DEAD_LETTER_REASON_HEADER),
            AMQPValue::LongString(LongString::from(truncated(reason))),
        );
        headers.insert(
            ShortString::from(DEAD_LETTER_QUEUE_HEADER),
            AMQPValue::LongString(LongString::from(self.queue.as_str())),
        );
        headers.insert(
            ShortString::from(ATTEMPTS_HEADER),
            AMQPValue::LongLongInt(i64::from(attempts)),
        );
        let properties = delivery
            .properties
            .clone()
            .with_delivery_mode(2)
            .with_headers(headers);
        let exchange = ShortString::try_new(self.exchange.as_str()).map_err(|_| {
            Error::DeadLetter("the dead-letter exchange name is too long".to_owned())
        })?;
        publish_confirmed(
            publisher,
            exchange,
            delivery.routing_key.clone(),
            &delivery.data,
            properties,
            self.confirm_timeout,
        )
        .await?;
        Ok(self.exchange.clone())
    }
}

/// Publish one message (`mandatory`) and wait for its confirm; an
/// unroutable, nacked or unconfirmed message is an error.
async fn publish_confirmed(
    channel: &Channel,
    exchange: ShortString,
    routing_key: ShortString,
    body: &[u8],
    properties: BasicProperties,
    timeout: Duration,
) -> Result<(), Error> {
    let publishing = async {
        let confirm = channel
            .basic_publish(
                exchange.clone(),
                routing_key.clone(),
                MANDATORY,
                body,
                properties,
            )
            .await?;
        confirm.await
    };
    let confirmation = match tokio::time::timeout(timeout, publishing).await {
        Ok(answer) => answer.map_err(Error::amqp)?,
        Err(_elapsed) => {
            return Err(Error::DeadLetter(
                ConfirmFailure::NoConfirm { timeout }.to_string(),
            ));
        }
    };
    confirmed(confirmation, exchange.as_str(), routing_key.as_str())
        .map_err(|failure| Error::DeadLetter(failure.to_string()))
}
