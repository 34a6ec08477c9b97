//! `cargo run -p outbox-e2e --example orders-service`
//!
//! An HTTP service on PostgreSQL that writes each order and its
//! `order.created` event in one transaction, for `outbox-relay` to publish:
//!
//! ```sh
//! curl -i -H 'content-type: application/json' \
//!     -d '{"customer": "ada", "total_cents": 1250}' http://127.0.0.1:8080/orders
//! ```
//!
//! `POST /orders` answers 201 with `{"order_id": ..., "event_id": ...}`, or
//! 400 / 415 / 422 with `{"error": ...}` for a bad request, which writes
//! nothing; `GET /healthz` answers 200 while the database does. Settings:
//! `--database-url` / `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`) and `--listen` / `LISTEN_ADDR`
//! (default `127.0.0.1:8080`; port 0 picks a free port). The bound address
//! is printed on stdout; logs go to stderr (`RUST_LOG`). Stops on SIGTERM
//! or Ctrl-C after the requests in flight are answered.

mod config;
mod orders;
mod routes;
mod schema;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use outbox::OutboxWriter;
use sqlx::postgres::PgPoolOptions;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::config::Config;
use crate::routes::{AppState, router};
use crate::schema::create_schema;

/// Connections the service keeps to the database.
const POOL_SIZE: u32 = 10;

/// How long to wait for a database connection before giving up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = Config::parse();
    match serve(config).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("orders-service: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let pool = PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect(&config.database_url)
        .await
        .map_err(|error| format!("cannot connect to the database: {error}"))?;
    outbox::migrate(&pool).await?;
    create_schema(&pool).await?;

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", config.listen))?;
    let address = listener.local_addr()?;
    let stop = CancellationToken::new();
    stop_on_signal(stop.clone())?;
    println!("listening on http://{address}");
    tracing::info!(%address, "orders-service ready");

    let state = AppState {
        pool: pool.clone(),
        writer: OutboxWriter::new(),
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop.cancelled_owned())
        .await?;
    pool.close().await;
    tracing::info!("orders-service stopped");
    Ok(())
}

/// Cancel `stop` on SIGTERM or SIGINT (Ctrl-C). The handlers are installed
/// before this returns, so a signal sent right after is not missed.
#[cfg(unix)]
fn stop_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
            () = stop.cancelled() => return,
        }
        tracing::info!("shutdown requested; answering the requests in flight");
        stop.cancel();
    });
    Ok(())
}

/// Cancel `stop` on Ctrl-C.
#[cfg(not(unix))]
fn stop_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    tokio::spawn(async move {
        tokio::select! {
            result = tokio::signal::ctrl_c() => {
                if let Err(error) = result {
                    tracing::error!(%error, "cannot listen for Ctrl-C");
                    return;
                }
            }
            () = stop.cancelled() => return,
        }
        tracing::info!("shutdown requested; answering the requests in flight");
        stop.cancel();
    });
    Ok(())
}
