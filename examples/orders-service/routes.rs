//! The HTTP routes: `POST /orders` and `GET /healthz`.

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use outbox::OutboxWriter;
use serde::Serialize;
use sqlx::PgPool;

use crate::orders::{NewOrder, place_order};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The database of the orders and the outbox.
    pub pool: PgPool,
    /// Writes the events into the outbox.
    pub writer: OutboxWriter,
}

/// The error body of every failed request.
#[derive(Debug, Serialize)]
struct Problem {
    error: String,
}

/// The body of `GET /healthz`.
#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
}

/// The service's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/orders", post(create_order))
        .route("/healthz", get(healthz))
        .with_state(state)
}

fn problem(status: StatusCode, error: impl Into<String>) -> Response {
    (
        status,
        Json(Problem {
            error: error.into(),
        }),
    )
        .into_response()
}

/// `POST /orders`: 201 with the order and event ids; 400 for a body that
/// is not JSON, 415 without a JSON content type, 422 for JSON that is not a
/// valid order. A rejected request writes nothing.
async fn create_order(
    State(state): State<AppState>,
    body: Result<Json<NewOrder>, JsonRejection>,
) -> Response {
    let order = match body {
        Ok(Json(order)) => order,
        Err(rejection) => return problem(rejection.status(), rejection.body_text()),
    };
    if let Err(reason) = order.validate() {
        return problem(StatusCode::UNPROCESSABLE_ENTITY, reason);
    }
    match place_order(&state.pool, &state.writer, &order).await {
        Ok(placed) => (StatusCode::CREATED, Json(placed)).into_response(),
        Err(error) if error.is_rejected_event() => {
            problem(StatusCode::UNPROCESSABLE_ENTITY, error.to_string())
        }
        Err(error) => {
            tracing::error!(%error, "placing an order failed");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the order could not be stored",
            )
        }
    }
}

/// `GET /healthz`: 200 while the database answers, else 503.
async fn healthz(State(state): State<AppState>) -> Response {
    match sqlx::query("SELECT 1").execute(&state.pool).await {
        Ok(_) => (StatusCode::OK, Json(Health { status: "ok" })).into_response(),
        Err(error) => {
            tracing::warn!(%error, "health check: the database does not answer");
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "the database does not answer",
            )
        }
    }
}
