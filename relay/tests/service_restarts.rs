//! The relay while the shared services fail under it: RabbitMQ stopped,
//! tansu frozen, and Redis and NATS cut off (by a proxy in front of each)
//! for 20 s (the
//! relay backs off instead of spinning, records
//! no failed attempt, and publishes everything once the broker is back),
//! and PostgreSQL and MariaDB restarted under writers (the relay carries on
//! in the same process, nothing is lost and each aggregate keeps its
//! order).
//!
//! The logical source's server-side faults (a PostgreSQL restart, a slot
//! the server invalidates) are in `service_restarts/logical.rs`.
//!
//! These tests stop, freeze and restart the services every other test
//! uses: run this file alone, e.g. `cargo test -p outbox-relay --test
//! service_restarts -- --test-threads=1`. Its tests also take a lock, so
//! that they never overlap each other.

mod support;

#[path = "service_restarts/logical.rs"]
mod logical;
#[path = "logical/harness.rs"]
#[allow(dead_code)]
mod logical_harness;

use std::time::{Duration, Instant};

use outbox_testkit::{
    Collected, TcpProxy, TestBackend, TestDatabase, kafka, nats as nats_kit, rabbitmq,
    redis as redis_kit, unique_name,
};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::service_control::{
    BringBackOnDrop, freeze, restart_mariadb, restart_postgres, start_rabbitmq, stop_rabbitmq,
    tansu_pid,
};
use support::workload::{
    WriterPlan, check_delivery, committed_events, enqueue_events, join_writers, spawn_writers,
};
use tokio_util::sync::CancellationToken;

/// Held by each test for its whole run: they disrupt the same services.
static SERVICES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a broker stays unreachable.
const OUTAGE: Duration = Duration::from_secs(20);

/// CPU the relay may use over an outage, as a share of the outage's wall
/// time: a relay that backs off sleeps nearly all of it, one that spins
/// keeps a core busy.
const OUTAGE_CPU_SHARE: f64 = 0.25;

#[derive(Clone, Copy)]
enum Broker {
    Kafka,
    RabbitMq,
    /// The shared server, reached through a proxy that the test cuts: the
    /// server keeps running for every other test.
    Redis,
    /// The shared server, cut off through a proxy as Redis is; the events
    /// go to a stream of the test's own.
    Nats,
}

/// What made a broker unreachable, to undo.
enum Down {
    Service(BringBackOnDrop),
    Proxy,
}

impl Broker {
    async fn consume(self, target: &str) -> Collected {
        match self {
            Broker::Kafka => kafka::topic_consumer(target, 3).await,
            Broker::RabbitMq => rabbitmq::exchange_consumer(target).await,
            Broker::Redis => {
                redis_kit::require_redis().await;
                redis_kit::stream_consumer(target)
            }
            Broker::Nats => {
                let jetstream = nats_kit::require_nats().await;
                // Deleted by `clean_up`, by name.
                drop(nats_kit::TestStream::create(&jetstream, target, &[target.to_owned()]).await);
                nats_kit::stream_consumer(jetstream, target.to_owned())
            }
        }
    }

    /// Remove what `consume` made on the broker.
    async fn clean_up(self, target: &str) {
        if let Broker::Nats = self {
            let jetstream = nats_kit::require_nats().await;
            let _ = jetstream.delete_stream(target).await;
        }
    }

    /// The proxy the relay reaches the broker through, when the outage is
    /// a cut rather than a stopped service.
    async fn proxy(self) -> Option<TcpProxy> {
        match self {
            Broker::Redis => Some(TcpProxy::in_front_of(&redis_kit::redis_url()).await),
            Broker::Nats => Some(TcpProxy::in_front_of(&nats_kit::nats_url()).await),
            Broker::Kafka | Broker::RabbitMq => None,
        }
    }

    fn url(self) -> String {
        self.url_through(None)
    }

    /// The broker's URL, routed through `proxy` when there is one.
    fn url_through(self, proxy: Option<&TcpProxy>) -> String {
        match (self, proxy) {
            (Broker::Kafka, _) => format!("kafka://{}", kafka::brokers()),
            (Broker::RabbitMq, _) => rabbitmq::amqp_url(),
            (Broker::Redis, Some(proxy)) => proxy.route(&redis_kit::redis_url()),
            (Broker::Redis, None) => redis_kit::redis_url(),
            (Broker::Nats, Some(proxy)) => proxy.route(&nats_kit::nats_url()),
            (Broker::Nats, None) => nats_kit::nats_url(),
        }
    }

