//! The embedded default, no services needed: SQLite, three orders written
//! with their events in one transaction each, one of them rolled back.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

use outbox::Event;
use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{Row, SqlitePool};

#[derive(Serialize, Event)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: String,
    total_cents: i64,
}

const CREATE_ORDERS: &str =
    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, total_cents INTEGER NOT NULL)";
const INSERT_ORDER: &str = "INSERT INTO orders (id, total_cents) VALUES (?1, ?2)";
const LIST_EVENTS: &str = "SELECT id, event_id, event_type, aggregate_id, payload, state \
                           FROM outbox_events ORDER BY id";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join(format!("outbox-quickstart-{}.db", std::process::id()));
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    let pool = SqlitePool::connect_with(options).await?;
    outbox::migrate(&pool).await?;
    sqlx::query(CREATE_ORDERS).execute(&pool).await?;

    for (order_id, total_cents, commit) in [
        ("o-1", 1250, true),
        ("o-2", 990, false),
        ("o-3", 4200, true),
    ] {
        let mut tx = pool.begin().await?;
        sqlx::query(INSERT_ORDER)
            .bind(order_id)
            .bind(total_cents)
            .execute(&mut *tx)
            .await?;
        let event = OrderCreated {
            order_id: order_id.to_owned(),
            total_cents,
        };
        let event_id = outbox::enqueue(&mut tx, &event).await?;
        if commit {
            tx.commit().await?;
            println!("committed order {order_id} with event {event_id}");
        } else {
            tx.rollback().await?;
            println!("rolled back order {order_id}: its event {event_id} is gone with it");
        }
    }

    println!("\noutbox_events in {}:", path.display());
    for row in sqlx::query(LIST_EVENTS).fetch_all(&pool).await? {
        println!(
            "  #{} {} {} aggregate={} payload={} state={}",
            row.try_get::<i64, _>("id")?,
            row.try_get::<String, _>("event_id")?,
            row.try_get::<String, _>("event_type")?,
            row.try_get::<String, _>("aggregate_id")?,
            row.try_get::<String, _>("payload")?,
            row.try_get::<String, _>("state")?,
        );
    }
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}
