//! [`RelayService`]: a whole relay in one value, built with
//! [`RelayService::builder`]: the database (a URL or a pool), the broker (a
//! URL or a publisher), the source (polling or the WAL), the settings, the
//! metrics and, when asked, the HTTP endpoint; [`RelayService::run`] runs
//! it until a `CancellationToken` fires, then stops it gracefully. It is
//! what `outbox-relay run` runs, for a service that embeds the relay.
//!
//! - `builder.rs`: [`RelayServiceBuilder`], and the broker it takes
//!   ([`RelayBroker`]); `database.rs`: the database it takes
//!   ([`RelayDatabase`]), and opening its store.
//! - `start.rs`: opening the store, the source and the publisher, and
//!   spawning the batch loop; `logical.rs`: the WAL source's part of it.
//! - `supervise.rs`: running until the stop, and the graceful stop.
//!
//! Beside an axum app on one runtime, the relay on the service's own pool,
//! its metrics on the app's `/metrics`, both stopped by Ctrl-C:
//!
//! ```no_run
//! use axum::Router;
//! use axum::routing::get;
//! use outbox_relay::{BrokerUrl, RelayConfig, RelayService};
//! use tokio_util::sync::CancellationToken;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1:5432/shop").await?;
//!     let relay = RelayService::builder()
//!         .database(pool.clone())
//!         .broker("amqp://guest:guest@127.0.0.1:5672/%2f".parse::<BrokerUrl>()?)
//!         .config(RelayConfig::default())
//!         .build()?;
//!     let metrics = relay.metrics();
//!     let app = Router::new()
//!         .route("/orders", get(|| async { "the service's own routes" }))
//!         .route("/metrics", get(move || async move { metrics.encode().unwrap_or_default() }));
//!
//!     let stop = CancellationToken::new();
//!     let on_ctrl_c = stop.clone();
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     let serving = axum::serve(listener, app).with_graceful_shutdown(async move {
//!         let _ = tokio::signal::ctrl_c().await;
//!         on_ctrl_c.cancel();
//!     });
//!     let (served, relayed) = tokio::join!(serving, relay.run(stop));
//!     served?;
//!     let totals = relayed?;
//!     println!("published {} events", totals.published);
//!     Ok(())
//! }
//! ```

mod builder;
mod database;
#[cfg(feature = "logical")]
mod logical;
mod start;
mod supervise;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use builder::{RelayBroker, RelayServiceBuilder};
pub use database::RelayDatabase;

use crate::batch::{DispatchTotals, RelayMetrics};
use crate::config::RelayConfig;
use crate::error::Error;
use crate::http::ui::UiTokens;
use crate::tasks::Tasks;

/// A relay ready to run: see the [module documentation](self).
pub struct RelayService {
    database: RelayDatabase,
    broker: RelayBroker,
    config: RelayConfig,
    metrics: Arc<RelayMetrics>,
    serve_http: bool,
    ui_tokens: UiTokens,
    migrate: bool,
}

impl std::fmt::Debug for RelayService {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RelayService")
            .field("database", &self.database)
            .field("broker", &self.broker)
            .field("source", &self.config.source)
            .field("serve_http", &self.serve_http)
            .field("ui_tokens", &self.ui_tokens)
            .field("migrate", &self.migrate)
            .finish_non_exhaustive()
    }
}

impl RelayService {
    /// A builder; [`RelayServiceBuilder::build`] checks what it was given.
    pub fn builder() -> RelayServiceBuilder {
        RelayServiceBuilder::default()
    }

    /// The metrics the relay records into; render them with
    /// [`RelayMetrics::encode`] on an endpoint of the service's own.
    pub fn metrics(&self) -> Arc<RelayMetrics> {
        Arc::clone(&self.metrics)
    }

    /// Open the database (migrated, unless turned off), the source and the
    /// publisher, then relay until `stop` is cancelled; then finish the
    /// batch in flight within `shutdown_timeout` and release every lease.
    /// A `stop` while starting ends the start; nothing was claimed. Returns
    /// what the relay did: events published, failed, dead.
    ///
    /// # Errors
    /// What keeps the relay from starting (an unreachable database, a
    /// database that cannot stream, a bad client option, a taken HTTP
    /// port), a slot the server invalidated, or a graceful stop that did
    /// not finish in time.
    pub async fn run(self, stop: CancellationToken) -> Result<DispatchTotals, Error> {
        // Every task the relay spawns runs on `tasks` or a child of it.
        let tasks = Tasks::new();
        let shutdown_timeout = self.config.shutdown_timeout;
        let started = tokio::select! {
            started = start::start(self, &tasks) => Some(started),
            () = stop.cancelled() => None,
        };
        let result = match started {
            None => {
                tracing::info!("stopped while starting; nothing was claimed");
                Ok(DispatchTotals::default())
            }
            Some(Err(error)) => Err(error),
            Some(Ok(running)) => supervise::supervise(running, &stop, shutdown_timeout).await,
        };
        supervise::end_every_task(&tasks).await;
        result
    }
}
