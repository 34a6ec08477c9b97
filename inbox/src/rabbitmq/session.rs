//! One connection to RabbitMQ: [`open_session`] connects and declares the
//! topology, [`consume`] hands each delivery to the delivery policy until
//! the consumer stops or the connection is lost.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicQosOptions, ConfirmSelectOptions,
};
use lapin::types::{FieldTable, LongString, ShortString};
use lapin::{Channel, Connection, ConnectionProperties, Consumer};
use outbox::mask_password;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::config::RabbitMqConsumerConfig;
use super::dead_letter::DeadLetterExchange;
use super::delivery::{deliver, deliver_batch};
use super::topology::{declare_dead_letter_topology, open_queue};
use crate::backend::InboxBackend;
use crate::error::Error;
use crate::handler::Handler;
use crate::policy::DeliveryPolicy;

/// How long closing a channel or the connection may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the consumer checks that its channels are still open.
const HEALTH_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How one consuming session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    Stopped,
    Lost,
}

/// One open connection with its channels and consumer.
pub(crate) struct Session {
    connection: Connection,
    consume_channel: Channel,
    publish_channel: Channel,
    consumer: Consumer,
}

/// Connect, check the queue, declare the dead-letter topology, and start
/// consuming; bounded by `connect_timeout`.
pub(crate) async fn open_session(
    config: &RabbitMqConsumerConfig,
    consumer_name: &str,
) -> Result<Session, Error> {
    let opening = async {
        let properties = ConnectionProperties::default()
            .with_connection_name(LongString::from(format!("outbox-inbox {consumer_name}")));
        let connection = Connection::connect(&config.url, properties).await?;
        let consume_channel = connection.create_channel().await?;
        consume_channel
            .basic_qos(config.prefetch, BasicQosOptions { global: false })
            .await?;
        let queue = open_queue(&consume_channel, config).await?;
        declare_dead_letter_topology(&consume_channel, config).await?;

        let publish_channel = connection.create_channel().await?;
        publish_channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let consumer = consume_channel
            .basic_consume(
                queue,
                ShortString::from(""),
                BasicConsumeOptions {
                    no_ack: false,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        Ok::<Session, lapin::Error>(Session {
            connection,
            consume_channel,
            publish_channel,
            consumer,
        })
    };
    within_connect_timeout(config, opening).await
}

/// Connect, declare the queue with its bindings and the dead-letter
/// topology, and close the connection; bounded by `connect_timeout`.
pub(crate) async fn declare_topology(
    config: &RabbitMqConsumerConfig,
    consumer_name: &str,
) -> Result<(), Error> {
    let declaring = async {
        let properties = ConnectionProperties::default().with_connection_name(LongString::from(
            format!("outbox-inbox {consumer_name} topology"),
        ));
        let connection = Connection::connect(&config.url, properties).await?;
        let channel = connection.create_channel().await?;
        open_queue(&channel, config).await?;
        declare_dead_letter_topology(&channel, config).await?;
        connection.close(200, ShortString::from("OK")).await
    };
    within_connect_timeout(config, declaring).await
}

/// `work` on the broker, bounded by `connect_timeout`.
async fn within_connect_timeout<T>(
    config: &RabbitMqConsumerConfig,
    work: impl Future<Output = Result<T, lapin::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(config.connect_timeout, work).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(error)) => Err(Error::amqp(error)),
        Err(_elapsed) => Err(Error::amqp(lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "rabbitmq at {} did not answer within {} ms",
                mask_password(&config.url),
                config.connect_timeout.as_millis()
            ),
        )))),
    }
}

/// How deliveries are grouped into inbox transactions: up to `size`, the
/// first waiting at most `wait` for the rest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    pub(crate) size: usize,
    pub(crate) wait: Duration,
}

