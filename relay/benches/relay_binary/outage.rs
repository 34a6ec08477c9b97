//! The `outage` case: the relay's CPU while its broker cannot be reached,
//! counted from the moment the broker goes away, with writers committing
//! one event per transaction throughout (started before the relay), the
//! default configuration and the release binary. Afterwards every event
//! written must be published without a failed attempt.
//!
//! The broker goes away in the ways production sees:
//! - Kafka frozen: a tansu broker of the case's own
//!   ([`PrivateTansu`]) stopped with SIGSTOP, so connections stay open and
//!   nothing is answered (the shared one on 9092 is never touched);
//! - RabbitMQ stopped: a proxy in front of the shared broker closes every
//!   connection and refuses new ones, as a stopped broker does;
//! - RabbitMQ frozen: the same proxy keeps the connections open and holds
//!   every byte back, as a broker that blocks its publishers does.
//!
//! Each runs at every rate of `--outage-rates`: at 50 events/s the
//! producers notify the relay of each commit; at 500/s the relay polls on
//! its own.

use std::time::{Duration, Instant};

use outbox_testkit::{PrivateTansu, TcpProxy, kafka};
use tokio_util::sync::CancellationToken;

use crate::Settings;
use crate::broker::Broker;
use crate::database::BenchDatabase;
use crate::keys::KeyDistribution;
use crate::relay::RunningRelay;
use crate::source::SourceKind;
use crate::support::events::unique_name;
use crate::support::process::cpu_seconds;
use crate::support::targets::amqp_target;
use crate::writers::{Pace, write_steadily};

/// Events with a failed attempt: an unreachable broker must cost none.
const COUNT_FAILED_ATTEMPTS: &str = "SELECT COUNT(*) FROM outbox_events WHERE attempts > 0";

/// Concurrent writers, one connection each.
const WRITERS: u64 = 2;
/// How long the writers run before the relay starts.
const WRITERS_AHEAD: Duration = Duration::from_secs(1);
/// How long the relay publishes before the broker goes away.
const BEFORE: Duration = Duration::from_secs(5);
/// Longest the relay may take to publish everything once the broker is back.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(180);

/// How the broker goes away.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outage {
    KafkaFrozen,
    RabbitMqStopped,
    RabbitMqFrozen,
}

impl Outage {
    /// The outages of `broker` (none on Redis or NATS).
    pub(crate) fn of(broker: Broker) -> &'static [Outage] {
        match broker {
            Broker::Kafka => &[Outage::KafkaFrozen],
            Broker::RabbitMq => &[Outage::RabbitMqStopped, Outage::RabbitMqFrozen],
            Broker::Redis | Broker::Nats => &[],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Outage::KafkaFrozen => "kafka frozen (SIGSTOP)",
            Outage::RabbitMqStopped => "rabbitmq stopped (connections refused)",
            Outage::RabbitMqFrozen => "rabbitmq frozen (connections held)",
        }
    }
}

/// What one outage showed.
pub(crate) struct OutageFigures {
    pub(crate) outage: Outage,
    /// Events per second the writers committed.
    pub(crate) rate: u64,
    /// The relay's CPU seconds (user and system, every thread) from the
    /// moment the broker went away until it came back.
    pub(crate) cpu_seconds: f64,
    pub(crate) seconds: f64,
    /// Events written, all published in the end.
    pub(crate) written: u64,
    /// Events with a failed attempt; an outage must cost none.
    pub(crate) failed_attempts: u64,
}

impl OutageFigures {
    /// The relay's CPU over the outage, in cores.
    pub(crate) fn cores(&self) -> f64 {
        self.cpu_seconds / self.seconds
    }

    pub(crate) fn line(&self) -> String {
        format!(
            "{} at {}/s: relay {:.3} cores over {:.1} s ({:.2} CPU s); {} events written, all published, {} with a failed attempt",
            self.outage.label(),
            self.rate,
            self.cores(),
            self.seconds,
            self.cpu_seconds,
            self.written,
            self.failed_attempts
        )
    }
}

