//! [`RedisInboxConsumer`]: reads its streams session after session,
//! reconnecting with backoff when Redis cannot be reached; in each
//! session the [`Reader`] takes entries and the message loop runs them
//! through the [`MessageLanes`].

use std::sync::Arc;

use outbox::mask_password;
use redis::RedisError;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::commands::{Commands, InFlight, connect};
use super::config::RedisConsumerConfig;
use super::entry::StreamEntry;
use super::reader::{Read, Reader, refresh_in_flight};
use crate::backend::InboxBackend;
use crate::consumer::{
    AbortOnDrop, BackgroundPruning, MessageLanes, OpenError, SessionEnd, log_consumer_stopped,
    reconnecting, run_lanes,
};
use crate::error::Error;
use crate::handler::Handler;
use crate::inbox::Inbox;
use crate::policy::DeliveryPolicy;
use crate::stats::ConsumerStats;

/// Reads Redis streams through a consumer group into an [`Inbox`]; see the
/// [module documentation](super).
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery, Inbox};
/// use outbox_inbox::redis::{RedisConsumerConfig, RedisInboxConsumer};
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
/// let config = RedisConsumerConfig::new("redis://127.0.0.1:6379", "billing", ["orders"]);
/// let consumer = RedisInboxConsumer::new(Inbox::new(pool, "billing")?, handler, config)?;
/// let stop = CancellationToken::new();
/// let stats = consumer.run(stop).await?;
/// println!("processed {}", stats.processed);
/// # Ok(()) }
/// ```
pub struct RedisInboxConsumer<DB: InboxBackend, H: Handler<DB>> {
    policy: Arc<DeliveryPolicy<DB, H>>,
    config: Arc<RedisConsumerConfig>,
}

impl<DB: InboxBackend, H: Handler<DB>> std::fmt::Debug for RedisInboxConsumer<DB, H> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RedisInboxConsumer")
            .field("consumer", &self.policy.inbox().consumer())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<DB: InboxBackend, H: Handler<DB>> RedisInboxConsumer<DB, H> {
    /// A consumer feeding `handler` through `inbox`. Does not connect; see
    /// [`RedisInboxConsumer::run`].
    ///
    /// # Errors
    /// [`Error::Config`] for a URL that is not `redis://` (or does not
    /// parse), no stream or an empty one, an empty group or consumer name,
    /// a zero `claim_idle`, `block`, `max_in_flight`, `read_count`,
    /// attempt limit or timeout, a base delay above the maximum, or a batch
    /// larger than `max_in_flight`.
    pub fn new(inbox: Inbox<DB>, handler: H, config: RedisConsumerConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(RedisInboxConsumer {
            policy: Arc::new(DeliveryPolicy::new(inbox, handler, config.retry_schedule())),
            config: Arc::new(config),
        })
    }

    /// The settings.
    pub fn config(&self) -> &RedisConsumerConfig {
        &self.config
    }

    /// Consume until `stop` is cancelled, then finish the running handlers
    /// and return what was done. Runs inbox pruning meanwhile. Redis that
    /// cannot be reached, or a connection lost, is retried with backoff
    /// (`retry_base_delay` doubling up to `retry_max_delay`).
    ///
    /// # Errors
    /// [`Error::Redis`] when the first session fails for another reason
    /// than reaching the server: refused credentials, or a stream key that
    /// holds something else than a stream.
    pub async fn run(self, stop: CancellationToken) -> Result<ConsumerStats, Error> {
        let RedisInboxConsumer { policy, config } = self;
        let url = mask_password(&config.url);
        let pruning = BackgroundPruning::start(policy.inbox(), config.prune.clone());
        let ran = reconnecting(
            "redis",
            &config.retry_schedule(),
            &stop,
            || open_session(&config, &url),
            |(commands, reader)| {
                tracing::info!(
                    %url,
                    streams = ?config.streams,
                    group = %config.group,
                    consumer_name = %config.consumer_name,
                    consumer = %policy.inbox().consumer(),
                    max_in_flight = config.max_in_flight,
                    batch_size = config.batch_size,
                    "consuming from redis"
                );
                consume(&config, &policy, commands, reader, &stop)
            },
        )
        .await;
        pruning.stop().await;
        if let Err(error) = ran {
            tracing::error!(%url, streams = ?config.streams, %error, "cannot start consuming from redis");
            return Err(error);
        }
        let stats = policy.stats();
        log_consumer_stopped!(
            stats,
            "redis inbox consumer stopped",
            streams = ?config.streams,
            group = %config.group
        );
        Ok(stats)
    }
}

/// Connect and create the group where it is missing. An error that means
/// the server could not be reached is worth waiting for; any other is a
/// refusal.
async fn open_session(
    config: &Arc<RedisConsumerConfig>,
    url: &str,
) -> Result<(Commands, redis::aio::MultiplexedConnection), OpenError> {
    let opening = async {
        let (commands, reader) = connect(config).await?;
        commands.create_groups().await?;
        Ok::<_, RedisError>((commands, reader))
    };
    opening.await.map_err(|error| {
        if unreachable(&error) {
            OpenError::Unreachable(format!("{url}: {error}"))
        } else {
            OpenError::Refused(Error::redis(error))
        }
    })
}

/// Whether `error` means the server could not be reached (worth waiting
/// for), rather than that it refused what was asked.
fn unreachable(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.code() == Some("LOADING")
}

/// One session: the reader takes entries, the loop runs them through the
/// lanes, until `stop` or until a command fails. Entries in flight are
/// finished before returning (those whose `XACK` fails stay pending and
/// are read again in the next session, as duplicates). Entries read and
/// not started stay pending on this consumer: read again by its next
/// session, or claimed by another consumer.
async fn consume<DB: InboxBackend, H: Handler<DB>>(
    config: &Arc<RedisConsumerConfig>,
    policy: &Arc<DeliveryPolicy<DB, H>>,
    commands: Commands,
    connection: redis::aio::MultiplexedConnection,
    stop: &CancellationToken,
) -> SessionEnd {
    let room = Arc::new(Semaphore::new(config.max_in_flight));
    let in_flight = Arc::new(InFlight::default());
    let (sender, mut received) = mpsc::unbounded_channel::<Read>();
    let reader = AbortOnDrop(tokio::spawn(
        Reader {
            config: Arc::clone(config),
            commands: commands.clone(),
            connection,
            room: Arc::clone(&room),
            in_flight: Arc::clone(&in_flight),
            entries: sender,
        }
        .run(),
    ));
    let refresher = AbortOnDrop(tokio::spawn(refresh_in_flight(
        Arc::clone(config),
        commands.clone(),
        Arc::clone(&in_flight),
    )));
    let lanes: MessageLanes<DB, H, StreamEntry, Commands> = MessageLanes::new(
        Arc::clone(policy),
        Arc::new(commands),
        stop.child_token(),
        config.batch_size,
        config.batch_wait,
    );
    let end = run_lanes(
        "redis",
        reader,
        lanes,
        &mut received,
        &room,
        config.max_in_flight,
        stop,
        |finished| in_flight.remove(finished.iter().map(AsRef::as_ref)),
    )
    .await;
    drop(refresher);
    end
}
