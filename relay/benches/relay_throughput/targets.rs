//! Where each scenario runs: a fresh PostgreSQL database, Kafka topic or
//! RabbitMQ exchange and queue of its own, through `outbox_testkit`, and
//! the relay's publishers for them.

use std::sync::Arc;

use outbox_relay::publish::{
    KafkaPublisher, KafkaPublisherConfig, Publisher, RabbitMqPublisher, RabbitMqPublisherConfig,
};
use outbox_testkit::{TestDatabase, kafka};
use uuid::Uuid;

use crate::events::outbound;
use crate::support::events::unique_name;
use crate::{LATENCY_PRODUCERS, Settings};

// ---------------------------------------------------------------------------
// Databases

/// A fresh database (`outbox_testkit::postgres`), migrated, with a pool of
/// the bench's own size. Dropped by [`BenchDatabase::drop_database`].
pub(crate) struct BenchDatabase {
    pub(crate) url: String,
    pub(crate) pool: sqlx::PgPool,
    database: TestDatabase<sqlx::Postgres>,
}

pub(crate) async fn create_database() -> BenchDatabase {
    let database = outbox_testkit::postgres().await;
    // The bench sizes its own pool: the latency producers and a few more.
    database.pool().close().await;
    let url = database.url().to_owned();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(LATENCY_PRODUCERS as u32 + 4)
        .connect(&url)
        .await
        .expect("connect to the bench database");
    outbox::migrate(&pool).await.expect("migrate");
    BenchDatabase {
        url,
        pool,
        database,
    }
}

impl BenchDatabase {
    pub(crate) async fn published(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE state = 'published'")
            .fetch_one(&self.pool)
            .await
            .expect("count published")
    }

    pub(crate) async fn drop_database(self) {
        self.pool.close().await;
        // The test database drops the database (WITH (FORCE)) on drop.
        drop(self.database);
    }
}

// ---------------------------------------------------------------------------
// Brokers

/// A fresh topic of `settings.kafka_partitions` partitions.
pub(crate) async fn create_topic(settings: &Settings, prefix: &str) -> String {
    let topic = unique_name(prefix);
    kafka::create_topic(&settings.kafka_brokers, &topic, settings.kafka_partitions).await;
    topic
}

pub(crate) async fn delete_topic(settings: &Settings, topic: &str) {
    kafka::delete_topic(&settings.kafka_brokers, topic).await;
}

pub(crate) fn kafka_publisher(settings: &Settings) -> Arc<KafkaPublisher> {
    let mut config = KafkaPublisherConfig::new(vec![settings.kafka_brokers.clone()]);
    if let Ok(options) = std::env::var("OUTBOX_BENCH_KAFKA_OPTIONS") {
        for option in options
            .split(',')
            .filter(|option| !option.trim().is_empty())
        {
            let (key, value) = option.split_once('=').unwrap_or_else(|| {
                panic!("OUTBOX_BENCH_KAFKA_OPTIONS: `{option}` is not key=value")
            });
            config
                .client_options
                .insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    Arc::new(KafkaPublisher::new(config).expect("kafka publisher"))
}

/// Publish one event so that the producer id, the connections and the topic
/// lookup are in place before anything is timed.
pub(crate) async fn warm_up(publisher: &dyn Publisher, settings: &Settings, topic: &str) -> Uuid {
    let event = outbound(settings, topic, 0);
    let results = publisher.publish(std::slice::from_ref(&event)).await;
    if let Some(Err(failure)) = results.first() {
        panic!("warm-up publish to {topic} failed: {failure}");
    }
    event.event_id
}

pub(crate) fn rabbitmq_publisher(settings: &Settings) -> Arc<RabbitMqPublisher> {
    Arc::new(
        RabbitMqPublisher::new(RabbitMqPublisherConfig::new(settings.amqp_url.clone()))
            .expect("rabbitmq publisher"),
    )
}