/// The broker of one outage, reachable through `url` until taken down.
enum OutageBroker {
    Kafka(PrivateTansu),
    RabbitMq(TcpProxy),
}

impl OutageBroker {
    fn take_down(&self, outage: Outage) {
        match (self, outage) {
            (OutageBroker::Kafka(tansu), _) => tansu.freeze(),
            (OutageBroker::RabbitMq(proxy), Outage::RabbitMqStopped) => proxy.sever(),
            (OutageBroker::RabbitMq(proxy), _) => {
                proxy.hold_to_server();
                proxy.hold_to_client();
            }
        }
    }

    fn bring_back(&self) {
        match self {
            OutageBroker::Kafka(tansu) => tansu.thaw(),
            OutageBroker::RabbitMq(proxy) => {
                proxy.release_held();
                proxy.restore();
            }
        }
    }
}

/// Run `outage` with writers at `rate` events/s for `settings.outage`.
pub(crate) async fn outage(settings: &Settings, outage: Outage, rate: u64) -> OutageFigures {
    let database = BenchDatabase::create(WRITERS as u32 + 2, SourceKind::Poll).await;
    let (broker, url, topic, amqp) = match outage {
        Outage::KafkaFrozen => {
            let tansu = PrivateTansu::start().await;
            let topic = unique_name("outage");
            kafka::create_topic(&tansu.brokers(), &topic, settings.kafka_partitions).await;
            let url = format!("kafka://{}", tansu.brokers());
            (OutageBroker::Kafka(tansu), url, topic, None)
        }
        Outage::RabbitMqStopped | Outage::RabbitMqFrozen => {
            let target = amqp_target("outage").await;
            let proxy = TcpProxy::in_front_of(&settings.amqp_url).await;
            let url = proxy.route(&settings.amqp_url);
            let topic = target.exchange.clone();
            (OutageBroker::RabbitMq(proxy), url, topic, Some(target))
        }
    };

    let stop_writing = CancellationToken::new();
    let pace = Pace {
        writers: WRITERS,
        rate,
        limit: u64::MAX,
        distribution: KeyDistribution::Uniform { aggregates: 100 },
        payload_bytes: settings.payload_bytes,
    };
    let writing = tokio::spawn({
        let pool = database.pool.clone();
        let topic = topic.clone();
        let stop = stop_writing.clone();
        async move { write_steadily(&pool, &topic, pace, stop, |_| async {}).await }
    });
    tokio::time::sleep(WRITERS_AHEAD).await;
    let relay = RunningRelay::start(&database, &url, &settings.log_filter).await;
    let started = Instant::now();
    while database.published().await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{}: the relay published nothing within 60 s",
            outage.label()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(BEFORE).await;

    let cpu_before = cpu_seconds(relay.pid());
    let down_at = Instant::now();
    broker.take_down(outage);
    tokio::time::sleep(settings.outage).await;
    let cpu_used = cpu_seconds(relay.pid()) - cpu_before;
    let seconds = down_at.elapsed().as_secs_f64();
    broker.bring_back();

    tokio::time::sleep(Duration::from_secs(2)).await;
    stop_writing.cancel();
    let produced = writing.await.expect("writer task");
    let written = produced.commits.len() as u64;
    let catch_up = Instant::now();
    while database.published().await < written {
        assert!(
            catch_up.elapsed() < CATCH_UP_LIMIT,
            "{}: {} of {written} events published {CATCH_UP_LIMIT:?} after the broker came back; the relay's log: {}",
            outage.label(),
            database.published().await,
            relay.log_path().display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failed_attempts: i64 = sqlx::query_scalar(COUNT_FAILED_ATTEMPTS)
        .fetch_one(&database.pool)
        .await
        .expect("count failed attempts");
    relay.stop();
    if let Some(target) = amqp {
        target.remove().await;
    }
    drop(broker);
    database.drop_database().await;
    OutageFigures {
        outage,
        rate,
        cpu_seconds: cpu_used,
        seconds,
        written,
        failed_attempts: failed_attempts as u64,
    }
}
