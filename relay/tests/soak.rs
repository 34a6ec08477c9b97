//! A soak run: writers, three relays and a consumer for some minutes,
//! with faults injected at random (SIGKILL, SIGSTOP then SIGCONT of a
//! relay; with service faults, a PostgreSQL restart and the broker down
//! for a while: RabbitMQ stopped, or tansu frozen). The writers start
//! before the first relay, as in production. At the end everything must
//! arrive, in order per aggregate; one line reports what was lost, out of
//! order, duplicated and which faults were injected.
//!
//! Run it with `scripts/soak.sh [--minutes N] [--source S] [--broker B]
//! [--no-service-faults]`, which sets `OUTBOX_SOAK_MINUTES`,
//! `OUTBOX_SOAK_SOURCE` (`polling` or `logical`: three relays on one
//! slot), `OUTBOX_SOAK_BROKER` (`rabbitmq` or `kafka`),
//! `OUTBOX_SOAK_SERVICE_FAULTS`, `OUTBOX_SOAK_SEED` and `OUTBOX_SOAK_ONLY`
//! (`--only`). `OUTBOX_SOAK_DUMP=<dir>` writes the events enqueued and
//! received there (`enqueued.txt`, `received.txt`), to trace a failure. With service
//! faults it restarts and stops the shared services: nothing else may run
//! against them meanwhile.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use outbox_testkit::{
    Collected, ReplicationSlotGuard, TestDatabase, kafka, rabbitmq, unique_name, unique_slot_name,
};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use support::service_control::{
    freeze, restart_postgres, start_rabbitmq, stop_rabbitmq, tansu_pid,
};
use support::workload::{
    WriterPlan, committed_events, delivery_report, join_writers, spawn_writers,
};
use tokio_util::sync::CancellationToken;

const RELAYS: usize = 3;
const WRITERS: u64 = 3;
const PUBLISHED: &str = "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'";

/// Where the relays find events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    Polling,
    /// Three relays on one slot, which the first of them creates: the
    /// events the writers committed before it are the slot's backlog.
    Logical,
}

/// Where the relays publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broker {
    RabbitMq,
    Kafka,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Polling => "polling",
            Source::Logical => "logical",
        }
    }
}

impl Broker {
    fn name(self) -> &'static str {
        match self {
            Broker::RabbitMq => "rabbitmq",
            Broker::Kafka => "kafka",
        }
    }
}

/// The partitions of the soak's Kafka topic.
const KAFKA_PARTITIONS: i32 = 3;

/// The run's settings, from the environment `scripts/soak.sh` sets.
struct SoakSettings {
    duration: Duration,
    source: Source,
    broker: Broker,
    service_faults: bool,
    seed: u64,
}

/// The environment variable `name`, read by `parse`, or `default` when it
/// is not set; panics naming the variable and its value when `parse`
/// refuses it.
fn setting<T>(name: &str, default: T, parse: impl Fn(&str) -> Option<T>) -> T {
    match std::env::var(name) {
        Ok(value) => parse(&value).unwrap_or_else(|| panic!("{name}={value} is not understood")),
        Err(_) => default,
    }
}

