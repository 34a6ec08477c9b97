//! Each broker's scenarios in order, and the printed figures.

use crate::drain::{DrainResult, DrainRun};
use crate::latency::{Latency, relay_latency};
use crate::raw::{raw_lapin, raw_publisher, raw_rdkafka};
use crate::support::consumers::{amqp_consumer, kafka_consumer, percentiles};
use crate::support::targets::amqp_target;
use crate::targets::{create_topic, delete_topic, kafka_publisher, rabbitmq_publisher};
use crate::{KAFKA_PROCESSES, LATENCY_PRODUCERS, PUBLISHER_CHUNK, RABBITMQ_PROCESSES, Settings};

pub(crate) struct BrokerFigures {
    pub(crate) broker: &'static str,
    pub(crate) raw_label: &'static str,
    pub(crate) raw: f64,
    pub(crate) raw_publisher: f64,
    pub(crate) drains: Vec<DrainResult>,
    pub(crate) ceilings: Vec<DrainResult>,
    pub(crate) latency: Option<Latency>,
}

pub(crate) fn print_drain(drain: &DrainResult, raw: f64, raw_publisher: f64) {
    println!(
        "  relay drain, batch_size {}: {:.0} events/s ({} events in {:.2} s; startup to first fetch {:.0} ms; enqueue took {:.2} s)",
        drain.batch_size,
        drain.rate,
        drain.events,
        drain.elapsed.as_secs_f64(),
        drain.startup.as_secs_f64() * 1e3,
        drain.enqueue.as_secs_f64(),
    );
    println!(
        "    ratio relay/raw client = {:.2}, relay/relay-publisher-direct = {:.2}",
        drain.rate / raw,
        drain.rate / raw_publisher
    );
    println!("    {}", drain.cpu.per_event(drain.events));
    println!("{}", drain.phases);
}

pub(crate) fn print_latency(latency: &mut Latency) {
    println!(
        "  latency run: {} events committed one per transaction at {:.0}/s ({} producer tasks)",
        latency.produced, latency.producer_rate, LATENCY_PRODUCERS
    );
    println!(
        "    commit -> publisher ack (broker acknowledged, as seen by the relay): {}",
        percentiles(&mut latency.to_ack)
    );
    println!(
        "    commit -> consumer receives it: {}",
        percentiles(&mut latency.to_consumer)
    );
    println!(
        "    (COMMIT round trip of the producers: {})",
        percentiles(&mut latency.commit_round_trip)
    );
    println!("{}", latency.phases);
}

pub(crate) async fn kafka_scenarios(settings: &Settings) -> BrokerFigures {
    println!("== PostgreSQL -> Kafka ({})", settings.kafka_brokers);
    let topic = create_topic(settings, "raw").await;
    let (raw, count, raw_cpu) = raw_rdkafka(settings, &topic).await;
    println!("  raw rdkafka FutureProducer: {raw:.0} msg/s ({count} messages)");
    println!("    {}", raw_cpu.per_event(count));
    delete_topic(settings, &topic).await;

    let topic = create_topic(settings, "pub").await;
    let publisher = kafka_publisher(settings);
    let (raw_publisher_rate, count) = raw_publisher(settings, publisher.as_ref(), &topic).await;
    println!(
        "  KafkaPublisher called directly, {PUBLISHER_CHUNK} events per call: {raw_publisher_rate:.0} events/s ({count} events)"
    );
    drop(publisher);
    delete_topic(settings, &topic).await;

    let (mut drains, mut ceilings) = (Vec::new(), Vec::new());
    for &batch_size in &settings.batch_sizes {
        for run in [DrainRun::Relay, DrainRun::ReadOnlyCeiling] {
            let topic = create_topic(settings, run.prefix()).await;
            let publisher = kafka_publisher(settings);
            let result = run
                .run(settings, publisher, &topic, batch_size, KAFKA_PROCESSES)
                .await;
            run.report(result, raw, raw_publisher_rate, &mut drains, &mut ceilings);
            delete_topic(settings, &topic).await;
        }
    }

    let latency = if settings.latency_secs > 0 {
        let topic = create_topic(settings, "latency").await;
        let (consumed, consumer) = kafka_consumer(&settings.kafka_brokers, &topic);
        let mut latency =
            relay_latency(settings, kafka_publisher(settings), &topic, consumed).await;
        consumer.abort();
        print_latency(&mut latency);
        delete_topic(settings, &topic).await;
        Some(latency)
    } else {
        None
    };
    BrokerFigures {
        broker: "PostgreSQL → Kafka (tansu)",
        raw_label: "rdkafka FutureProducer",
        raw,
        raw_publisher: raw_publisher_rate,
        drains,
        ceilings,
        latency,
    }
}

