//! Commit → consumer latency from separate processes: steady producers in
//! this process commit one event per transaction and note when each
//! `COMMIT` returned; a consumer in a process of its own
//! (`consumer_process.rs`), subscribed before anything is written, notes
//! when each event arrives. Through the relay binary, and through a
//! direct producer that publishes each event itself right after its commit,
//! on the same broker.
//!
//! With the relay's log at debug (`--relay-log outbox_relay=debug`), the
//! slowest event is traced through it (`slowest.rs`).
//!
//! Through the relay, commit → ack too: the relay's
//! `outbox_relay_commit_to_ack_seconds` histogram read at the start and the
//! end of the measured window, the difference of its cumulative buckets
//! being the window's events.

use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, Target};
use crate::database::BenchDatabase;
use crate::held_acks::HeldAcks;
use crate::histogram::Buckets;
use crate::keys::KeyDistribution;
use crate::relay::{RunningRelay, Scrape};
use crate::slowest::Slowest;
use crate::source::SourceKind;
use crate::support::consumers::{Arrivals, percentiles};
use crate::support::events::EVENT_TYPE;
use crate::support::raw::{
    AMQP_PUBLISH, amqp_confirm_channel, amqp_properties, kafka_headers, kafka_producer,
    nats_context, nats_headers, redis_connection, redis_xadd, warm_up_kafka,
};
use crate::writers::{Pace, Produced, Written, write_steadily};
use crate::{Settings, UNIFORM_AGGREGATES, WRITERS};

/// Longest wait for the last events to arrive.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(120);
/// Pause between the relay's start and the first event: it takes its
/// leases and goes idle, as a relay in service is.
const RELAY_SETTLE: Duration = Duration::from_secs(2);
/// Longest wait, once the events have arrived, for the relay to count
/// them all as published (it records the histogram with that counter).
const ACK_LIMIT: Duration = Duration::from_secs(10);
/// Pause between two readings of `/metrics` while waiting for that.
const ACK_POLL: Duration = Duration::from_millis(50);

/// How events reach the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// The relay binary publishes them, polling the table.
    Relay,
    /// The relay binary publishes them, reading the WAL.
    Logical,
    /// The producer publishes each right after its commit.
    Direct,
}

/// Latencies of one route at one rate.
pub(crate) struct LatencyFigures {
    pub(crate) broker: Broker,
    pub(crate) route: Route,
    pub(crate) rate: u64,
    pub(crate) producer_rate: f64,
    pub(crate) latencies: Vec<Duration>,
    pub(crate) missing: usize,
    /// Through the relay: its commit-to-ack histogram over the measured
    /// window (the events written then).
    pub(crate) commit_to_ack: Option<Buckets>,
    /// The producers' transactions, `BEGIN` to `COMMIT` returned.
    pub(crate) transactions: Vec<Duration>,
}

impl LatencyFigures {
    /// The `fraction` percentile, in ms.
    pub(crate) fn percentile(&self, fraction: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let index = ((self.latencies.len() as f64 * fraction).ceil() as usize)
            .clamp(1, self.latencies.len())
            - 1;
        self.latencies[index].as_secs_f64() * 1e3
    }

    /// The `fraction` quantile of commit → ack, in ms, interpolated within
    /// its histogram bucket; `None` for the direct producer or without
    /// observations.
    pub(crate) fn ack_percentile(&self, fraction: f64) -> Option<f64> {
        let seconds = self.commit_to_ack.as_ref()?.quantile(fraction)?;
        Some(seconds * 1e3)
    }

    /// Commit → ack p50 and p99 and the acknowledgements counted, for the
    /// progress lines; empty for the direct producer.
    pub(crate) fn ack_summary(&self) -> String {
        let Some(histogram) = &self.commit_to_ack else {
            return String::new();
        };
        let ms = |fraction| {
            self.ack_percentile(fraction)
                .map_or("n/a".to_owned(), |value| format!("{value:.2} ms"))
        };
        let mut transactions = self.transactions.clone();
        format!(
            "; commit → ack p50 {}, p99 {} (n = {}, the relay's histogram, interpolated within its bucket, \
             from the commit record (logical) or the transaction's now() (polling); its transactions, BEGIN → COMMIT returned: {})",
            ms(0.5),
            ms(0.99),
            histogram.count(),
            percentiles(&mut transactions)
        )
    }
}

