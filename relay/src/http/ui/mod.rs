//! The operators' page: `/ui`, a page of plain HTML, CSS and JavaScript
//! built into the binary (`assets/`), and the JSON API under `/ui/api/`
//! it reads and acts through. The relay's HTTP endpoint serves it beside
//! `/healthz`, `/readyz` and `/metrics` (unless `[ui] enabled = false`);
//! `outbox-relay ui` serves it alone, for a database without a relay in
//! the process.
//!
//! # What it shows
//!
//! `GET /ui/api/overview`: the table's counts, per topic and in total, on
//! the database's clock:
//!
//! - `pending`: every event neither published nor dead, so `in_flight`
//!   and `retrying` are parts of it, not additions to it;
//! - `in_flight`: pending events due now (no retry wait) in a partition a
//!   live lease holds: what the relays publish now or fetch next (as
//!   `outbox-relay status` counts it);
//! - `retrying`: pending events that failed at least once;
//! - `dead`: events that used up their attempts;
//! - `published`: published events retention has not deleted yet.
//!
//! With them: the age of the oldest pending event, the live relays with
//! the partitions and lease tokens they hold (partition -1 is the logical
//! stream's lease), the logical slot's lag and retained WAL when the source
//! is logical (what `status --source logical` reads), and the broker's
//! state as `/readyz` decides it (`null` from `outbox-relay ui`). Under the
//! logical source, streamed events stay `pending` in the table until the
//! logical retention deletes them, so the table's counts include them; the
//! slot's lag is what the stream still has to publish.
//!
//! The publish and failure rates, per second: in a relay's process, the
//! difference of the `events_published_total` and `events_failed_total`
//! counters between two requests of the overview at least a second apart
//! (`null` until there are two); from `outbox-relay ui`, the publish rate
//! is the events published in the last minute (the table's
//! `published_at`; 0 when retention deletes events as they are published,
//! and on the logical source, which marks nothing published), and the
//! failure rate is `null`: the table keeps no time of failed attempts.
//!
//! `GET /ui/api/dead`: dead events grouped by the fingerprint of their
//! last error (see `fingerprint.rs`), under optional filters `topic`,
//! `event_type`, `aggregate` (`TYPE:ID`), `error` (a substring of the last
//! error: case-sensitive on PostgreSQL and SQLite, as the column's
//! collation compares on MariaDB), `since` and `until` (RFC 3339, on `created_at`: since included,
//! until excluded). At most [`DEAD_ROWS_READ`] dead events are read, oldest
//! first; `"capped": true` says more matched. A group lists at most
//! [`EVENTS_PER_GROUP`] events (`"truncated": true`), its `count` being
//! the whole count. The table keeps no time of death: a group's
//! `first_seen` and `last_seen` are the creation times of its oldest and
//! newest events, and `dead_at` is `null`.
//!
//! `GET /ui/api/events/{id}`: one event in any state, by
//! `outbox_events.id`.
//!
//! # Actions and access
//!
//! `POST /ui/api/events/{id}/retry|discard` and
//! `POST /ui/api/groups/{fingerprint}/retry|discard` make dead events
//! pending again (attempts reset) or delete them, through the statements
//! of `outbox-relay dead retry|discard`, one event id at a time; a group is
//! the dead events its filters select (the request's JSON body, the same
//! fields as the query of `/ui/api/dead`) whose fingerprint matches, read
//! once, then acted on in batches of [`ACTION_BATCH`]; an event no longer
//! dead by then is left alone. `changed` is the number of rows the
//! database reports changed. Retrying an event that is not dead is a
//! `409`.
//!
//! Every action needs `Authorization: Bearer <secret>` of a named token
//! ([`UiTokens`]); without tokens configured the page is read-only and
//! every POST is a `401`. A POST is refused (`403`) when its `Origin` is
//! not the page's own (the request's `Host`), when its `Sec-Fetch-Site`
//! is not `same-origin`, or when its `Content-Type` is not
//! `application/json`, which a form of another site cannot send. Every
//! action is logged with `who` (the token's name), `action`, `target` and
//! `changed`; a refused request at warn, without the token.
//!
//! Every response of `/ui` carries a strict Content-Security-Policy (no
//! inline script or style, nothing from elsewhere, no framing),
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and
//! `Cache-Control: no-store`.

