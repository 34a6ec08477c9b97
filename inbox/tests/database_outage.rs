//! One database-outage scenario, run on both inbox adapters against the
//! real brokers and PostgreSQL (`docs/inbox.md`).
//!
//! While the consumer handles messages, some of them inside open
//! transactions, its connection to the database is cut, then restored. The
//! shared PostgreSQL keeps running: the consumer's pool goes through an
//! `outbox_testkit::TcpProxy` that the test severs, which closes every
//! connection of the consumer and every new one it opens. The scenario
//! shows that
//!
//! * no message is acknowledged (RabbitMQ) or committed (Kafka) without
//!   its effects, checked again and again before, during and after the
//!   outage;
//! * the consumer keeps trying while it is cut off and recovers by itself
//!   once the database answers again;
//! * every event's effects are applied exactly once;
//! * the outage is counted as such (`database_outages`), never as a failed
//!   attempt (`retried`), so nothing is dead-lettered even with only three
//!   attempts per message.
//!
//! Services: `scripts/test.sh --services-only`.

mod support;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use outbox::Event;
use outbox_inbox::kafka::{KafkaConsumerConfig, KafkaInboxConsumer};
use outbox_inbox::rabbitmq::RabbitMqInboxConsumer;
use outbox_inbox::{BoxError, ConsumerStats, Handler, Inbox};
use outbox_testkit::{TcpProxy, TestDatabase, kafka, unique_name};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, Transaction};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use outbox_testkit::rabbitmq::queue_depth;

use crate::support::kafka::cloud_event;
use crate::support::rabbitmq;

/// Events published, over [`ACCOUNTS`] aggregates.
const EVENTS: u64 = 40;
const ACCOUNTS: u64 = 8;

/// Handler runs that go through before the gate holds the others inside
/// their transactions.
const RUNS_BEFORE_THE_GATE: u64 = 12;

/// Refused connection attempts to wait for while the database is cut off:
/// the consumer is seen to keep trying.
const REFUSED_WHILE_CUT: u64 = 5;

/// Longest wait for any step; a step that takes longer fails the test.
const WAIT: Duration = Duration::from_secs(90);

const CREATE_DEPOSITS: &str = "CREATE TABLE deposits (event_id TEXT NOT NULL, \
     account TEXT NOT NULL, seq BIGINT NOT NULL, cents BIGINT NOT NULL)";

/// The event of the scenario: a deposit to an account, numbered overall.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(
    type = "deposit.made",
    aggregate = "account",
    topic = "deposits",
    source = "/deposits"
)]
struct DepositMade {
    #[event(aggregate_id)]
    account: String,
    seq: u64,
    cents: i64,
}

/// A handler's own error type, wrapping the database error that caused it.
#[derive(Debug, thiserror::Error)]
#[error("cannot record deposit {deposit}")]
struct LedgerError {
    deposit: String,
    #[source]
    source: sqlx::Error,
}

// ---------------------------------------------------------------- brokers --

/// What the scenario needs of a broker and its inbox adapter.
trait BrokerSide {
    /// The adapter's name, for failure messages.
    const ADAPTER: &'static str;

    /// Publish `deposits` as the relay would, each with an event id of its
    /// own.
    fn publish(&self, deposits: &[DepositMade]) -> impl Future<Output = ()>;

    /// Start the adapter's consumer.
    fn start<H: Handler<Postgres>>(&self, inbox: Inbox<Postgres>, handler: H) -> Running;

    /// Messages the consumer has acknowledged (RabbitMQ) or committed
    /// (Kafka) so far.
    fn acknowledged(&self) -> impl Future<Output = u64>;
}

/// The settings both adapters run with: eight messages in flight, short
/// backoff, and only three attempts per message, so an outage counted as
/// failed attempts would dead-letter messages.
const IN_FLIGHT: u16 = 8;
const MAX_ATTEMPTS: u32 = 3;
const RETRY_BASE_DELAY: Duration = Duration::from_millis(50);
const RETRY_MAX_DELAY: Duration = Duration::from_millis(500);

struct KafkaSide {
    brokers: String,
    topic: String,
    group: String,
}

const PARTITIONS: i32 = 4;

impl KafkaSide {
    async fn new() -> KafkaSide {
        let brokers = kafka::require_kafka().await;
        let topic = unique_name("outage");
        kafka::create_topic(&brokers, &topic, PARTITIONS).await;
        KafkaSide {
            brokers,
            topic,
            group: unique_name("group"),
        }
    }
}

impl BrokerSide for KafkaSide {
    const ADAPTER: &'static str = "kafka";

    async fn publish(&self, deposits: &[DepositMade]) {
        let messages: Vec<kafka::Outgoing> = deposits
            .iter()
            .map(|deposit| cloud_event(deposit, &Uuid::now_v7().to_string()))
            .collect();
        kafka::produce(&self.brokers, &self.topic, &messages).await;
    }