/// Wait until the consumer has seen `event_id`: it is subscribed and
/// assigned.
async fn wait_for_arrival(arrivals: &Arrivals, event_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !arrivals.lock().unwrap().contains_key(event_id) {
        assert!(
            Instant::now() < deadline,
            "the consumer did not receive the warm-up event"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Steady producers at `rate` for `settings.latency_secs`, with `route`.
pub(crate) async fn latency(
    settings: &Settings,
    broker: Broker,
    route: Route,
    rate: u64,
) -> LatencyFigures {
    let source = match route {
        Route::Logical => SourceKind::Logical,
        Route::Relay | Route::Direct => SourceKind::Poll,
    };
    let database = BenchDatabase::create(WRITERS as u32 + 2, source).await;
    let target = broker.target(settings, "latency").await;
    let (arrivals, consumer) = broker.consumer(settings, &target);
    let pace = Pace {
        writers: WRITERS,
        rate,
        limit: rate * settings.latency_secs,
        distribution: KeyDistribution::Uniform {
            aggregates: UNIFORM_AGGREGATES,
        },
        payload_bytes: settings.payload_bytes,
    };
    let topic = target.name();
    let (produced, held) = match (route, &target) {
        (Route::Relay | Route::Logical, _) => {
            through_relay(settings, broker, &database, topic, &arrivals, pace).await
        }
        (Route::Direct, Target::Topic { .. }) => {
            direct_kafka(settings, &database, topic, &arrivals, pace).await
        }
        (Route::Direct, Target::Exchange(_)) => {
            direct_amqp(settings, &database, topic, &arrivals, pace).await
        }
        (Route::Direct, Target::Stream { .. }) => {
            direct_redis(settings, &database, topic, &arrivals, pace).await
        }
        (Route::Direct, Target::JetStream { .. }) => {
            direct_nats(settings, &database, topic, &arrivals, pace).await
        }
    };
    let (latencies, missing) = collect(&produced, &arrivals).await;
    let slowest = Slowest::find(&produced.commits, &arrivals);
    let mut commit_to_ack = None;
    match held {
        Held::Relay {
            relay,
            warm_producer,
            start,
            held_acks,
        } => {
            if let Some(held_acks) = &held_acks {
                held_acks.stop_holding();
            }
            commit_to_ack = Some(acknowledged_since(&relay, &start, produced.commits.len()).await);
            let log = relay.stop();
            drop(held_acks);
            if let Some(slowest) = slowest.filter(|_| settings.log_filter.contains("debug")) {
                println!("{}", slowest.trace(&log));
            }
            drop(warm_producer);
        }
        Held::Nothing => {}
        Held::Amqp(connection) => {
            let _ = connection.close(200, "bye".into()).await;
        }
    }
    // The consumer is gone before its topic is deleted.
    consumer.abort();
    let _ = consumer.await;
    target.remove().await;
    database.drop_database().await;
    LatencyFigures {
        broker,
        route,
        rate,
        producer_rate: produced.rate,
        latencies,
        missing,
        commit_to_ack,
        transactions: produced.transactions,
    }
}

/// The relay's commit-to-ack histogram since `start`, once it counts the
/// `written` events as published (or after [`ACK_LIMIT`]).
async fn acknowledged_since(
    relay: &RunningRelay,
    start: &(Scrape, Buckets),
    written: usize,
) -> Buckets {
    let wanted = start.0.published + written as f64;
    let deadline = Instant::now() + ACK_LIMIT;
    loop {
        let (scrape, buckets) = relay.scrape_with_commit_to_ack().await;
        if scrape.published >= wanted || Instant::now() > deadline {
            if scrape.published < wanted {
                eprintln!(
                    "    ! the relay counted {} of {written} events as published",
                    scrape.published - start.0.published
                );
            }
            return buckets.since(&start.1);
        }
        tokio::time::sleep(ACK_POLL).await;
    }
}

/// What a route keeps open until every event has arrived: the relay (and
/// the Kafka producer of its warm-up, its `/metrics` read just before the
/// first event, and the proxy holding its confirms back, if any), or the
/// direct producer's AMQP connection. Kafka clients are dropped only once
/// the run is over: dropping one while the broker's metadata changes has
/// crashed librdkafka here.
enum Held {
    Relay {
        relay: RunningRelay,
        warm_producer: Option<FutureProducer>,
        start: (Scrape, Buckets),
        held_acks: Option<HeldAcks>,
    },
    /// Nothing beyond the producers' own clients.
    Nothing,
    Amqp(lapin::Connection),
}

/// Start the relay once the consumer is live, let it go idle, then write.
async fn through_relay(
    settings: &Settings,
    broker: Broker,
    database: &BenchDatabase,
    topic: &str,
    arrivals: &Arrivals,
    pace: Pace,
) -> (Produced, Held) {
    let (warm_id, warm_producer) = match broker {
        Broker::Kafka => {
            let producer = kafka_producer(&settings.kafka_brokers);
            (warm_up_kafka(&producer, topic).await, Some(producer))
        }
        Broker::RabbitMq => {
            let (connection, _, warm_id) = amqp_confirm_channel(&settings.amqp_url, topic).await;
            let _ = connection.close(200, "bye".into()).await;
            (warm_id, None)
        }
        Broker::Redis => (redis_connection(&settings.redis_url, topic).await.1, None),
        Broker::Nats => (nats_context(&settings.nats_url, topic).await.1, None),
    };
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let (broker_url, held_acks) =
        if broker == Broker::RabbitMq && !settings.latency_held_acks.is_zero() {
            let held = HeldAcks::start(&settings.amqp_url, settings.latency_held_acks).await;
            (held.route(&settings.amqp_url), Some(held))
        } else {
            (broker.url(settings), None)
        };
    let relay = RunningRelay::start(database, &broker_url, &settings.log_filter).await;
    tokio::time::sleep(RELAY_SETTLE).await;
    let start = relay.scrape_with_commit_to_ack().await;
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, topic, pace, stop, |_| async {}).await;
    (
        produced,
        Held::Relay {
            relay,
            warm_producer,
            start,
            held_acks,
        },
    )
}

/// Each writer sends its event to Kafka right after its commit.
async fn direct_kafka(
    settings: &Settings,
    database: &BenchDatabase,
    topic: &str,
    arrivals: &Arrivals,
    pace: Pace,
) -> (Produced, Held) {
    let producer = kafka_producer(&settings.kafka_brokers);
    let warm_id = warm_up_kafka(&producer, topic).await;
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let destination = topic.to_owned();
    let send = move |event: Written| {
        let producer = producer.clone();
        let topic = destination.clone();
        async move {
            let record = FutureRecord::to(&topic)
                .key(&event.aggregate_id)
                .payload(&event.payload)
                .headers(kafka_headers(&event.event_id, &event.aggregate_id));
            match producer.send_result(record) {
                Ok(delivery) => drop(tokio::spawn(async move {
                    if !matches!(delivery.await, Ok(Ok(_))) {
                        eprintln!("    ! direct Kafka delivery failed");
                    }
                })),
                Err((error, _)) => eprintln!("    ! direct Kafka send failed: {error}"),
            }
        }
    };
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, topic, pace, stop, send).await;
    (produced, Held::Nothing)
}

/// Each writer publishes its event to RabbitMQ (confirms awaited in the
/// background) right after its commit.
async fn direct_amqp(
    settings: &Settings,
    database: &BenchDatabase,
    exchange: &str,
    arrivals: &Arrivals,
    pace: Pace,
) -> (Produced, Held) {
    let (connection, channel, warm_id) = amqp_confirm_channel(&settings.amqp_url, exchange).await;
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let destination = exchange.to_owned();
    let send = move |event: Written| {
        let channel = channel.clone();
        let exchange = destination.clone();
        async move {
            let confirm = channel
                .basic_publish(
                    exchange.as_str().into(),
                    EVENT_TYPE.into(),
                    AMQP_PUBLISH,
                    event.payload.as_bytes(),
                    amqp_properties(&event.event_id, &event.aggregate_id),
                )
                .await
                .expect("direct AMQP publish");
            tokio::spawn(async move {
                if confirm
                    .await
                    .map_or(true, |confirmation| confirmation.is_nack())
                {
                    eprintln!("    ! direct AMQP publish not confirmed");
                }
            });
        }
    };
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, exchange, pace, stop, send).await;
    (produced, Held::Amqp(connection))
}