pub(crate) async fn rabbitmq_scenarios(settings: &Settings) -> BrokerFigures {
    println!("== PostgreSQL -> RabbitMQ");
    let target = amqp_target("raw").await;
    let (raw, count, raw_cpu) = raw_lapin(settings, &target.exchange).await;
    println!("  raw lapin (confirms, mandatory, persistent): {raw:.0} msg/s ({count} messages)");
    println!("    {}", raw_cpu.per_event(count));
    target.remove().await;

    let target = amqp_target("pub").await;
    let publisher = rabbitmq_publisher(settings);
    let (raw_publisher_rate, count) =
        raw_publisher(settings, publisher.as_ref(), &target.exchange).await;
    println!(
        "  RabbitMqPublisher called directly, {PUBLISHER_CHUNK} events per call: {raw_publisher_rate:.0} events/s ({count} events)"
    );
    drop(publisher);
    target.remove().await;

    let (mut drains, mut ceilings) = (Vec::new(), Vec::new());
    for &batch_size in &settings.batch_sizes {
        for run in [DrainRun::Relay, DrainRun::ReadOnlyCeiling] {
            let target = amqp_target(run.prefix()).await;
            let publisher = rabbitmq_publisher(settings);
            let result = run
                .run(
                    settings,
                    publisher,
                    &target.exchange,
                    batch_size,
                    RABBITMQ_PROCESSES,
                )
                .await;
            run.report(result, raw, raw_publisher_rate, &mut drains, &mut ceilings);
            target.remove().await;
        }
    }

    let latency = if settings.latency_secs > 0 {
        let target = amqp_target("latency").await;
        let (consumed, consumer) = amqp_consumer(&settings.amqp_url, &target.queue).await;
        let mut latency = relay_latency(
            settings,
            rabbitmq_publisher(settings),
            &target.exchange,
            consumed,
        )
        .await;
        consumer.abort();
        print_latency(&mut latency);
        target.remove().await;
        Some(latency)
    } else {
        None
    };
    BrokerFigures {
        broker: "PostgreSQL → RabbitMQ",
        raw_label: "lapin, confirms + mandatory + persistent",
        raw,
        raw_publisher: raw_publisher_rate,
        drains,
        ceilings,
        latency,
    }
}

pub(crate) fn print_summary(settings: &Settings, figures: &mut [BrokerFigures]) {
    if figures.is_empty() {
        return;
    }
    println!();
    println!(
        "## Summary ({} events of ~{} bytes over {} aggregates per drain run)",
        settings.events, settings.payload_bytes, settings.aggregates
    );
    println!();
    println!(
        "| path | raw client (msg/s) | relay publisher called directly (events/s) | relay batch_size | relay drain (events/s) | relay / raw client | relay / publisher direct |"
    );
    println!("|---|---|---|---|---|---|---|");
    for broker in figures.iter() {
        for drain in &broker.drains {
            println!(
                "| {} | {:.0} ({}) | {:.0} | {} | {:.0} | {:.2} | {:.2} |",
                broker.broker,
                broker.raw,
                broker.raw_label,
                broker.raw_publisher,
                drain.batch_size,
                drain.rate,
                drain.rate / broker.raw,
                drain.rate / broker.raw_publisher
            );
        }
    }
    println!();
    println!(
        "| path | page size | read-only ceiling (events/s) | ceiling / raw client | relay drain / ceiling |"
    );
    println!("|---|---|---|---|---|");
    for broker in figures.iter() {
        for ceiling in &broker.ceilings {
            let drain = broker
                .drains
                .iter()
                .find(|drain| drain.batch_size == ceiling.batch_size);
            println!(
                "| {} | {} | {:.0} | {:.2} | {} |",
                broker.broker,
                ceiling.batch_size,
                ceiling.rate,
                ceiling.rate / broker.raw,
                drain.map_or("–".to_owned(), |drain| format!(
                    "{:.2}",
                    drain.rate / ceiling.rate
                ))
            );
        }
    }
    println!();
    println!(
        "| path | events at {}/s | commit → publisher ack | commit → consumer |",
        settings.latency_rate
    );
    println!("|---|---|---|---|");
    for broker in figures.iter_mut() {
        if let Some(latency) = &mut broker.latency {
            println!(
                "| {} | {} | {} | {} |",
                broker.broker,
                latency.produced,
                percentiles(&mut latency.to_ack),
                percentiles(&mut latency.to_consumer)
            );
        }
    }
}
