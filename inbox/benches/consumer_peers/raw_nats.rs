//! The NATS reference: a durable pull consumer of its own (explicit
//! acknowledgement) that does the same invoice writes without the inbox.
//! It fetches up to `BATCH_SIZE` messages with one pull request (those
//! the stream holds, without waiting for more), reads each payload's
//! order, writes the batch's invoices in one plain transaction with one
//! `INSERT ... SELECT * FROM unnest(...) ON CONFLICT (order_id) DO
//! NOTHING` (the table's key is its only deduplication), commits it, then
//! acknowledges every message of the batch, awaiting the server's
//! confirmation of each (as the inbox does), all at once.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use futures::StreamExt;
use futures::future::try_join_all;
use outbox_testkit::{TestDatabase, unique_name};
use sqlx::Postgres;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::database;
use crate::inbox_consumer::BATCH_SIZE;
use crate::load::NatsStream;
use crate::report::{Measured, Stopwatch};

/// Longest the stream may have nothing to fetch before the bench gives up.
const FETCH_LIMIT: Duration = Duration::from_secs(60);

/// A batch's invoices in one statement, as the batched inbox's handler
/// writes them; the table's key is the only deduplication.
const INSERT: &str = "INSERT INTO invoices (order_id, amount_cents) \
     SELECT * FROM unnest($1::uuid[], $2::bigint[]) ON CONFLICT (order_id) DO NOTHING";

/// The payload, as the handler reads it.
#[derive(serde::Deserialize)]
struct Invoice {
    order_id: Uuid,
    amount_cents: i64,
}

/// The messages the stream holds for `consumer` now, up to `BATCH_SIZE`;
/// waits (polling) while it holds none, at most `FETCH_LIMIT`.
async fn fetch_batch(consumer: &PullConsumer) -> Vec<async_nats::jetstream::Message> {
    let deadline = tokio::time::Instant::now() + FETCH_LIMIT;
    loop {
        let mut fetched = consumer
            .fetch()
            .max_messages(BATCH_SIZE)
            .messages()
            .await
            .unwrap_or_else(|error| panic!("raw NATS consumer: fetch: {error}"));
        let mut batch = Vec::with_capacity(BATCH_SIZE);
        while let Some(message) = fetched.next().await {
            batch.push(
                message.unwrap_or_else(|error| panic!("raw NATS consumer: a message: {error}")),
            );
        }
        if !batch.is_empty() {
            return batch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "raw NATS consumer: nothing to fetch within {FETCH_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Consume every message of `stream` into `database`.
pub(crate) async fn run(
    stream: &NatsStream,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let deliveries = 2 * events;
    let durable = unique_name("peers-raw");
    let stopwatch = Stopwatch::start(database.pool());

    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(database.url())
        .await
        .unwrap_or_else(|error| panic!("raw NATS consumer: connect the pool: {error}"));
    let consumer: PullConsumer = stream
        .jetstream
        .get_stream(&stream.stream)
        .await
        .unwrap_or_else(|error| panic!("raw NATS consumer: stream {}: {error}", stream.stream))
        .create_consumer(pull::Config {
            durable_name: Some(durable.clone()),
            ack_policy: AckPolicy::Explicit,
            ..pull::Config::default()
        })
        .await
        .unwrap_or_else(|error| panic!("raw NATS consumer: create {durable}: {error}"));

    let mut settled = 0;
    while settled < deliveries {
        let batch = fetch_batch(&consumer).await;
        let invoices: Vec<Invoice> = batch
            .iter()
            .map(|message| {
                serde_json::from_slice(&message.payload).unwrap_or_else(|error| {
                    panic!("raw NATS consumer: a payload that is not an order: {error}")
                })
            })
            .collect();
        let order_ids: Vec<Uuid> = invoices.iter().map(|invoice| invoice.order_id).collect();
        let amounts: Vec<i64> = invoices
            .iter()
            .map(|invoice| invoice.amount_cents)
            .collect();
        let mut transaction = pool.begin().await.expect("raw NATS consumer: begin");
        sqlx::query(INSERT)
            .bind(&order_ids)
            .bind(&amounts)
            .execute(&mut *transaction)
            .await
            .expect("raw NATS consumer: insert the batch's invoices");
        transaction
            .commit()
            .await
            .expect("raw NATS consumer: commit");
        try_join_all(batch.iter().map(|message| message.double_ack()))
            .await
            .unwrap_or_else(|error| panic!("raw NATS consumer: acknowledge: {error}"));
        settled += batch.len();
    }
    let measured = stopwatch.stop().await;
    pool.close().await;
    assert_eq!(
        settled, deliveries,
        "raw NATS consumer: fetched more messages than were published"
    );
    database::verify(database.pool(), "raw NATS consumer", events, false).await;
    let unsettled = stream.unsettled(&durable).await;
    assert_eq!(
        unsettled, 0,
        "raw NATS consumer: {unsettled} messages unsettled"
    );
    measured
}
