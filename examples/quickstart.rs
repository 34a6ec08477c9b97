//! `cargo run -p outbox-e2e --example quickstart`
//!
//! The embedded default, no services needed: orders and their events are
//! written to SQLite in one transaction each (one is rolled back); the relay
//! runs in-process, printing each committed event as a CloudEvents JSON line
//! on stdout, exactly as `outbox-relay run` does with `--broker stdout`; and
//! a billing consumer reads those lines back through the inbox, recording
//! one invoice per order. The first event is delivered twice: the second
//! delivery is a duplicate and changes nothing. The narration goes to
//! stderr, so stdout holds only the published events.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use outbox::Event;
use outbox_inbox::{Inbox, IncomingEvent, Outcome};
use outbox_relay::publish::{Publisher, StdoutPublisher};
use outbox_relay::{EventSourceKind, RelayAdmin, RelayConfig, RelayService};
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use tokio_util::sync::CancellationToken;

#[derive(Serialize, Deserialize, Event)]
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
const CREATE_INVOICES: &str = "CREATE TABLE IF NOT EXISTS invoices \
     (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount_cents INTEGER NOT NULL)";
const INSERT_INVOICE: &str = "INSERT INTO invoices (order_id, amount_cents) VALUES (?1, ?2)";
const INVOICES_PER_ORDER: &str =
    "SELECT order_id, COUNT(*) FROM invoices GROUP BY order_id ORDER BY order_id";

/// The consumer name the inbox records deliveries under.
const CONSUMER: &str = "billing";

/// A writer that copies everything to stdout and keeps a copy, so the
/// events the relay prints can be read back in process.
#[derive(Clone, Default)]
struct TeeToStdout {
    copy: Arc<Mutex<Vec<u8>>>,
}

impl TeeToStdout {
    /// Everything written so far.
    fn contents(&self) -> Vec<u8> {
        self.copy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Write for TeeToStdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let written = std::io::stdout().write(bytes)?;
        self.copy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(&bytes[..written]);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// Deliver one published line to the billing inbox: record an invoice
/// unless this event was processed before.
async fn deliver(
    inbox: &Inbox<sqlx::Sqlite>,
    line: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let incoming = IncomingEvent::from_structured_json(line.as_bytes())?;
    let order: OrderCreated = incoming.decode()?;
    let outcome = inbox
        .process(&incoming.id, async |tx| {
            sqlx::query(INSERT_INVOICE)
                .bind(&order.order_id)
                .bind(order.total_cents)
                .execute(&mut *tx)
                .await?;
            Ok(())
        })
        .await?;
    match outcome {
        Outcome::Processed(()) => eprintln!(
            "event {} (order {}): processed, invoice recorded",
            incoming.id, order.order_id
        ),
        Outcome::Duplicate => eprintln!(
            "event {} (order {}): duplicate delivery, ignored",
            incoming.id, order.order_id
        ),
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A file of its own per run (named after the process), so quickstarts
    // started side by side never share one; on a shared file
    // `outbox::migrate` would be safe as well, under SQLite's write lock.
    let path = std::env::temp_dir().join(format!("outbox-quickstart-{}.db", std::process::id()));
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    let pool = SqlitePool::connect_with(options).await?;
    outbox::migrate(&pool).await?;
    sqlx::query(CREATE_ORDERS).execute(&pool).await?;
    sqlx::query(CREATE_INVOICES).execute(&pool).await?;

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
    let mut config = RelayConfig::default();
    config.poll_interval_max = Duration::from_millis(50);
    config.instance_id = Some("quickstart".to_owned());
    let published = TeeToStdout::default();
    let publisher: Arc<dyn Publisher> = Arc::new(StdoutPublisher::with_writer(published.clone()));
    let relay = RelayService::builder()
        .database(pool.clone())
        .broker(publisher)
        .config(config)
        .build()?;
    let stop = CancellationToken::new();
    let running = tokio::spawn(relay.run(stop.clone()));
    let admin = RelayAdmin::connect(pool.clone()).await?;
    while admin.status(EventSourceKind::Poll).await?.table.pending > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    let totals = running.await??;

    let status = admin.status(EventSourceKind::Poll).await?.table;
    eprintln!(
        "\nrelay published {} event(s); pending {}, published {}, dead {}",
        totals.published, status.pending, status.published, status.dead
    );

    // 3. The read side: the billing inbox consumes what was published, and
    //    the first event arrives a second time, as at-least-once delivery
    //    allows.
    eprintln!("\nbilling inbox (consumer \"{CONSUMER}\"):");
    let inbox = Inbox::new(pool.clone(), CONSUMER)?;
    let output = String::from_utf8(published.contents())?;
    let lines: Vec<&str> = output.lines().collect();
    for line in &lines {
        deliver(&inbox, line).await?;
    }
    if let Some(first) = lines.first() {
        eprintln!("the first event arrives again, as at-least-once delivery allows:");
        deliver(&inbox, first).await?;
    }
    let invoices: Vec<(String, i64)> = sqlx::query_as(INVOICES_PER_ORDER).fetch_all(&pool).await?;
    let summary: Vec<String> = invoices
        .iter()
        .map(|(order_id, count)| format!("{order_id}: {count}"))
        .collect();
    eprintln!(
        "\ninvoices per order: {} ({} deliveries)",
        summary.join(", "),
        lines.len() + 1
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
