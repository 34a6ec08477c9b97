//! The embedded default, no services needed: orders and their events are
//! written to SQLite in one transaction each (one is rolled back), and the
//! relay runs in-process, printing each committed event as a CloudEvents
//! JSON line, exactly as `outbox-relay run` does with `--broker stdout`.
//!
//! ```sh
//! cargo run --example quickstart
//! ```

use std::sync::Arc;
use std::time::Duration;

use outbox::Event;
use outbox_relay::publish::StdoutPublisher;
use outbox_relay::store::{OutboxStore, SqliteStore};
use outbox_relay::{Relay, RelayConfig};
use serde::Serialize;
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use tokio_util::sync::CancellationToken;

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

    // 1. The write side: business row and event in one transaction.
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
            eprintln!("committed order {order_id} with event {event_id}");
        } else {
            tx.rollback().await?;
            eprintln!("rolled back order {order_id}: its event {event_id} is gone with it");
        }
    }

    // 2. The relay, in-process, publishing to stdout.
    eprintln!("\nrelay output (one CloudEvent per line):");
    let store: Arc<dyn OutboxStore> = Arc::new(SqliteStore::new(pool.clone()));
    let config = RelayConfig {
        poll_interval_max: Duration::from_millis(50),
        ..RelayConfig::default()
    };
    let settings = outbox_relay::commands::relay_settings("quickstart".to_owned(), &config);
    let relay = Relay::new(
        Arc::clone(&store),
        Arc::new(StdoutPublisher::new()),
        settings,
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));
    while store.status().await?.pending > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    let totals = running.await??;

    let status = store.status().await?;
    eprintln!(
        "\nrelay published {} event(s); pending {}, published {}, dead {}",
        totals.published, status.pending, status.published, status.dead
    );
    pool.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        // The files may not all exist; nothing to do if one is missing.
        let _ = std::fs::remove_file(file);
    }
    Ok(())
}
