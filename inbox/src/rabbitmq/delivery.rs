//! One RabbitMQ delivery through the delivery policy: [`RabbitMqDelivery`]
//! is the delivery as the policy sees it, [`deliver`] runs it and acks or
//! requeues it by the policy's settlement.

use std::sync::Arc;
use std::time::Duration;

use lapin::Channel;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions};
use lapin::types::ShortString;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::dead_letter::{ATTEMPTS_HEADER, DeadLetterExchange};
use super::headers::{header_count, text_headers};
use crate::backend::InboxBackend;
use crate::error::{DecodeError, Error};
use crate::handler::Handler;
use crate::incoming::IncomingEvent;
use crate::policy::{BrokerMessage, DeliveryPolicy, Settlement};

/// How long an ack or a nack may take.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// A delivery with the channel and exchange of its dead letter.
struct RabbitMqDelivery<'a> {
    delivery: &'a Delivery,
    publisher: &'a Channel,
    dead_letters: &'a DeadLetterExchange,
}

impl BrokerMessage for RabbitMqDelivery<'_> {
    fn incoming(&self) -> Result<IncomingEvent, DecodeError> {
        let properties = &self.delivery.properties;
        IncomingEvent::from_amqp(
            text_headers(properties.headers().as_ref()),
            properties.message_id().as_ref().map(ShortString::as_str),
            properties.kind().as_ref().map(ShortString::as_str),
            &self.delivery.data,
        )
    }

    /// The [`ATTEMPTS_HEADER`] of the message, 0 when absent.
    fn previous_attempts(&self) -> u32 {
        self.delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|table| table.inner().get(ATTEMPTS_HEADER))
            .and_then(header_count)
            .unwrap_or(0)
    }

    async fn dead_letter(&self, reason: &str, attempts: u32) -> Result<String, Error> {
        self.dead_letters
            .publish(self.publisher, self.delivery, reason, attempts)
            .await
    }
}

/// Run `delivery` through `policy`, then ack it when the policy finished it
/// or requeue it when the policy released it (on a closed channel neither
/// reaches the broker, which then redelivers it).
pub(crate) async fn deliver<DB: InboxBackend, H: Handler<DB>>(
    policy: Arc<DeliveryPolicy<DB, H>>,
    dead_letters: Arc<DeadLetterExchange>,
    publisher: Channel,
    delivery: Delivery,
    give_up: CancellationToken,
) {
    let span = tracing::info_span!(
        "inbox_message",
        queue = %dead_letters.queue(),
        delivery_tag = delivery.delivery_tag,
        redelivered = delivery.redelivered,
        event_id = tracing::field::Empty,
    );
    async move {
        let message = RabbitMqDelivery {
            delivery: &delivery,
            publisher: &publisher,
            dead_letters: &dead_letters,
        };
        let settlement = policy.deliver(&message, &give_up).await;
        if settlement.is_finished() {
            ack(&delivery).await;
        } else {
            requeue(&delivery).await;
        }
    }
    .instrument(span)
    .await;
}

/// Run `deliveries` through `policy` as one batch, then ack each the policy
/// finished and requeue each it released: no ack before the batch's
/// transaction committed. After a handler failure the batch's deliveries
/// run again each on its own, concurrently.
pub(crate) async fn deliver_batch<DB: InboxBackend, H: Handler<DB>>(
    policy: Arc<DeliveryPolicy<DB, H>>,
    dead_letters: Arc<DeadLetterExchange>,
    publisher: Channel,
    deliveries: Vec<Delivery>,
    give_up: CancellationToken,
) {
    let span = tracing::info_span!(
        "inbox_batch",
        queue = %dead_letters.queue(),
        deliveries = deliveries.len(),
        first_delivery_tag = deliveries.first().map(|delivery| delivery.delivery_tag),
    );
    async move {
        let messages: Vec<RabbitMqDelivery<'_>> = deliveries
            .iter()
            .map(|delivery| RabbitMqDelivery {
                delivery,
                publisher: &publisher,
                dead_letters: &dead_letters,
            })
            .collect();
        let settlements = policy.deliver_batch(&messages, &give_up).await;
        // A message the batch left to run alone goes through the policy on
        // its own, side by side with the others, as without batches.
        let settling = messages
            .iter()
            .zip(settlements)
            .map(|(message, settlement)| {
                let (policy, give_up) = (&policy, &give_up);
                async move {
                    let settlement = match settlement {
                        Settlement::RunAlone => policy.deliver(message, give_up).await,
                        settled => settled,
                    };
                    if settlement.is_finished() {
                        ack(message.delivery).await;
                    } else {
                        requeue(message.delivery).await;
                    }
                }
            });
        futures::future::join_all(settling).await;
    }
    .instrument(span)
    .await;
}

async fn ack(delivery: &Delivery) {
    let acking = delivery.acker.ack(BasicAckOptions::default());
    match tokio::time::timeout(SETTLE_TIMEOUT, acking)
        .await
        .unwrap_or(Ok(false))
    {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            "cannot ack: the channel is closed; the broker redelivers the message (a duplicate)"
        ),
        Err(error) => tracing::warn!(
            %error,
            "ack failed; the broker redelivers the message (a duplicate)"
        ),
    }
}

async fn requeue(delivery: &Delivery) {
    let options = BasicNackOptions {
        multiple: false,
        requeue: true,
    };
    let nacking = delivery.acker.nack(options);
    match tokio::time::timeout(SETTLE_TIMEOUT, nacking)
        .await
        .unwrap_or(Ok(false))
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!("cannot nack: the channel is closed; the broker redelivers the message")
        }
        Err(error) => {
            tracing::debug!(%error, "nack failed; the broker redelivers the message")
        }
    }
}