    /// Make the broker unreachable: RabbitMQ's application stopped, tansu
    /// frozen with SIGSTOP, the proxy in front of Redis or NATS severed
    /// (open connections closed, new ones refused).
    fn take_down(self, proxy: Option<&TcpProxy>) -> Down {
        match (self, proxy) {
            (Broker::Kafka, _) => Down::Service(freeze(tansu_pid(&kafka::brokers()))),
            (Broker::RabbitMq, _) => Down::Service(stop_rabbitmq()),
            (Broker::Redis | Broker::Nats, Some(proxy)) => {
                proxy.sever();
                Down::Proxy
            }
            (Broker::Redis | Broker::Nats, None) => {
                panic!("the broker is cut off through its proxy")
            }
        }
    }

    fn bring_back(self, down: Down, proxy: Option<&TcpProxy>) {
        match (self, down) {
            (Broker::RabbitMq, Down::Service(down)) => start_rabbitmq(down),
            (_, Down::Service(down)) => drop(down),
            (_, Down::Proxy) => {
                if let Some(proxy) = proxy {
                    proxy.restore();
                }
            }
        }
    }
}

const PUBLISHED: &str = "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'";
const WRITTEN: &str = "SELECT COUNT(*) FROM outbox_events";
const FAILED_ATTEMPTS: &str = "SELECT COUNT(*) FROM outbox_events WHERE attempts > 0";

/// The events written and the events published, or `None` while the
/// database cannot answer.
async fn counts_while_restarting<DB: TestBackend>(db: &TestDatabase<DB>) -> Option<(i64, i64)> {
    let mut connection = db.pool().acquire().await.ok()?;
    let written = DB::fetch_i64(&mut connection, WRITTEN).await.ok()?;
    let published = DB::fetch_i64(&mut connection, PUBLISHED).await.ok()?;
    Some((written, published))
}

