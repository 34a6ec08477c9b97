//! Commit → consumer latency from separate processes: steady producers in
//! this process commit one event per transaction and note when each
//! `COMMIT` returned; a consumer subscribed before anything is written
//! notes when each event arrives. Through the relay binary, and through a
//! direct producer that publishes each event itself right after its commit,
//! on the same broker.

use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, Target};
use crate::database::BenchDatabase;
use crate::keys::KeyDistribution;
use crate::relay::RunningRelay;
use crate::source::SourceKind;
use crate::support::consumers::Arrivals;
use crate::support::events::EVENT_TYPE;
use crate::support::raw::{
    AMQP_PUBLISH, amqp_confirm_channel, amqp_properties, kafka_headers, kafka_producer,
    warm_up_kafka,
};
use crate::writers::{Pace, Produced, Written, write_steadily};
use crate::{Settings, UNIFORM_AGGREGATES, WRITERS};

/// Longest wait for the last events to arrive.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(120);
/// Pause between the relay's start and the first event: it takes its
/// leases and goes idle, as a relay in service is.
const RELAY_SETTLE: Duration = Duration::from_secs(2);

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
    let (arrivals, consumer) = broker.consumer(settings, &target).await;
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
    };
    let (latencies, missing) = collect(&produced, &arrivals).await;
    match held {
        Held::Relay(relay, warm_producer) => {
            relay.stop();
            drop(warm_producer);
        }
        Held::Kafka => {}
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
    }
}

/// What a route keeps open until every event has arrived: the relay (and
/// the Kafka producer of its warm-up), or the direct producer's AMQP
/// connection. Kafka clients are dropped only once the run is over:
/// dropping one while the broker's metadata changes has crashed librdkafka
/// here.
enum Held {
    Relay(RunningRelay, Option<FutureProducer>),
    Kafka,
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
    };
    wait_for_arrival(arrivals, &warm_id.to_string()).await;
    let relay = RunningRelay::start(database, &broker.url(settings), &settings.log_filter).await;
    tokio::time::sleep(RELAY_SETTLE).await;
    let stop = CancellationToken::new();
    let produced = write_steadily(&database.pool, topic, pace, stop, |_| async {}).await;
    (produced, Held::Relay(relay, warm_producer))
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
    (produced, Held::Kafka)
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