mod access;
mod api;
mod fingerprint;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use axum::routing::{get, post};
use tokio::task::JoinHandle;

pub use access::UiTokens;

use super::{HttpEndpoint, HttpState};
use crate::source::OutboxStore;
#[cfg(feature = "logical")]
use crate::source::SlotName;
use crate::tasks::Tasks;

/// The most dead events `/ui/api/dead` reads for one answer.
pub const DEAD_ROWS_READ: i64 = 10_000;

/// The most events a group of `/ui/api/dead` lists.
pub const EVENTS_PER_GROUP: usize = 200;

/// Dead events a group action changes between two checks of the time
/// budget: one statement each, as `outbox-relay dead retry|discard` runs.
pub const ACTION_BATCH: usize = 100;

/// The page's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
    base-uri 'none'; form-action 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// What the page needs besides the database: who may act, and the slot
/// of the logical source.
#[derive(Clone, Debug, Default)]
pub struct PageSettings {
    /// The named tokens actions need; none: read-only.
    pub tokens: UiTokens,
    /// The logical source's slot, on its database.
    #[cfg(feature = "logical")]
    pub slot: Option<(sqlx::PgPool, SlotName)>,
}

/// The page's state: the store it reads and acts on, the relay it runs
/// beside (if any), and the last sample of the relay's counters.
#[derive(Clone)]
pub struct UiPage {
    inner: Arc<PageInner>,
}

struct PageInner {
    store: Arc<dyn OutboxStore>,
    relay: Option<HttpState>,
    settings: PageSettings,
    rates: Mutex<Rates>,
}

/// The last sample of the relay's counters, and the rates it gave.
#[derive(Default)]
struct Rates {
    sample: Option<(Instant, f64, f64)>,
    rates: Option<(f64, f64)>,
}

impl UiPage {
    /// The page of a relay running in this process.
    pub fn for_relay(state: HttpState, settings: PageSettings) -> Self {
        UiPage::new(Arc::clone(&state.store), Some(state), settings)
    }

    /// The page of a database, with no relay in this process.
    pub fn for_database(store: Arc<dyn OutboxStore>, settings: PageSettings) -> Self {
        UiPage::new(store, None, settings)
    }

    fn new(store: Arc<dyn OutboxStore>, relay: Option<HttpState>, settings: PageSettings) -> Self {
        UiPage {
            inner: Arc::new(PageInner {
                store,
                relay,
                settings,
                rates: Mutex::new(Rates::default()),
            }),
        }
    }

    /// The routes of `/ui` and `/ui/api/`.
    pub fn router(self) -> Router {
        Router::new()
            .route("/ui", get(index))
            .route("/ui/app.js", get(app_js))
            .route("/ui/app.css", get(app_css))
            .route("/ui/api/overview", get(api::overview))
            .route("/ui/api/dead", get(api::dead))
            .route("/ui/api/whoami", get(api::whoami))
            .route("/ui/api/events/{id}", get(api::event))
            .route("/ui/api/events/{id}/{action}", post(api::event_action))
            .route(
                "/ui/api/groups/{fingerprint}/{action}",
                post(api::group_action),
            )
            .route("/ui/api/{*rest}", get(api::not_found).post(api::not_found))
            .layer(axum::middleware::map_response(security_headers))
            .with_state(self)
    }
}

impl HttpEndpoint {
    /// Serve only the operators' page on `tasks` until they are cancelled:
    /// `outbox-relay ui`.
    pub fn serve_page(self, page: UiPage, tasks: &Tasks) -> JoinHandle<()> {
        let stop = tasks.stop_token();
        let address = self.address;
        let router = page.router();
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

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn index() -> ([(header::HeaderName, &'static str); 1], &'static str) {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        INDEX_HTML,
    )
}

async fn app_js() -> ([(header::HeaderName, &'static str); 1], &'static str) {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        APP_JS,
    )
}

async fn app_css() -> ([(header::HeaderName, &'static str); 1], &'static str) {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], APP_CSS)
}