/// Each writer adds its event to the Redis stream (the reply awaited in
/// the background) right after its commit.
async fn direct_redis(
    settings: &Settings,
    database: &BenchDatabase,
    stream: &str,
    arrivals: &Arrivals,
    pace: Pace,
) -> (Produced, Held) {
    let (connection, warm_id) = redis_connection(&settings.redis_url, stream).await;
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let destination = stream.to_owned();
    let send = move |event: Written| {
        let mut connection = connection.clone();
        let xadd = redis_xadd(
            &destination,
            &event.event_id,
            &event.aggregate_id,
            event.payload.as_bytes(),
        );
        async move {
            tokio::spawn(async move {
                if let Err(error) = xadd.query_async::<String>(&mut connection).await {
                    eprintln!("    ! direct XADD failed: {error}");
                }
            });
        }
    };
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, stream, pace, stop, send).await;
    (produced, Held::Nothing)
}

/// Each writer publishes its event to the JetStream subject (the
/// acknowledgement awaited in the background) right after its commit.
async fn direct_nats(
    settings: &Settings,
    database: &BenchDatabase,
    subject: &str,
    arrivals: &Arrivals,
    pace: Pace,
) -> (Produced, Held) {
    let (jetstream, warm_id) = nats_context(&settings.nats_url, subject).await;
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let destination = subject.to_owned();
    let send = move |event: Written| {
        let jetstream = jetstream.clone();
        let subject = destination.clone();
        async move {
            tokio::spawn(async move {
                let published = jetstream
                    .publish_with_headers(
                        subject,
                        nats_headers(&event.event_id, &event.aggregate_id),
                        event.payload.into(),
                    )
                    .await;
                let acknowledged = match published {
                    Ok(acknowledgement) => acknowledgement.await.map(|_| ()),
                    Err(error) => Err(error),
                };
                if let Err(error) = acknowledged {
                    eprintln!("    ! direct JetStream publish failed: {error}");
                }
            });
        }
    };
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, subject, pace, stop, send).await;
    (produced, Held::Nothing)
}

/// Wait for every committed event to arrive (at most `ARRIVAL_LIMIT`);
/// returns the sorted latencies and how many never arrived.
async fn collect(produced: &Produced, arrivals: &Arrivals) -> (Vec<Duration>, usize) {
    let deadline = Instant::now() + ARRIVAL_LIMIT;
    loop {
        let missing = {
            let arrived = arrivals.lock().unwrap();
            produced
                .commits
                .keys()
                .filter(|id| !arrived.contains_key(&id.to_string()))
                .count()
        };
        if missing == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let arrived = arrivals.lock().unwrap();
    let mut latencies: Vec<Duration> = produced
        .commits
        .iter()
        .filter_map(|(id, committed)| {
            arrived
                .get(&id.to_string())
                .map(|at| at.saturating_duration_since(*committed))
        })
        .collect();
    latencies.sort_unstable();
    let missing = produced.commits.len() - latencies.len();
    (latencies, missing)
}
