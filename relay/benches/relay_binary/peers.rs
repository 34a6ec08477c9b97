//! The `peers` case: the relay binary beside mq-bridge 1.2.0, on RabbitMQ.
//! Each run gets a fresh database (the relay's `outbox_events`, or
//! mq-bridge's `outbox` table) and a fresh durable queue, a backlog of
//! `--peer-events` over 100 aggregates written by plain SQL in 10
//! transactions and never analyzed; then the relay's process starts, and
//! the time runs until the queue holds every event. Relay and mq-bridge
//! alternate, `--peer-pairs` pairs per mode: polling against mq-bridge's
//! `sqlx` poll, then the logical source against its `postgres_cdc`, each
//! slot made before the backlog. Last, the raw lapin client's rate into
//! the same kind of queue, over one channel and over four, and with bare
//! messages as mq-bridge sends them: the broker's ceiling, which bounds
//! both tools.

mod report;

use std::time::{Duration, Instant};

use crate::broker::Broker;
use crate::database::BenchDatabase;
use crate::keys::KeyDistribution;
use crate::mq_bridge::{self, RouteInput, RunningRoute};
use crate::queue_fill::{Fill, QueueWatch};
use crate::relay::RunningRelay;
use crate::source::SourceKind;
use crate::support::raw::Properties;
use crate::support::raw_channels::raw_lapin_channels;
use crate::support::targets::amqp_target;
use crate::writers::write_backlog_in;
use crate::{DRAIN_LIMIT, Settings, raw_records};
use report::{print_peers, print_run};

/// The backlog's aggregates and transactions.
const AGGREGATES: u64 = 100;
const TRANSACTIONS: u64 = 10;
/// The broker's ceiling: the variants compared (channels, and what the
/// messages carry), rounds, and the confirms outstanding per channel.
const CEILING_VARIANTS: [(usize, Properties); 3] = [
    (1, Properties::Relay),
    (4, Properties::Relay),
    (1, Properties::Bare),
];
const CEILING_ROUNDS: usize = 2;
const CEILING_WINDOW: usize = 2_000;
/// How often the bench checks that mq-bridge's process still runs.
const ALIVE_EVERY: Duration = Duration::from_millis(100);

/// What is compared: polling, or reading the WAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Poll,
    Cdc,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Poll => "polling",
            Mode::Cdc => "CDC",
        }
    }

    fn relay(self) -> &'static str {
        match self {
            Mode::Poll => "relay, polling",
            Mode::Cdc => "relay, --source logical",
        }
    }

    fn mq_bridge(self) -> &'static str {
        match self {
            Mode::Poll => "mq-bridge sqlx (delete_after_read, 100 ms)",
            Mode::Cdc => "mq-bridge postgres_cdc",
        }
    }

    /// The target for the median of relay / mq-bridge.
    fn target(self) -> f64 {
        match self {
            Mode::Poll => 1.1,
            Mode::Cdc => 1.3,
        }
    }
}

/// `--peer-events` (10,000) and `--peer-pairs` (3).
struct PeerSettings {
    events: u64,
    pairs: u64,
}

impl PeerSettings {
    fn load() -> PeerSettings {
        let args: Vec<String> = std::env::args().collect();
        let number = |flag: &str, default: u64| {
            args.iter()
                .position(|arg| arg == flag)
                .and_then(|index| args.get(index + 1))
                .map_or(default, |text| {
                    text.replace('_', "")
                        .parse()
                        .unwrap_or_else(|_| panic!("{flag}: not a number: {text}"))
                })
        };
        PeerSettings {
            events: number("--peer-events", 10_000),
            pairs: number("--peer-pairs", 3),
        }
    }

    fn distribution(&self) -> KeyDistribution {
        KeyDistribution::Uniform {
            aggregates: AGGREGATES,
        }
    }

    fn per_transaction(&self) -> u64 {
        self.events.div_ceil(TRANSACTIONS)
    }
}

/// One pair's runs.
struct Pair {
    relay: Fill,
    mq_bridge: Fill,
}

/// Run the case on RabbitMQ, if among the brokers; print every run and
/// the medians.
pub(crate) async fn peers(settings: &Settings) {
    for broker in settings
        .brokers
        .iter()
        .filter(|&&broker| broker != Broker::RabbitMq)
    {
        println!(
            "== peers: skipped on {}: mq-bridge's poll is compared on RabbitMQ",
            broker.path()
        );
    }
    if !settings.brokers.contains(&Broker::RabbitMq) {
        return;
    }
    let peer = PeerSettings::load();
    println!(
        "== beside mq-bridge {} ({}): {} events over {AGGREGATES} aggregates in {TRANSACTIONS} transactions, {} pairs per mode",
        mq_bridge::VERSION,
        Broker::RabbitMq.path(),
        peer.events,
        peer.pairs
    );
    let python = mq_bridge::python();
    let mut modes = Vec::new();
    for mode in [Mode::Poll, Mode::Cdc] {
        let mut pairs = Vec::new();
        for number in 1..=peer.pairs {
            let relay = relay_run(settings, &peer, mode).await;
            print_run(&format!("{} pair {number}", mode.relay()), &relay, &peer);
            let bridge = mq_bridge_run(settings, &peer, mode, &python).await;
            print_run(
                &format!("{} pair {number}", mode.mq_bridge()),
                &bridge,
                &peer,
            );
            pairs.push(Pair {
                relay,
                mq_bridge: bridge,
            });
        }
        modes.push((mode, pairs));
    }
    print_peers(settings, &peer, &modes);
    broker_ceiling(settings, &peer).await;
}

