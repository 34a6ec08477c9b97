//! The Redis reference: a consumer of the group that does the same invoice
//! writes without the inbox. It reads up to `BATCH_SIZE` entries with one
//! `XREADGROUP` (blocking while none are there), reads each entry's order
//! from its `data` field, writes the batch's invoices in one plain
//! transaction with one `INSERT ... SELECT * FROM unnest(...) ON CONFLICT
//! (order_id) DO NOTHING` (the table's key is its only deduplication),
//! commits it, then `XACK`s the batch.

use std::time::Duration;

use outbox_testkit::{TestDatabase, unique_name};
use redis::Value;
use sqlx::Postgres;
use sqlx::postgres::PgPoolOptions;
use uuid::Uuid;

use crate::database;
use crate::inbox_consumer::BATCH_SIZE;
use crate::load::RedisStream;
use crate::report::{Measured, Stopwatch};

/// Longest wait for the next entries before the bench gives up, in ms.
const BLOCK_MS: u64 = 60_000;

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

/// The entry ids and invoices of an `XREADGROUP` reply (RESP2: `[[stream,
/// [[id, [field, value, ...]], ...]]]`).
fn entries(reply: Value) -> Vec<(String, Invoice)> {
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(text) => text.clone().into_bytes(),
        other => panic!("raw Redis consumer: not a string in the reply: {other:?}"),
    };
    let Value::Array(streams) = reply else {
        panic!("raw Redis consumer: no entries within {BLOCK_MS} ms: {reply:?}");
    };
    let mut read = Vec::new();
    for stream in streams {
        let Value::Array(parts) = stream else {
            panic!("raw Redis consumer: a stream is not [name, entries]");
        };
        let Some(Value::Array(list)) = parts.into_iter().nth(1) else {
            panic!("raw Redis consumer: a stream without entries");
        };
        for entry in list {
            let Value::Array(parts) = entry else {
                panic!("raw Redis consumer: an entry is not [id, fields]");
            };
            let id = String::from_utf8_lossy(&text(&parts[0])).into_owned();
            let Value::Array(fields) = &parts[1] else {
                panic!("raw Redis consumer: entry {id} has no fields");
            };
            let data = fields
                .chunks(2)
                .find(|pair| text(&pair[0]) == b"data")
                .map(|pair| text(&pair[1]))
                .unwrap_or_else(|| panic!("raw Redis consumer: entry {id} has no data"));
            let invoice: Invoice = serde_json::from_slice(&data).unwrap_or_else(|error| {
                panic!("raw Redis consumer: a payload that is not an order: {error}")
            });
            read.push((id, invoice));
        }
    }
    read
}

/// Consume every entry of `stream` into `database`.
pub(crate) async fn run(
    stream: &RedisStream,
    database: &TestDatabase<Postgres>,
    events: usize,
) -> Measured {
    let deliveries = 2 * events;
    let group = unique_name("peers-raw");
    let stopwatch = Stopwatch::start(database.pool());

    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(database.url())
        .await
        .unwrap_or_else(|error| panic!("raw Redis consumer: connect the pool: {error}"));
    let client = redis::Client::open(outbox_testkit::redis::redis_url())
        .unwrap_or_else(|error| panic!("raw Redis consumer: the URL: {error}"));
    let reading = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_millis(BLOCK_MS + 10_000)));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&reading)
        .await
        .unwrap_or_else(|error| panic!("raw Redis consumer: connect to Redis: {error}"));
    let _: Value = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream.stream)
        .arg(&group)
        .arg("0")
        .query_async(&mut connection)
        .await
        .unwrap_or_else(|error| panic!("raw Redis consumer: XGROUP CREATE: {error}"));

    let mut settled = 0;
    while settled < deliveries {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&group)
            .arg("raw")
            .arg("COUNT")
            .arg(BATCH_SIZE)
            .arg("BLOCK")
            .arg(BLOCK_MS)
            .arg("STREAMS")
            .arg(&stream.stream)
            .arg(">")
            .query_async(&mut connection)
            .await
            .unwrap_or_else(|error| panic!("raw Redis consumer: XREADGROUP: {error}"));
        let batch = entries(reply);
        let order_ids: Vec<Uuid> = batch.iter().map(|(_, invoice)| invoice.order_id).collect();
        let amounts: Vec<i64> = batch
            .iter()
            .map(|(_, invoice)| invoice.amount_cents)
            .collect();
        let mut transaction = pool.begin().await.expect("raw Redis consumer: begin");
        sqlx::query(INSERT)
            .bind(&order_ids)
            .bind(&amounts)
            .execute(&mut *transaction)
            .await
            .expect("raw Redis consumer: insert the batch's invoices");
        transaction
            .commit()
            .await
            .expect("raw Redis consumer: commit");
        let ids: Vec<&str> = batch.iter().map(|(id, _)| id.as_str()).collect();
        let _: u64 = redis::cmd("XACK")
            .arg(&stream.stream)
            .arg(&group)
            .arg(&ids)
            .query_async(&mut connection)
            .await
            .unwrap_or_else(|error| panic!("raw Redis consumer: XACK: {error}"));
        settled += batch.len();
    }
    let measured = stopwatch.stop().await;
    pool.close().await;
    assert_eq!(
        settled, deliveries,
        "raw Redis consumer: read more entries than were added"
    );
    database::verify(database.pool(), "raw Redis consumer", events, false).await;
    let pending = stream.pending(&group).await;
    assert_eq!(
        pending, 0,
        "raw Redis consumer: {pending} entries left pending"
    );
    measured
}