/// Consume deliveries of `session` until `stop` or until the connection is
/// lost; every delivery in flight is finished before returning. With
/// `batching.size` 1 each delivery runs on its own; above 1 deliveries are
/// gathered into batches, each run in one inbox transaction.
pub(crate) async fn consume<DB: InboxBackend, H: Handler<DB>>(
    mut session: Session,
    policy: &Arc<DeliveryPolicy<DB, H>>,
    dead_letters: &Arc<DeadLetterExchange>,
    batching: Batching,
    stop: &CancellationToken,
) -> SessionEnd {
    // Cancelled on stop, and when the session is lost: the deliveries in
    // flight give up their pauses, as they can no longer be acked.
    let give_up = stop.child_token();
    let mut tasks = JoinSet::new();
    let queue = dead_letters.queue();
    let publisher = session.publish_channel.clone();
    // The batch being gathered, and when it must start at the latest.
    let mut gathered: Vec<Delivery> = Vec::new();
    let mut due = tokio::time::Instant::now();
    let end = loop {
        if gathered.len() >= batching.size
            || (!gathered.is_empty() && tokio::time::Instant::now() >= due)
        {
            let batch = std::mem::take(&mut gathered);
            tasks.spawn(deliver_batch(
                Arc::clone(policy),
                Arc::clone(dead_letters),
                publisher.clone(),
                batch,
                give_up.clone(),
            ));
        }
        tokio::select! {
            () = stop.cancelled() => break SessionEnd::Stopped,
            received = session.next_delivery() => match received {
                Ok(delivery) if batching.size == 1 => {
                    tasks.spawn(deliver(
                        Arc::clone(policy),
                        Arc::clone(dead_letters),
                        publisher.clone(),
                        delivery,
                        give_up.clone(),
                    ));
                }
                Ok(delivery) => {
                    if gathered.is_empty() {
                        due = tokio::time::Instant::now() + batching.wait;
                    }
                    gathered.push(delivery);
                }
                Err(reason) => {
                    tracing::warn!(queue, %reason, "rabbitmq session lost; reconnecting");
                    break SessionEnd::Lost;
                }
            },
            () = tokio::time::sleep_until(due), if !gathered.is_empty() => {}
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => log_join(joined),
        }
    };
    // Deliveries gathered but not started are neither acked nor handled:
    // the broker requeues them when the channel closes.
    drop(gathered);
    match end {
        // No new deliveries; those already buffered but not started are
        // requeued by the broker when the channel closes.
        SessionEnd::Stopped => session.cancel_consumer().await,
        SessionEnd::Lost => give_up.cancel(),
    }
    if !tasks.is_empty() {
        tracing::info!(
            in_flight = tasks.len(),
            "finishing the deliveries in flight"
        );
    }
    while let Some(joined) = tasks.join_next().await {
        log_join(joined);
    }
    session.close().await;
    end
}

impl Session {
    /// The next delivery, or why the session is over: the consumer failed
    /// or was cancelled by the broker, or a channel was closed (e.g. by a
    /// publish to a deleted dead-letter exchange), checked every
    /// [`HEALTH_CHECK_INTERVAL`].
    async fn next_delivery(&mut self) -> Result<Delivery, String> {
        let mut health = tokio::time::interval(HEALTH_CHECK_INTERVAL);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                delivery = self.consumer.next() => return match delivery {
                    Some(Ok(delivery)) => Ok(delivery),
                    Some(Err(error)) => Err(format!("the consumer failed: {error}")),
                    None => Err("rabbitmq cancelled the consumer".to_owned()),
                },
                _ = health.tick() => {
                    if !self.consume_channel.status().connected()
                        || !self.publish_channel.status().connected()
                    {
                        return Err("a channel was closed".to_owned());
                    }
                }
            }
        }
    }

    /// Ask the broker to send no more deliveries.
    async fn cancel_consumer(&self) {
        let cancel = self
            .consume_channel
            .basic_cancel(self.consumer.tag(), BasicCancelOptions::default());
        match tokio::time::timeout(CLOSE_TIMEOUT, cancel).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::debug!(%error, "cancelling the rabbitmq consumer failed"),
            Err(_elapsed) => tracing::debug!("cancelling the rabbitmq consumer timed out"),
        }
    }

    /// Close the channels and the connection, if still open.
    async fn close(self) {
        drop(self.consumer);
        for channel in [&self.consume_channel, &self.publish_channel] {
            if channel.status().connected() {
                let closing = channel.close(200, ShortString::from("OK"));
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, closing).await;
            }
        }
        if self.connection.status().connected() {
            let closing = self.connection.close(200, ShortString::from("OK"));
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, closing).await;
        }
    }
}

fn log_join(joined: Result<(), tokio::task::JoinError>) {
    if let Err(error) = joined {
        tracing::error!(%error, "a rabbitmq delivery task failed; the broker redelivers its message");
    }
}