/// The raw lapin client's rate on this broker, the backlog's records into
/// one durable queue: with the relay's headers over one channel and over
/// four (each aggregate on one channel), and bare (a `message_id` only, as
/// mq-bridge sends) over one. What the broker takes bounds both tools.
/// Alternates the variants, [`CEILING_ROUNDS`] times.
async fn broker_ceiling(settings: &Settings, peer: &PeerSettings) {
    let records = raw_records(peer.distribution(), peer.events, settings.payload_bytes);
    let mut rates: Vec<(usize, Properties, f64)> = Vec::new();
    for _ in 0..CEILING_ROUNDS {
        for (channels, properties) in CEILING_VARIANTS {
            let target = amqp_target("peers-ceiling").await;
            let rate = raw_lapin_channels(
                &settings.amqp_url,
                &target.exchange,
                &records,
                CEILING_WINDOW,
                channels,
                properties,
            )
            .await;
            target.remove().await;
            rates.push((channels, properties, rate));
        }
    }
    for (channels, properties) in CEILING_VARIANTS {
        let measured: Vec<String> = rates
            .iter()
            .filter(|(used, carried, _)| (*used, *carried) == (channels, properties))
            .map(|(_, _, rate)| format!("{rate:.0}"))
            .collect();
        let carried = match properties {
            Properties::Relay => "the relay's headers",
            Properties::Bare => "bare, message_id only",
        };
        println!(
            "  the broker's ceiling: raw lapin, {channels} channel(s), {carried}, confirms: {} events/s",
            measured.join(", ")
        );
    }
}

/// The relay binary on a fresh database and queue, from its process start
/// until the queue holds the backlog.
async fn relay_run(settings: &Settings, peer: &PeerSettings, mode: Mode) -> Fill {
    let source = match mode {
        Mode::Poll => SourceKind::Poll,
        Mode::Cdc => SourceKind::Logical,
    };
    let database = BenchDatabase::create(2, source).await;
    let target = amqp_target("peers-relay").await;
    write_backlog_in(
        &database.pool,
        &target.exchange,
        peer.distribution(),
        peer.events,
        settings.payload_bytes,
        peer.per_transaction(),
    )
    .await;
    let watch = QueueWatch::connect(&settings.amqp_url, &target.queue).await;
    let started = Instant::now();
    let filling = tokio::spawn(watch.until(peer.events, started, DRAIN_LIMIT));
    let relay = RunningRelay::start(
        &database,
        &Broker::RabbitMq.url(settings),
        &settings.log_filter,
    )
    .await;
    let fill = filling.await.expect("the queue's reader");
    let scrape = relay.scrape().await;
    println!(
        "    relay: {} batches, batch publish mean {:.1} ms (outbox_relay_batch_publish_seconds)",
        scrape.batches,
        scrape.batch_publish_seconds * 1e3 / scrape.batches.max(1.0)
    );
    if settings.log_filter != "info" {
        println!("    relay log: {}", relay.log_path().display());
    }
    relay.stop();
    target.remove().await;
    database.drop_database().await;
    fill
}

/// mq-bridge's route on a fresh database and queue, from its process start
/// until the queue holds the backlog.
async fn mq_bridge_run(
    settings: &Settings,
    peer: &PeerSettings,
    mode: Mode,
    python: &std::path::Path,
) -> Fill {
    // A fresh database; the relay's tables in it stay empty.
    let database = BenchDatabase::create(2, SourceKind::Poll).await;
    mq_bridge::create_queue_table(&database.pool).await;
    let target = amqp_target("peers-mq-bridge").await;
    let publication = outbox_testkit::unique_slot_name("mq_bridge_bench_publication");
    let slot_name = outbox_testkit::unique_slot_name("mq_bridge_bench");
    let slot = match mode {
        Mode::Poll => None,
        Mode::Cdc => Some(
            mq_bridge::create_publication_and_slot(
                &database.url,
                &database.pool,
                &publication,
                &slot_name,
            )
            .await,
        ),
    };
    mq_bridge::write_queue_backlog(
        &database.pool,
        peer.distribution(),
        peer.events,
        settings.payload_bytes,
        peer.per_transaction(),
    )
    .await;
    let input = match mode {
        Mode::Poll => RouteInput::Poll,
        Mode::Cdc => RouteInput::Cdc {
            publication: &publication,
            slot: &slot_name,
        },
    };
    let watch = QueueWatch::connect(&settings.amqp_url, &target.queue).await;
    let started = Instant::now();
    let filling = tokio::spawn(watch.until(peer.events, started, DRAIN_LIMIT));
    let mut route = RunningRoute::start(
        python,
        &database.url,
        input,
        &settings.amqp_url,
        &target.queue,
    );
    while !filling.is_finished() {
        assert!(
            route.is_running(),
            "mq-bridge exited before the queue held {} messages; its log ({}):\n{}",
            peer.events,
            route.log_path().display(),
            route.log()
        );
        tokio::time::sleep(ALIVE_EVERY).await;
    }
    let fill = filling.await.expect("the queue's reader");
    if settings.log_filter != "info" {
        println!("    mq-bridge log: {}", route.log_path().display());
    }
    route.stop();
    if slot.is_some() {
        mq_bridge::drop_publication(&database.pool, &publication).await;
    }
    drop(slot);
    target.remove().await;
    database.drop_database().await;
    fill
}
