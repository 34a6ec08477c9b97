//! The relay's HTTP endpoint: `/healthz`, `/readyz` and `/metrics`.
//!
//! - `GET /healthz`: `200 ok` while the process runs.
//! - `GET /readyz`: `200 ready` when the database answers, the broker
//!   client holds a connection and publishes have not been failing for
//!   longer than `handover_after`; otherwise `503` and one line naming what
//!   is not ready.
//! - `GET /metrics`: the Prometheus text format (see [`RelayMetrics`]); the
//!   table gauges are read from the database on each scrape, and
//!   `outbox_relay_ready` takes `/readyz`'s decision at that moment.
//! - `/ui`: the operators' page and its JSON API under `/ui/api/` (see
//!   [`ui`]), when the relay serves it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::batch::PublishHealth;
use crate::batch::{METRICS_CONTENT_TYPE, RelayMetrics};
use crate::error::Error;
use crate::operator::BacklogSource;
use crate::publish::Publisher;
use crate::source::OutboxStore;
use crate::tasks::Tasks;

pub mod ui;

/// How long `/readyz` and `/metrics` wait for the database.
const DATABASE_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// What the endpoint reports on.
#[derive(Clone)]
pub struct HttpState {
    /// The outbox database.
    pub store: Arc<dyn OutboxStore>,
    /// The broker client.
    pub publisher: Arc<dyn Publisher>,
    /// What fills the table gauges: the source's backlog.
    pub backlog: Arc<dyn BacklogSource>,
    /// The relay's metrics.
    pub metrics: Arc<RelayMetrics>,
    /// Whether the relay can publish.
    pub health: Arc<PublishHealth>,
    /// The operators' page's settings, when `/ui` is served.
    pub page: Option<ui::PageSettings>,
}

/// A bound HTTP endpoint, not yet serving.
pub struct HttpEndpoint {
    listener: TcpListener,
    address: SocketAddr,
}

impl HttpEndpoint {
    /// Listen on `address` (port 0 picks a free port).
    ///
    /// # Errors
    /// [`Error::HttpListen`] when the address cannot be bound.
    pub async fn bind(address: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| Error::HttpListen { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| Error::HttpListen { address, source })?;
        Ok(HttpEndpoint { listener, address })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Serve on `tasks` until they are cancelled.
    pub fn serve(self, state: HttpState, tasks: &Tasks) -> JoinHandle<()> {
        let stop = tasks.stop_token();
        let address = self.address;
        let page = state
            .page
            .clone()
            .map(|settings| ui::UiPage::for_relay(state.clone(), settings));
        let mut router = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(state);
        if let Some(page) = page {
            router = router.merge(page.router());
        }
        tasks.spawn(async move {
            tracing::info!(%address, "http endpoint listening");
            let served = axum::serve(self.listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(error) = served {
                tracing::error!(%address, %error, "http endpoint failed");
            }
        })
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Why the relay is not ready, or `None` when it is: what `/readyz`
/// answers, and the broker state of the operators' page.
pub(crate) async fn not_ready_reason(state: &HttpState) -> Option<String> {
    let database = tokio::time::timeout(DATABASE_CHECK_TIMEOUT, state.store.partition_count());
    match database.await {
        Err(_) => Some(format!(
            "database did not answer within {} ms",
            DATABASE_CHECK_TIMEOUT.as_millis()
        )),
        Ok(Err(error)) => Some(format!("database unreachable: {error}")),
        Ok(Ok(_)) => state.health.not_ready_reason().or_else(|| {
            (!state.publisher.is_connected()).then(|| "broker not connected".to_owned())
        }),
    }
}

async fn readyz(State(state): State<HttpState>) -> Response {
    let problem = not_ready_reason(&state).await;
    state.metrics.set_ready(problem.is_none());
    match problem {
        None => {
            let activity =
                tokio::time::timeout(DATABASE_CHECK_TIMEOUT, state.backlog.activity()).await;
            match activity {
                Ok(Ok(Some(activity))) => {
                    (StatusCode::OK, format!("ready: {activity}\n")).into_response()
                }
                _ => (StatusCode::OK, "ready\n").into_response(),
            }
        }
        Some(reason) => {
            tracing::debug!(%reason, "not ready");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {reason}\n"),
            )
                .into_response()
        }
    }
}

async fn metrics(State(state): State<HttpState>) -> Response {
    let database_answered =
        match tokio::time::timeout(DATABASE_CHECK_TIMEOUT, state.backlog.backlog()).await {
            Ok(Ok(backlog)) => {
                state.metrics.set_backlog(&backlog, chrono::Utc::now());
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "reading the backlog for /metrics failed; gauges keep their last values");
                false
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = DATABASE_CHECK_TIMEOUT.as_millis() as u64,
                    "reading the backlog for /metrics timed out; gauges keep their last values"
                );
                false
            }
        };
    // The same decision as `/readyz`, with the backlog read standing for
    // its database check.
    state.metrics.set_ready(
        database_answered
            && state.health.not_ready_reason().is_none()
            && state.publisher.is_connected(),
    );
    state
        .metrics
        .set_client_rebuilds(state.publisher.client_rebuilds());
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response()
        }
    }
}
