//! [`NatsInboxConsumer`]: pulls from its durable consumer session after
//! session, reconnecting with backoff when NATS cannot be reached; in each
//! session a reader task pulls messages and the message loop runs them
//! through the [`MessageLanes`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::NatsConsumerConfig;
use super::message::NatsMessage;
use super::session::Session;
use crate::backend::InboxBackend;
use crate::consumer::{
    AbortOnDrop, BackgroundPruning, MessageLanes, SessionEnd, log_consumer_stopped, reconnecting,
    run_lanes,
};
use crate::error::Error;
use crate::handler::Handler;
use crate::inbox::Inbox;
use crate::policy::DeliveryPolicy;
use crate::stats::ConsumerStats;

/// Consumes a JetStream stream through a durable pull consumer into an
/// [`Inbox`]; see the [module documentation](super).
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery, Inbox};
/// use outbox_inbox::nats::{NatsConsumerConfig, NatsInboxConsumer};
/// use serde::{Deserialize, Serialize};
/// use tokio_util::sync::CancellationToken;
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// async fn add_revenue(
///     tx: &mut sqlx::PgConnection,
///     order: &OrderCreated,
///     _delivery: &Delivery<'_>,
/// ) -> Result<(), BoxError> {
///     sqlx::query("UPDATE revenue SET cents = cents + $1")
///         .bind(order.total_cents)
///         .execute(&mut *tx)
///         .await?;
///     Ok(())
/// }
///
/// let handler = outbox_inbox::typed(add_revenue);
/// let config = NatsConsumerConfig::new("nats://127.0.0.1:4222", "ORDERS", "billing");
/// let consumer = NatsInboxConsumer::new(Inbox::new(pool, "billing")?, handler, config)?;
/// let stop = CancellationToken::new();
/// let stats = consumer.run(stop).await?;
/// println!("processed {}", stats.processed);
/// # Ok(()) }
/// ```
pub struct NatsInboxConsumer<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    config: Arc<NatsConsumerConfig>,
}

impl<DB: InboxBackend, H: Handler<DB>> std::fmt::Debug for NatsInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NatsInboxConsumer")
            .field("consumer", &self.policy.inbox().consumer())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<DB: InboxBackend, H: Handler<DB>> NatsInboxConsumer<DB, H> {
    /// A consumer feeding `handler` through `inbox`. Does not connect; see
    /// [`NatsInboxConsumer::run`].
    ///
    /// # Errors
    /// [`Error::Config`] for no server or one that is not `nats://` or
    /// `tls://` (or does not parse), an empty stream or durable name, an
    /// `ack_wait` under 3 ms, a zero `max_in_flight`, `fetch_size`,
    /// attempt limit or timeout, a base delay above the maximum, or a batch
    /// larger than `max_in_flight`.
    pub fn new(inbox: Inbox<DB>, handler: H, config: NatsConsumerConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(NatsInboxConsumer {
            policy: Arc::new(DeliveryPolicy::new(inbox, handler, config.retry_schedule())),
            config: Arc::new(config),
        })
    }

    /// The settings.
    pub fn config(&self) -> &NatsConsumerConfig {
        &self.config
    }

    /// Consume until `stop` is cancelled, then finish the running handlers
    /// and return what was done. Runs inbox pruning meanwhile. NATS that
    /// cannot be reached, or a connection lost, is retried with backoff
    /// (`retry_base_delay` doubling up to `retry_max_delay`).
    ///
    /// # Errors
    /// [`Error::Config`] when the first session is refused for another
    /// reason than reaching the server: refused credentials, a stream that
    /// does not exist, a durable consumer that cannot be created.
    pub async fn run(self, stop: CancellationToken) -> Result<ConsumerStats, Error> {
        let NatsInboxConsumer { policy, config } = self;
        let pruning = BackgroundPruning::start(policy.inbox(), config.prune.clone());
        let ran = reconnecting(
            "nats",
            &config.retry_schedule(),
            &stop,
            || Session::open(&config),
            |session| {
                tracing::info!(
                    servers = ?config.servers,
                    stream = %config.stream,
                    durable = %config.durable,
                    ack_wait_ms = millis(session.ack_wait),
                    consumer = %policy.inbox().consumer(),
                    max_in_flight = config.max_in_flight,
                    batch_size = config.batch_size,
                    "consuming from nats"
                );
                consume(&config, &policy, session, &stop)
            },
        )
        .await;
        pruning.stop().await;
        if let Err(error) = ran {
            tracing::error!(servers = ?config.servers, stream = %config.stream, %error, "cannot start consuming from nats");
            return Err(error);
        }
        let stats = policy.stats();
        log_consumer_stopped!(
            stats,
            "nats inbox consumer stopped",
            stream = %config.stream,
            durable = %config.durable
        );
        Ok(stats)
    }
}