/// The broker is unreachable for [`OUTAGE`] with events waiting: the relay
/// backs off, records no failed attempt, uses little CPU, and publishes
/// everything once the broker is back.
async fn broker_outage(broker: Broker) {
    const EVENTS_PER_ROUND: u64 = 2_000;
    let _alone = SERVICES.lock().await;
    let db = outbox_testkit::postgres().await;
    let target = unique_name("outage");
    let collected = broker.consume(&target).await;
    let proxy = broker.proxy().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut enqueued = enqueue_events(db.pool(), &target, EVENTS_PER_ROUND, 200, 500).await;
    let mut relay = RelayProcess::spawn(db.url(), &broker.url_through(proxy.as_ref()), FAST_CONFIG);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count(PUBLISHED).await == EVENTS_PER_ROUND as i64
        })
        .await,
        "the relay publishes before the outage:\n{}",
        relay.log()
    );

    let down = broker.take_down(proxy.as_ref());
    // Committed during the outage: the relay has work it cannot do.
    let log_before_outage = relay.log().len();
    enqueued.extend(enqueue_events(db.pool(), &target, EVENTS_PER_ROUND, 200, 500).await);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let backing_off = relay.log()[log_before_outage..].contains("backing off");
            async move { backing_off }
        })
        .await,
        "the relay never noticed the outage:\n{}",
        relay.log()
    );
    let cpu_before = relay.cpu_seconds();
    let started = Instant::now();
    tokio::time::sleep(OUTAGE).await;
    let cpu_used = relay.cpu_seconds() - cpu_before;
    let outage = started.elapsed().as_secs_f64();
    let failed_attempts = db.count(FAILED_ATTEMPTS).await;
    let published_during_outage = db.count(PUBLISHED).await;
    broker.bring_back(down, proxy.as_ref());

    assert!(relay.is_running(), "the relay survives the outage");
    assert_eq!(
        published_during_outage, EVENTS_PER_ROUND as i64,
        "nothing is marked published while the broker is unreachable"
    );
    assert_eq!(
        failed_attempts,
        0,
        "an unreachable broker costs no event an attempt:\n{}",
        relay.log()
    );
    assert!(
        cpu_used <= OUTAGE_CPU_SHARE * outage,
        "the relay used {cpu_used:.2} CPU seconds over a {outage:.1} s outage: it spins instead \
         of backing off"
    );

    assert!(
        wait_until(Duration::from_secs(120), || async {
            collected.distinct_ids().len() >= enqueued.len()
                && db.count(PUBLISHED).await == enqueued.len() as i64
        })
        .await,
        "every event is published after the broker is back ({} of {} arrived):\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    assert_eq!(db.count(FAILED_ATTEMPTS).await, 0, "no attempt failed");
    check_delivery(&enqueued, &collected.snapshot());
    broker.clean_up(&target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rabbitmq_stopped_for_20s_backs_off_resumes_and_loses_nothing() {
    broker_outage(Broker::RabbitMq).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_frozen_for_20s_backs_off_resumes_and_loses_nothing() {
    broker_outage(Broker::Kafka).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cut_off_for_20s_backs_off_resumes_and_loses_nothing() {
    broker_outage(Broker::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nats_cut_off_for_20s_backs_off_resumes_and_loses_nothing() {
    broker_outage(Broker::Nats).await;
}

/// Writers commit and the relay publishes while `restart` restarts the
/// database: the writers and the relay carry on once it is back, the
/// relay in the same process; nothing is lost and order holds. The caller
/// holds [`SERVICES`].
async fn database_restart_under_writers<DB: outbox::Backend + TestBackend>(
    db: TestDatabase<DB>,
    broker: Broker,
    restart: fn(),
) {
    const WRITERS: u64 = 3;
    let target = unique_name("db-restart");
    let collected = broker.consume(&target).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 10,
        at_least: 100,
        pause: Duration::from_millis(20),
    };
    let writers = spawn_writers(db.pool(), &target, WRITERS, plan, &stop_writing);
    let mut relay = RelayProcess::spawn(db.url(), &broker.url(), FAST_CONFIG);
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count(PUBLISHED).await > 0
        })
        .await,
        "the relay publishes before the restart:\n{}",
        relay.log()
    );

    tokio::task::spawn_blocking(restart)
        .await
        .expect("the restart runs");
    // Back: the writers commit and the relay publishes again.
    let deadline = Instant::now() + Duration::from_secs(120);
    let counts_after_restart = loop {
        if let Some(counts) = counts_while_restarting(&db).await {
            break counts;
        }
        assert!(
            Instant::now() < deadline,
            "the database never answered after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (written_after_restart, published_after_restart) = counts_after_restart;
    assert!(
        wait_until(Duration::from_secs(120), || async {
            counts_while_restarting(&db)
                .await
                .is_some_and(|(written, published)| {
                    written > written_after_restart && published > published_after_restart
                })
        })
        .await,
        "the writers or the relay never carried on after the restart:\n{}",
        relay.log()
    );
    stop_writing.cancel();
    let enqueued = committed_events(join_writers(writers).await, &db).await;

    assert!(
        wait_until(Duration::from_secs(120), || async {
            collected.distinct_ids().len() >= enqueued.len()
                && db.count(PUBLISHED).await == enqueued.len() as i64
        })
        .await,
        "{} of {} events arrived after the restart:\n{}",
        collected.distinct_ids().len(),
        enqueued.len(),
        relay.log()
    );
    assert!(
        relay.is_running(),
        "the relay exited on the restart:\n{}",
        relay.log()
    );
    check_delivery(&enqueued, &collected.snapshot());
    relay.signal("TERM");
    let status = relay.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|status| status.success()),
        "the relay did not exit 0: {status:?}\n{}",
        relay.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_writers_loses_nothing_and_keeps_order() {
    let _alone = SERVICES.lock().await;
    let db = outbox_testkit::postgres().await;
    database_restart_under_writers(db, Broker::Kafka, restart_postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_restarted_under_writers_loses_nothing_and_keeps_order() {
    let _alone = SERVICES.lock().await;
    let db = outbox_testkit::mysql().await;
    database_restart_under_writers(db, Broker::RabbitMq, restart_mariadb).await;
}
