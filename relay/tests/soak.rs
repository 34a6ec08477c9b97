//! A soak run: writers, three relays and a consumer for some minutes,
//! with faults injected at random (SIGKILL, SIGSTOP then SIGCONT of a
//! relay; with service faults, a PostgreSQL restart and RabbitMQ stopped
//! for a while). At the end everything must arrive, in order per
//! aggregate; one line reports what was lost, out of order, duplicated
//! and which faults were injected.
//!
//! Run it with `scripts/soak.sh [--minutes N] [--no-service-faults]`, which
//! sets `OUTBOX_SOAK_MINUTES`, `OUTBOX_SOAK_SERVICE_FAULTS` and
//! `OUTBOX_SOAK_SEED`. With service faults it restarts and stops the shared
//! services: nothing else may run against them meanwhile.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use outbox_testkit::{TestDatabase, rabbitmq, unique_name};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::service_control::{restart_postgres, start_rabbitmq, stop_rabbitmq};
use support::workload::{
    WriterPlan, committed_events, delivery_report, join_writers, spawn_writers,
};
use tokio_util::sync::CancellationToken;

const RELAYS: usize = 3;
const WRITERS: u64 = 3;
const PUBLISHED: &str = "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'";

/// The run's settings, from the environment `scripts/soak.sh` sets.
struct SoakSettings {
    duration: Duration,
    service_faults: bool,
    seed: u64,
}

impl SoakSettings {
    fn from_env() -> SoakSettings {
        let minutes: f64 = std::env::var("OUTBOX_SOAK_MINUTES")
            .ok()
            .map(|minutes| {
                minutes
                    .parse()
                    .unwrap_or_else(|_| panic!("OUTBOX_SOAK_MINUTES={minutes} is not a number"))
            })
            .unwrap_or(10.0);
        let service_faults = std::env::var("OUTBOX_SOAK_SERVICE_FAULTS").as_deref() != Ok("0");
        let seed = std::env::var("OUTBOX_SOAK_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|elapsed| elapsed.as_nanos() as u64)
                    .unwrap_or(1)
            });
        SoakSettings {
            duration: Duration::from_secs_f64(minutes * 60.0),
            service_faults,
            seed,
        }
    }
}

/// A xorshift generator: a run can be replayed with its seed.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low))
    }
}

/// The faults a soak run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillRelay,
    FreezeRelay,
    RestartPostgres,
    StopBroker,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::KillRelay => "sigkill",
            Fault::FreezeRelay => "sigstop",
            Fault::RestartPostgres => "postgres_restart",
            Fault::StopBroker => "broker_stop",
        }
    }
}

/// The relays of the run, restarted when killed or found exited.
struct Relays {
    database_url: String,
    running: Vec<RelayProcess>,
    /// Relays that exited without being killed.
    exits: usize,
}

impl Relays {
    fn start(database_url: &str) -> Relays {
        let mut relays = Relays {
            database_url: database_url.to_owned(),
            running: Vec::new(),
            exits: 0,
        };
        relays.replace_exited();
        relays
    }

    fn spawn(&self) -> RelayProcess {
        RelayProcess::spawn(&self.database_url, &rabbitmq::amqp_url(), FAST_CONFIG)
    }

    /// Start a relay in place of each one that exited, up to [`RELAYS`].
    fn replace_exited(&mut self) {
        let before = self.running.len();
        self.running.retain_mut(RelayProcess::is_running);
        self.exits += before - self.running.len();
        while self.running.len() < RELAYS {
            let relay = self.spawn();
            self.running.push(relay);
        }
    }

    fn kill(&mut self, index: usize) {
        let relay = self.running.swap_remove(index);
        relay.kill9();
        let replacement = self.spawn();
        self.running.push(replacement);
    }
}

/// Inject `fault`, waiting out its length.
async fn inject(fault: Fault, relays: &mut Relays, random: &mut Random) {
    let index = random.below(RELAYS as u64) as usize;
    match fault {
        Fault::KillRelay => relays.kill(index),
        Fault::FreezeRelay => {
            // Sometimes past the 2 s lease, sometimes within it.
            relays.running[index].signal("STOP");
            tokio::time::sleep(random.millis(500, 6_000)).await;
            relays.running[index].signal("CONT");
        }
        Fault::RestartPostgres => {
            tokio::task::spawn_blocking(restart_postgres)
                .await
                .expect("the restart runs");
        }
        Fault::StopBroker => {
            let down = stop_rabbitmq();
            tokio::time::sleep(random.millis(2_000, 15_000)).await;
            tokio::task::spawn_blocking(move || start_rabbitmq(down))
                .await
                .expect("the broker start runs");
        }
    }
}

/// A count, or `None` while the database restarts.
async fn published_while_restarting(db: &TestDatabase<sqlx::Postgres>) -> Option<i64> {
    let mut connection = db.pool().acquire().await.ok()?;
    sqlx::query_scalar::<_, i64>(PUBLISHED)
        .fetch_one(&mut *connection)
        .await
        .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a soak run of minutes, which may restart the shared services: scripts/soak.sh"]
async fn soak() {
    let settings = SoakSettings::from_env();
    let mut random = Random(settings.seed.max(1));
    let mut faults: Vec<Fault> = vec![Fault::KillRelay, Fault::FreezeRelay];
    if settings.service_faults {
        faults.extend([Fault::RestartPostgres, Fault::StopBroker]);
    }
    let db = outbox_testkit::postgres().await;
    let exchange = unique_name("soak");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    outbox::migrate(db.pool()).await.expect("migrate");

    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 20,
        at_least: 0,
        pause: Duration::from_millis(10),
    };
    let writers = spawn_writers(db.pool(), &exchange, WRITERS, plan, &stop_writing);
    let mut relays = Relays::start(db.url());
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let end = Instant::now() + settings.duration;
    while Instant::now() < end {
        tokio::time::sleep(random.millis(1_000, 5_000)).await;
        let fault = faults[random.below(faults.len() as u64) as usize];
        inject(fault, &mut relays, &mut random).await;
        *injected.entry(fault).or_default() += 1;
        relays.replace_exited();
    }
    stop_writing.cancel();
    let enqueued = committed_events(join_writers(writers).await, &db).await;

    relays.replace_exited();
    let drained = wait_until(Duration::from_secs(300), || async {
        collected.distinct_ids().len() >= enqueued.len()
            && published_while_restarting(&db).await == Some(enqueued.len() as i64)
    })
    .await;
    let report = delivery_report(&enqueued, &collected.snapshot());
    let faults_line: Vec<String> = injected
        .iter()
        .map(|(fault, count)| format!("{}={count}", fault.name()))
        .collect();
    println!(
        "soak: seed={} events={} lost={} order_violations={} duplicates={} unknown={} \
         relay_exits={} faults={} ({})",
        settings.seed,
        enqueued.len(),
        report.missing.len(),
        report.out_of_order.len(),
        report.duplicates,
        report.unknown.len(),
        relays.exits,
        injected.values().sum::<usize>(),
        faults_line.join(" ")
    );
    assert!(drained, "the relays never drained the outbox after the run");
    assert!(
        report.missing.is_empty() && report.out_of_order.is_empty() && report.unknown.is_empty(),
        "lost e.g. {:?}; out of order e.g. {:?}; unknown e.g. {:?}",
        &report.missing[..report.missing.len().min(5)],
        &report.out_of_order[..report.out_of_order.len().min(5)],
        &report.unknown[..report.unknown.len().min(5)]
    );
}