/// `duration` in whole milliseconds, for logs.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What the reader hands the message loop: messages, or why it stopped
/// pulling (the session is lost).
type Pulled = Result<Vec<NatsMessage>, String>;

/// One session: the reader pulls messages, the loop runs them through the
/// lanes, until `stop` or until a pull fails. Messages in flight are
/// finished before returning; those not started are `NAK`ed (or, if that
/// fails, come again after `ack_wait`).
async fn consume<DB: InboxBackend, H: Handler<DB>>(
    config: &Arc<NatsConsumerConfig>,
    policy: &Arc<DeliveryPolicy<DB, H>>,
    session: Session,
    stop: &CancellationToken,
) -> SessionEnd {
    let session = Arc::new(session);
    let room = Arc::new(Semaphore::new(config.max_in_flight));
    let (sender, mut received) = mpsc::unbounded_channel::<Pulled>();
    let reader = AbortOnDrop(tokio::spawn(pull(
        Arc::clone(config),
        Arc::clone(&session),
        Arc::clone(&room),
        sender,
    )));
    let progress = AbortOnDrop(tokio::spawn(mark_in_progress(Arc::clone(&session))));
    let lanes: MessageLanes<DB, H, NatsMessage, Session> = MessageLanes::new(
        Arc::clone(policy),
        Arc::clone(&session),
        stop.child_token(),
        config.batch_size,
        config.batch_wait,
    );
    let end = run_lanes(
        "nats",
        reader,
        lanes,
        &mut received,
        &room,
        config.max_in_flight,
        stop,
        |finished| session.release(finished.iter().map(AsRef::as_ref)),
    )
    .await;
    drop(progress);
    end
}

/// Pull messages while the message loop has room, one unit of `room` per
/// message in flight, until the session ends (the task is aborted or the
/// loop's receiver dropped) or a pull fails (sent as the last item).
async fn pull(
    config: Arc<NatsConsumerConfig>,
    session: Arc<Session>,
    room: Arc<Semaphore>,
    messages: mpsc::UnboundedSender<Pulled>,
) {
    loop {
        let Some(taken) = take_room(&room, config.fetch_size).await else {
            return;
        };
        let batch = session
            .consumer
            .fetch()
            .max_messages(taken)
            .expires(config.fetch_wait)
            .messages()
            .await;
        let mut batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                let _ = messages.send(Err(format!("pull request: {error}")));
                return;
            }
        };
        let mut handed = Vec::with_capacity(taken);
        let mut failed = None;
        while let Some(message) = batch.next().await {
            match message {
                Ok(message) => match NatsMessage::new(message) {
                    Some(message) if session.hold(&message) => handed.push(message),
                    Some(_) => {}
                    None => {
                        tracing::warn!("a pulled message carries no JetStream metadata; skipped")
                    }
                },
                Err(error) => {
                    failed = Some(error.to_string());
                    break;
                }
            }
        }
        room.add_permits(taken.saturating_sub(handed.len()));
        if !handed.is_empty() && messages.send(Ok(handed)).is_err() {
            return;
        }
        if let Some(error) = failed {
            let _ = messages.send(Err(error));
            return;
        }
    }
}

/// Wait for room for at least one message and take up to `most`; `None`
/// once the room is closed (the session ends).
async fn take_room(room: &Semaphore, most: usize) -> Option<usize> {
    room.acquire().await.ok()?.forget();
    let mut taken = 1;
    while taken < most {
        match room.try_acquire() {
            Ok(permit) => {
                permit.forget();
                taken += 1;
            }
            Err(_) => break,
        }
    }
    Some(taken)
}

/// Every third of the consumer's `ack_wait`, mark every message held as in
/// progress (running, retrying, or waiting behind an earlier message of
/// its aggregate), so that the server does not deliver it again meanwhile.
async fn mark_in_progress(session: Arc<Session>) {
    let period = (session.ack_wait / 3).max(Duration::from_millis(1));
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        session.refresh_in_flight().await;
    }
}