    fn start<H: Handler<Postgres>>(&self, inbox: Inbox<Postgres>, handler: H) -> Running {
        let mut config = KafkaConsumerConfig::new(
            vec![self.brokers.clone()],
            self.group.clone(),
            vec![self.topic.clone()],
        );
        config.max_in_flight = usize::from(IN_FLIGHT);
        config.max_attempts = MAX_ATTEMPTS;
        config.retry_base_delay = RETRY_BASE_DELAY;
        config.retry_max_delay = RETRY_MAX_DELAY;
        config.commit_interval = Duration::from_millis(100);
        config.client_options = [
            // Groups on tansu form slowly with the default session timeout.
            ("session.timeout.ms", "6000"),
            ("heartbeat.interval.ms", "500"),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
        let consumer = KafkaInboxConsumer::new(inbox, handler, config).expect("kafka consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    async fn acknowledged(&self) -> u64 {
        kafka::committed_messages(&self.brokers, &self.group, &self.topic, PARTITIONS).await
    }
}

struct RabbitMqSide {
    broker: rabbitmq::Broker,
    published: AtomicU64,
}

impl BrokerSide for RabbitMqSide {
    const ADAPTER: &'static str = "rabbitmq";

    async fn publish(&self, deposits: &[DepositMade]) {
        for deposit in deposits {
            self.broker
                .publish_event(&Uuid::now_v7().to_string(), deposit)
                .await;
            self.published.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn start<H: Handler<Postgres>>(&self, inbox: Inbox<Postgres>, handler: H) -> Running {
        let mut config = self.broker.config();
        config.prefetch = IN_FLIGHT;
        config.max_attempts = MAX_ATTEMPTS;
        config.retry_base_delay = RETRY_BASE_DELAY;
        config.retry_max_delay = RETRY_MAX_DELAY;
        let consumer = RabbitMqInboxConsumer::new(inbox, handler, config).expect("consumer");
        Running::spawn(|stop| consumer.run(stop))
    }

    /// Published, less what is still in the queue (ready or unacked).
    async fn acknowledged(&self) -> u64 {
        let queue = self.broker.queue.clone();
        let in_queue = tokio::task::spawn_blocking(move || queue_depth(&queue))
            .await
            .expect("queue depth");
        self.published
            .load(Ordering::SeqCst)
            .saturating_sub(in_queue)
    }
}

/// A running consumer.
struct Running {
    stop: CancellationToken,
    task: JoinHandle<Result<ConsumerStats, outbox_inbox::Error>>,
}

impl Running {
    fn spawn<F>(run: impl FnOnce(CancellationToken) -> F) -> Running
    where
        F: Future<Output = Result<ConsumerStats, outbox_inbox::Error>> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(stop.clone()));
        Running { stop, task }
    }

    async fn stop(self) -> ConsumerStats {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the consumer stops")
            .expect("consumer task")
            .expect("consumer run")
    }
}

// ---------------------------------------------------------------- handler --

/// Holds handler runs inside their transactions, after the first
/// [`RUNS_BEFORE_THE_GATE`], until it opens.
#[derive(Default)]
struct Gate {
    open: AtomicBool,
    runs: AtomicU64,
    held: AtomicU64,
}

impl Gate {
    async fn pass(&self) {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if run <= RUNS_BEFORE_THE_GATE {
            return;
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Records each deposit in `deposits` (no unique key: a second application
/// shows as a second row), waits at the gate, then uses its transaction
/// once more, which fails when the connection was cut meanwhile.
fn ledger(gate: Arc<Gate>) -> impl Handler<Postgres, Event = DepositMade> {
    outbox_inbox::typed::<DepositMade, _, Postgres>(
        move |tx: &mut Transaction<'static, Postgres>, deposit: &DepositMade| {
            let gate = Arc::clone(&gate);
            let key = format!("{}/{}", deposit.account, deposit.seq);
            let (account, seq, cents) = (deposit.account.clone(), deposit.seq, deposit.cents);
            Box::pin(async move {
                let failed = |source| LedgerError {
                    deposit: key.clone(),
                    source,
                };
                sqlx::query(
                    "INSERT INTO deposits (event_id, account, seq, cents) VALUES ($1, $2, $3, $4)",
                )
                .bind(&key)
                .bind(&account)
                .bind(i64::try_from(seq).unwrap_or(i64::MAX))
                .bind(cents)
                .execute(&mut **tx)
                .await
                .map_err(failed)?;
                gate.pass().await;
                sqlx::query("SELECT 1")
                    .execute(&mut **tx)
                    .await
                    .map_err(failed)?;
                Ok(())
            }) as BoxFuture<'_, Result<(), BoxError>>
        },
    )
}

// --------------------------------------------------------------- scenario --

/// Distinct events whose effects are applied, read from the database
/// directly (not through the proxy).
async fn applied(db: &TestDatabase<Postgres>) -> u64 {
    let count = db
        .count("SELECT COUNT(DISTINCT event_id) FROM deposits")
        .await;
    u64::try_from(count).expect("a count")
}

/// Check that nothing is acknowledged without its effects; returns
/// `(acknowledged, applied)`. Acknowledged is read first: effects only
/// grow, so a later read of them can only be larger.
async fn nothing_acknowledged_without_effects<B: BrokerSide>(
    broker: &B,
    db: &TestDatabase<Postgres>,
) -> (u64, u64) {
    let acknowledged = broker.acknowledged().await;
    let applied = applied(db).await;
    assert!(
        acknowledged <= applied,
        "{}: {acknowledged} messages acknowledged, but only {applied} events applied",
        B::ADAPTER
    );
    (acknowledged, applied)
}

/// Poll until `condition` holds, checking [`nothing_acknowledged_without_effects`]
/// on every round; fail naming `what` after [`WAIT`].
async fn wait_for<B: BrokerSide>(
    what: &str,
    broker: &B,
    db: &TestDatabase<Postgres>,
    mut condition: impl FnMut(u64, u64) -> bool,
) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (acknowledged, applied) = nothing_acknowledged_without_effects(broker, db).await;
        if condition(acknowledged, applied) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: no {what} within {WAIT:?} ({acknowledged} acknowledged, {applied} applied)",
            B::ADAPTER
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The consumer's pool: through `proxy`, and quick to give up on a
/// connection, so an outage shows as errors rather than as waiting.
async fn pool_through(proxy: &TcpProxy, db: &TestDatabase<Postgres>) -> PgPool {
    PgPoolOptions::new()
        .max_connections(u32::from(IN_FLIGHT) + 2)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxy.route(db.url()))
        .await
        .expect("connect through the proxy")
}

async fn a_database_outage_loses_nothing_and_applies_each_event_once<B: BrokerSide>(broker: B) {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    sqlx::query(CREATE_DEPOSITS)
        .execute(db.pool())
        .await
        .expect("create deposits");
    let proxy = TcpProxy::in_front_of(db.url()).await;
    let inbox = Inbox::new(pool_through(&proxy, &db).await, "ledger").expect("inbox");

    let deposits: Vec<DepositMade> = (0..EVENTS)
        .map(|seq| DepositMade {
            account: format!("acct-{}", seq % ACCOUNTS),
            seq,
            cents: 100,
        })
        .collect();
    broker.publish(&deposits).await;
    let gate = Arc::new(Gate::default());
    let running = broker.start(inbox, ledger(Arc::clone(&gate)));

    // Some events are applied, others are held inside open transactions.
    wait_for(
        "handler holding a transaction open",
        &broker,
        &db,
        |_, _| gate.held.load(Ordering::SeqCst) > 0,
    )
    .await;

    // The database goes away under the held transactions, which then try
    // to go on; the consumer keeps trying to reach it meanwhile.
    proxy.sever();
    gate.open.store(true, Ordering::SeqCst);
    wait_for(
        "repeated attempts to reach the database",
        &broker,
        &db,
        |_, _| proxy.refused_connections() >= REFUSED_WHILE_CUT,
    )
    .await;
    assert!(
        proxy.cut_connections() > 0,
        "{}: the consumer had database connections open when they were cut",
        B::ADAPTER
    );

    // The database is back: the consumer recovers by itself.
    proxy.restore();
    wait_for(
        "recovery: every event applied and acknowledged",
        &broker,
        &db,
        |acknowledged, applied| acknowledged == EVENTS && applied == EVENTS,
    )
    .await;
    let stats = running.stop().await;
    eprintln!(
        "{}: {stats:?}; the proxy cut {} connections and refused {} while severed",
        B::ADAPTER,
        proxy.cut_connections(),
        proxy.refused_connections()
    );
    each_event_applied_once(B::ADAPTER, &db, &stats).await;
}

/// Every event's effects applied exactly once, every message finished
/// once, and the outage counted as an outage, not as failed attempts.
async fn each_event_applied_once(
    adapter: &str,
    db: &TestDatabase<Postgres>,
    stats: &ConsumerStats,
) {
    assert_eq!(
        db.count("SELECT COUNT(*) FROM deposits").await,
        i64::try_from(EVENTS).expect("events"),
        "{adapter}: every event's effects applied exactly once"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM inbox_messages").await,
        i64::try_from(EVENTS).expect("events"),
        "{adapter}: one inbox row per event"
    );
    assert_eq!(
        stats.processed + stats.duplicates,
        EVENTS,
        "{adapter}: every message finished once: {stats:?}"
    );
    assert_eq!(stats.dead_lettered, 0, "{adapter}: {stats:?}");
    assert_eq!(
        stats.retried, 0,
        "{adapter}: the outage was not counted as failed attempts: {stats:?}"
    );
    assert!(
        stats.database_outages > 0,
        "{adapter}: the outage was counted as one: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_consumer_rides_out_a_database_outage() {
    a_database_outage_loses_nothing_and_applies_each_event_once(KafkaSide::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rabbitmq_consumer_rides_out_a_database_outage() {
    let broker = RabbitMqSide {
        broker: rabbitmq::Broker::new("outage").await,
        published: AtomicU64::new(0),
    };
    a_database_outage_loses_nothing_and_applies_each_event_once(broker).await;
}