impl SoakSettings {
    fn from_env() -> SoakSettings {
        let minutes: f64 = setting("OUTBOX_SOAK_MINUTES", 10.0, |minutes| minutes.parse().ok());
        let source = setting("OUTBOX_SOAK_SOURCE", Source::Polling, |source| {
            [Source::Polling, Source::Logical]
                .into_iter()
                .find(|known| known.name() == source)
        });
        let broker = setting("OUTBOX_SOAK_BROKER", Broker::RabbitMq, |broker| {
            [Broker::RabbitMq, Broker::Kafka]
                .into_iter()
                .find(|known| known.name() == broker)
        });
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
            source,
            broker,
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

/// How the relays are started: the database, the broker's URL and the
/// source's arguments.
struct RelayCommand {
    database_url: String,
    broker_url: String,
    run_args: Vec<String>,
}

impl RelayCommand {
    fn spawn(&self) -> RelayProcess {
        let run_args: Vec<&str> = self.run_args.iter().map(String::as_str).collect();
        RelayProcess::spawn_with_args(
            &self.database_url,
            &self.broker_url,
            FAST_CONFIG,
            &[],
            &run_args,
        )
    }
}

/// The relays of the run, restarted when killed or found exited.
struct Relays {
    command: RelayCommand,
    running: Vec<RelayProcess>,
    /// Relays that exited without being killed.
    exits: usize,
}

impl Relays {
    fn start(command: RelayCommand) -> Relays {
        let mut relays = Relays {
            command,
            running: Vec::new(),
            exits: 0,
        };
        relays.replace_exited();
        relays
    }

    fn spawn(&self) -> RelayProcess {
        self.command.spawn()
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
async fn inject(fault: Fault, broker: Broker, relays: &mut Relays, random: &mut Random) {
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
        Fault::StopBroker if broker == Broker::RabbitMq => {
            let down = stop_rabbitmq();
            tokio::time::sleep(random.millis(2_000, 15_000)).await;
            tokio::task::spawn_blocking(move || start_rabbitmq(down))
                .await
                .expect("the broker start runs");
        }
        Fault::StopBroker => {
            // tansu keeps its log in memory: frozen, not stopped.
            let _thawed_on_drop = freeze(tansu_pid(&kafka::brokers()));
            tokio::time::sleep(random.millis(2_000, 15_000)).await;
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
    // `OUTBOX_SOAK_ONLY=broker_stop,sigkill`: only those faults, to find
    // which one a failure comes with.
    if let Ok(only) = std::env::var("OUTBOX_SOAK_ONLY") {
        let names: Vec<&str> = only.split(',').map(str::trim).collect();
        faults.retain(|fault| names.contains(&fault.name()));
        assert!(!faults.is_empty(), "OUTBOX_SOAK_ONLY={only} names no fault");
    }
    let db = outbox_testkit::postgres().await;
    let target = unique_name("soak");
    let (collected, broker_url): (Collected, String) = match settings.broker {
        Broker::RabbitMq => (
            rabbitmq::exchange_consumer(&target).await,
            rabbitmq::amqp_url(),
        ),
        Broker::Kafka => (
            kafka::topic_consumer(&target, KAFKA_PARTITIONS).await,
            format!("kafka://{}", kafka::brokers()),
        ),
    };
    outbox::migrate(db.pool()).await.expect("migrate");
    let slot = unique_slot_name("outbox_soak");
    let _slot_guard = ReplicationSlotGuard::new(db.url(), &slot);
    let run_args = match settings.source {
        Source::Polling => Vec::new(),
        Source::Logical => vec![
            "--source".to_owned(),
            "logical".to_owned(),
            "--slot".to_owned(),
            slot,
        ],
    };

    let stop_writing = CancellationToken::new();
    let plan = WriterPlan {
        writer: 0,
        aggregates: 20,
        at_least: 0,
        pause: Duration::from_millis(10),
    };
    let writers = spawn_writers(db.pool(), &target, WRITERS, plan, &stop_writing);
    // The writers commit before the first relay starts (and, on the
    // logical source, before the slot exists).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut relays = Relays::start(RelayCommand {
        database_url: db.url().to_owned(),
        broker_url,
        run_args,
    });
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let end = Instant::now() + settings.duration;
    while Instant::now() < end {
        tokio::time::sleep(random.millis(1_000, 5_000)).await;
        let fault = faults[random.below(faults.len() as u64) as usize];
        inject(fault, settings.broker, &mut relays, &mut random).await;
        *injected.entry(fault).or_default() += 1;
        relays.replace_exited();
    }
    stop_writing.cancel();
    let enqueued = committed_events(join_writers(writers).await, &db).await;

    relays.replace_exited();
    // Streamed events stay pending (stream-owned) until retention: on the
    // logical source only the consumer's count says the run drained.
    let drained = wait_until(Duration::from_secs(300), || async {
        collected.distinct_ids().len() >= enqueued.len()
            && (settings.source == Source::Logical
                || published_while_restarting(&db).await == Some(enqueued.len() as i64))
    })
    .await;
    let received = collected.snapshot();
    let report = delivery_report(&enqueued, &received);
    if let Ok(dir) = std::env::var("OUTBOX_SOAK_DUMP") {
        let lines = |items: Vec<String>| items.join("\n") + "\n";
        let enqueued_lines = enqueued.iter().map(ToString::to_string).collect();
        let received_lines = received
            .iter()
            .map(|message| format!("{} {}", message.ce_id, message.aggregate_id))
            .collect();
        std::fs::write(format!("{dir}/enqueued.txt"), lines(enqueued_lines)).expect("dump");
        std::fs::write(format!("{dir}/received.txt"), lines(received_lines)).expect("dump");
    }
    let faults_line: Vec<String> = injected
        .iter()
        .map(|(fault, count)| format!("{}={count}", fault.name()))
        .collect();
    println!(
        "soak: source={} broker={} seed={} events={} lost={} order_violations={} \
         duplicates={} unknown={} relay_exits={} faults={} ({})",
        settings.source.name(),
        settings.broker.name(),
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
