//! The handlers of `/ui/api/`: the overview, the dead events' groups, one
//! event, `whoami`, and the actions. See the [module documentation](super).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::access::{bearer, cross_site_refusal};
use super::fingerprint::{fingerprint, normalize};
use super::{ACTION_BATCH, DEAD_ROWS_READ, EVENTS_PER_GROUP, UiPage};
use crate::error::Error;
use crate::store::{DeadFilter, DeadSelector, PageDeadEvent};

/// How long one answer may wait for the database.
const DATABASE_TIMEOUT: Duration = Duration::from_secs(10);

/// How far back `outbox-relay ui` counts published events for the
/// publish rate.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// The shortest time between two samples of the relay's counters.
const SAMPLE_SPACING: Duration = Duration::from_secs(1);

/// A JSON answer.
fn json_response(status: StatusCode, value: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// `{"error": message}`.
fn error_response(status: StatusCode, message: impl Into<String>) -> Response {
    json_response(status, &json!({ "error": message.into() }))
}

/// An answer other than the one asked for: its status and its message,
/// answered as `{"error": message}`.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error_response(self.status, self.message)
    }
}

/// A [`Refusal`].
fn refuse(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

/// A time as the API writes it: RFC 3339, UTC, milliseconds.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `work`, bounded by [`DATABASE_TIMEOUT`]; a failure as the answer.
async fn on_database<T>(
    what: &str,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Refusal> {
    match tokio::time::timeout(DATABASE_TIMEOUT, work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(Error::InvalidArgument(message))) => Err(refuse(StatusCode::BAD_REQUEST, message)),
        Ok(Err(error)) => {
            tracing::warn!(%error, what, "operators' page: reading the database failed");
            Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{what}: {error}"),
            ))
        }
        Err(_) => {
            tracing::warn!(
                what,
                timeout_ms = DATABASE_TIMEOUT.as_millis() as u64,
                "operators' page: the database did not answer in time"
            );
            Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{what}: the database did not answer within {} s",
                    DATABASE_TIMEOUT.as_secs()
                ),
            ))
        }
    }
}

pub(super) async fn not_found() -> Response {
    error_response(StatusCode::NOT_FOUND, "no such API path")
}

pub(super) async fn overview(State(page): State<UiPage>) -> Response {
    match read_overview(&page).await {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(refusal) => refusal.into_response(),
    }
}

async fn read_overview(page: &UiPage) -> Result<Value, Refusal> {
    let inner = &page.inner;
    let store = &inner.store;
    let topics = on_database("counting the events", store.page_topics()).await?;
    let backlog = match &inner.relay {
        Some(relay) => on_database("reading the backlog", relay.backlog.backlog()).await?,
        None => on_database("reading the backlog", store.backlog()).await?,
    };
    let now = on_database("reading the database's clock", store.database_time()).await?;
    let relays = on_database("reading the relays", store.page_relays()).await?;
    let (publish_rate, failure_rate) = page.rates().await?;
    let logical = page.logical().await?;
    let broker = match &inner.relay {
        Some(relay) => {
            let reason = crate::http::not_ready_reason(relay).await;
            json!({ "ready": reason.is_none(), "reason": reason })
        }
        None => Value::Null,
    };
    let oldest_pending_age_seconds = backlog.oldest_pending_at.map(|created_at| {
        let milliseconds = (now - created_at).num_milliseconds().max(0);
        milliseconds as f64 / 1000.0
    });
    let mut totals = [0_i64; 5];
    let topics: Vec<Value> = topics
        .iter()
        .map(|topic| {
            let counts = [
                topic.pending,
                topic.in_flight,
                topic.retrying,
                topic.dead,
                topic.published,
            ];
            for (total, count) in totals.iter_mut().zip(counts) {
                *total += count;
            }
            json!({
                "topic": topic.topic,
                "pending": topic.pending,
                "in_flight": topic.in_flight,
                "retrying": topic.retrying,
                "dead": topic.dead,
                "published": topic.published,
            })
        })
        .collect();
    let relays: Vec<Value> = relays
        .iter()
        .map(|relay| {
            let partitions: Vec<Value> = relay
                .partitions
                .iter()
                .map(|lease| {
                    json!({
                        "partition": lease.partition,
                        "lease_token": lease.lease_token,
                        "lease_expires_at": time(lease.lease_expires_at),
                    })
                })
                .collect();
            json!({
                "relay_id": relay.relay_id,
                "expires_at": time(relay.expires_at),
                "partitions": partitions,
            })
        })
        .collect();
    Ok(json!({
        "generated_at": time(now),
        "source": if page.is_logical() { "logical" } else { "polling" },
        "totals": {
            "pending": totals[0],
            "in_flight": totals[1],
            "retrying": totals[2],
            "dead": totals[3],
            "published": totals[4],
        },
        "topics": topics,
        "oldest_pending_age_seconds": oldest_pending_age_seconds,
        "publish_rate_per_second": publish_rate,
        "failure_rate_per_second": failure_rate,
        "relays": relays,
        "logical": logical,
        "broker": broker,
        "actions": { "enabled": !inner.settings.tokens.is_empty() },
    }))
}

/// The sum of the samples of the counter `name` (every label set) in a
/// Prometheus text exposition.
fn counter_total(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum()
}

impl UiPage {
    fn is_logical(&self) -> bool {
        #[cfg(feature = "logical")]
        {
            self.inner.settings.slot.is_some()
        }
        #[cfg(not(feature = "logical"))]
        {
            false
        }
    }

    /// The publish and failure rates, per second, where known.
    async fn rates(&self) -> Result<(Option<f64>, Option<f64>), Refusal> {
        let Some(relay) = &self.inner.relay else {
            if self.is_logical() {
                return Ok((None, None));
            }
            let published = on_database(
                "counting the events published lately",
                self.inner.store.page_published_recently(RATE_WINDOW),
            )
            .await?;
            return Ok((Some(published as f64 / RATE_WINDOW.as_secs_f64()), None));
        };
        let text = relay
            .metrics
            .encode()
            .map_err(|error| refuse(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?;
        let published = counter_total(&text, "outbox_relay_events_published_total");
        let failed = counter_total(&text, "outbox_relay_events_failed_total");
        let now = Instant::now();
        let mut rates = self
            .inner
            .rates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match rates.sample {
            Some((at, published_then, failed_then)) => {
                let elapsed = now.duration_since(at);
                if elapsed >= SAMPLE_SPACING {
                    let seconds = elapsed.as_secs_f64();
                    rates.rates = Some((
                        (published - published_then).max(0.0) / seconds,
                        (failed - failed_then).max(0.0) / seconds,
                    ));
                    rates.sample = Some((now, published, failed));
                }
            }
            None => rates.sample = Some((now, published, failed)),
        }
        Ok((
            rates.rates.map(|(published, _)| published),
            rates.rates.map(|(_, failed)| failed),
        ))
    }

    /// The slot of the logical source: its lag, retained WAL and whether
    /// a relay streams from it; `null` when polling.
    async fn logical(&self) -> Result<Value, Refusal> {
        #[cfg(feature = "logical")]
        if let Some((pool, slot)) = &self.inner.settings.slot {
            let status = on_database(
                "reading the slot",
                crate::source::logical::slot_status(pool, slot),
            )
            .await?;
            return Ok(match status {
                Some(status) => json!({
                    "slot": status.slot,
                    "lag_bytes": status.lag_bytes,
                    "retained_wal_bytes": status.retained_wal_bytes,
                    "active": status.active,
                }),
                None => json!({
                    "slot": slot.as_str(),
                    "lag_bytes": null,
                    "retained_wal_bytes": null,
                    "active": false,
                }),
            });
        }
        Ok(Value::Null)
    }
}

/// The filters of `/ui/api/dead` and of a group action, from the query's
/// or the body's fields.
fn dead_filter(fields: &BTreeMap<String, String>) -> Result<DeadFilter, Refusal> {
    let text = |name: &str| {
        fields
            .get(name)
            .map(|value| value.trim())
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    let bad = |message: String| refuse(StatusCode::BAD_REQUEST, message);
    let aggregate = match text("aggregate") {
        None => None,
        Some(aggregate) => match aggregate.split_once(':') {
            Some((kind, id)) if !kind.is_empty() && !id.is_empty() => {
                Some((kind.to_owned(), id.to_owned()))
            }
            _ => {
                return Err(bad(format!(
                    "aggregate `{aggregate}`: expected TYPE:ID, e.g. order:42"
                )));
            }
        },
    };
    let when = |name: &str| -> Result<Option<DateTime<Utc>>, Refusal> {
        text(name)
            .map(|value| {
                parse_time(&value).ok_or_else(|| {
                    bad(format!(
                        "{name} `{value}`: expected an RFC 3339 time, e.g. 2026-12-06T21:00:00Z"
                    ))
                })
            })
            .transpose()
    };
    Ok(DeadFilter {
        topic: text("topic"),
        event_type: text("event_type"),
        aggregate,
        error: text("error"),
        since: when("since")?,
        until: when("until")?,
    })
}

/// An RFC 3339 time, or a time without a zone (as a browser's
/// `datetime-local` input gives it), taken as UTC.
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .map(|at| at.and_utc())
}

/// The fields of a query string.
fn query_fields(query: Option<&str>) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(name, value)| (name.into_owned(), value.into_owned()))
        .collect()
}

/// The fields of a JSON body: an object of strings (other values are
/// written as JSON); an empty body is no field.
fn body_fields(body: &[u8]) -> Result<BTreeMap<String, String>, Refusal> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(BTreeMap::new());
    }
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        refuse(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {error}"),
        )
    })?;
    let Value::Object(object) = value else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        ));
    };
    Ok(object
        .into_iter()
        .filter(|(_, value)| !value.is_null())
        .map(|(name, value)| match value {
            Value::String(text) => (name, text),
            other => (name, other.to_string()),
        })
        .collect())
}

/// A group of dead events sharing a fingerprint.
struct Group<'a> {
    fingerprint: String,
    pattern: String,
    events: Vec<&'a PageDeadEvent>,
}

/// The dead events of `rows` grouped by the fingerprint of their last
/// error, the largest group first.
fn group(rows: &[PageDeadEvent]) -> Vec<Group<'_>> {
    let mut groups: BTreeMap<String, Group<'_>> = BTreeMap::new();
    for row in rows {
        let pattern = normalize(row.event.last_error.as_deref().unwrap_or(""));
        let fingerprint = fingerprint(&pattern);
        groups
            .entry(fingerprint.clone())
            .or_insert_with(|| Group {
                fingerprint,
                pattern,
                events: Vec::new(),
            })
            .events
            .push(row);
    }
    let mut groups: Vec<Group<'_>> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        b.events
            .len()
            .cmp(&a.events.len())
            .then_with(|| a.fingerprint.cmp(&b.fingerprint))
    });
    groups
}

fn dead_event_json(row: &PageDeadEvent) -> Value {
    let event = &row.event;
    json!({
        "id": event.id.to_string(),
        "event_id": event.event_id,
        "topic": event.topic,
        "event_type": event.event_type,
        "aggregate_type": event.aggregate_type,
        "aggregate_id": event.aggregate_id,
        "attempts": event.attempts,
        "last_error": event.last_error,
        "created_at": time(row.created_at),
        "dead_at": null,
        "payload_preview": row.payload_preview,
    })
}

/// The dead events `filter` selects, at most [`DEAD_ROWS_READ`] of them,
/// and whether more matched.
async fn read_dead(
    page: &UiPage,
    filter: &DeadFilter,
) -> Result<(Vec<PageDeadEvent>, bool), Refusal> {
    let mut rows = on_database(
        "reading the dead events",
        page.inner.store.page_dead(filter, DEAD_ROWS_READ + 1),
    )
    .await?;
    let capped = rows.len() as i64 > DEAD_ROWS_READ;
    rows.truncate(DEAD_ROWS_READ as usize);
    Ok((rows, capped))
}

pub(super) async fn dead(State(page): State<UiPage>, RawQuery(query): RawQuery) -> Response {
    let filter = match dead_filter(&query_fields(query.as_deref())) {
        Ok(filter) => filter,
        Err(refusal) => return refusal.into_response(),
    };
    let (rows, capped) = match read_dead(&page, &filter).await {
        Ok(read) => read,
        Err(refusal) => return refusal.into_response(),
    };
    let groups: Vec<Value> = group(&rows)
        .iter()
        .map(|group| {
            let first_seen = group.events.iter().map(|event| event.created_at).min();
            let last_seen = group.events.iter().map(|event| event.created_at).max();
            let events: Vec<Value> = group
                .events
                .iter()
                .take(EVENTS_PER_GROUP)
                .map(|event| dead_event_json(event))
                .collect();
            json!({
                "fingerprint": group.fingerprint,
                "pattern": group.pattern,
                "count": group.events.len(),
                "first_seen": first_seen.map(time),
                "last_seen": last_seen.map(time),
                "events": events,
                "truncated": group.events.len() > EVENTS_PER_GROUP,
            })
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "groups": groups,
            "rows_read": rows.len(),
            "capped": capped,
            "rows_cap": DEAD_ROWS_READ,
        }),
    )
}

pub(super) async fn event(State(page): State<UiPage>, Path(id): Path<String>) -> Response {
    let Ok(id) = id.parse::<i64>() else {
        return error_response(StatusCode::NOT_FOUND, format!("no event has id {id}"));
    };
    let event = match on_database("reading the event", page.inner.store.page_event(id)).await {
        Ok(Some(event)) => event,
        Ok(None) => return error_response(StatusCode::NOT_FOUND, format!("no event has id {id}")),
        Err(refusal) => return refusal.into_response(),
    };
    let payload = serde_json::from_str::<Value>(&event.payload)
        .unwrap_or_else(|_| Value::String(event.payload.clone()));
    let dead = event.state == "dead";
    json_response(
        StatusCode::OK,
        &json!({
            "id": event.id.to_string(),
            "event_id": event.event_id,
            "topic": event.topic,
            "event_type": event.event_type,
            "event_version": event.event_version,
            "source": event.source,
            "aggregate_type": event.aggregate_type,
            "aggregate_id": event.aggregate_id,
            "state": event.state,
            "attempts": event.attempts,
            "last_error": event.last_error,
            "created_at": time(event.created_at),
            "published_at": event.published_at.map(time),
            "next_attempt_at": event.next_attempt_at.map(time),
            "payload": payload,
            "headers": event.headers,
            "retryable": dead,
            "discardable": dead,
        }),
    )
}

pub(super) async fn whoami(State(page): State<UiPage>, headers: HeaderMap) -> Response {
    let tokens = &page.inner.settings.tokens;
    if tokens.is_empty() {
        return error_response(StatusCode::UNAUTHORIZED, NO_TOKEN_CONFIGURED);
    }
    match bearer(&headers).and_then(|presented| tokens.holder(presented)) {
        Some(name) => json_response(StatusCode::OK, &json!({ "name": name })),
        None => {
            tracing::warn!(
                action = "whoami",
                "operators' page: unknown or missing token"
            );
            error_response(StatusCode::UNAUTHORIZED, "unknown or missing bearer token")
        }
    }
}

const NO_TOKEN_CONFIGURED: &str = "no UI token is configured: the page is read-only (start \
    with --ui-token NAME=SECRET, OUTBOX_UI_TOKEN or --ui-token-file)";

/// What an action does to dead events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Retry,
    Discard,
}

impl Action {
    fn parse(text: &str) -> Option<Action> {
        match text {
            "retry" => Some(Action::Retry),
            "discard" => Some(Action::Discard),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Discard => "discard",
        }
    }

    /// Apply the action to the dead event `event_id`, through the
    /// statement of `outbox-relay dead retry|discard`; the rows changed.
    async fn apply(self, page: &UiPage, event_id: &str) -> Result<u64, Error> {
        let selector = DeadSelector::EventId(event_id.to_owned());
        let store = &page.inner.store;
        match self {
            Action::Retry => store.retry_dead(&selector).await,
            Action::Discard => store.discard_dead(&selector).await,
        }
    }
}

/// The name of the token of a POST that may act, or the refusal: a
/// cross-site request (403), no token configured, none given or an
/// unknown one (401). Refusals are logged without the token.
fn authorize(
    page: &UiPage,
    headers: &HeaderMap,
    action: Action,
    target: &str,
) -> Result<String, Refusal> {
    if let Some(reason) = cross_site_refusal(headers) {
        tracing::warn!(action = action.as_str(), target, %reason, "operators' page: cross-site request refused");
        return Err(refuse(
            StatusCode::FORBIDDEN,
            format!("refused as cross-site: {reason}"),
        ));
    }
    let tokens = &page.inner.settings.tokens;
    if tokens.is_empty() {
        tracing::warn!(
            action = action.as_str(),
            target,
            "operators' page: action refused, no token is configured"
        );
        return Err(refuse(StatusCode::UNAUTHORIZED, NO_TOKEN_CONFIGURED));
    }
    let Some(presented) = bearer(headers) else {
        tracing::warn!(
            action = action.as_str(),
            target,
            "operators' page: action refused, no bearer token"
        );
        return Err(refuse(
            StatusCode::UNAUTHORIZED,
            "this action needs Authorization: Bearer <token>",
        ));
    };
    match tokens.holder(presented) {
        Some(name) => Ok(name.to_owned()),
        None => {
            tracing::warn!(
                action = action.as_str(),
                target,
                "operators' page: action refused, unknown token"
            );
            Err(refuse(StatusCode::UNAUTHORIZED, "unknown bearer token"))
        }
    }
}

pub(super) async fn event_action(
    State(page): State<UiPage>,
    Path((id, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(action) = Action::parse(&action) else {
        return not_found().await;
    };
    let who = match authorize(&page, &headers, action, &id) {
        Ok(who) => who,
        Err(refusal) => return refusal.into_response(),
    };
    if let Err(response) = body_fields(&body) {
        return response.into_response();
    }
    let Ok(number) = id.parse::<i64>() else {
        return error_response(StatusCode::NOT_FOUND, format!("no event has id {id}"));
    };
    let event = match on_database("reading the event", page.inner.store.page_event(number)).await {
        Ok(Some(event)) => event,
        Ok(None) => return error_response(StatusCode::NOT_FOUND, format!("no event has id {id}")),
        Err(refusal) => return refusal.into_response(),
    };
    if event.state != "dead" {
        tracing::warn!(who = %who, action = action.as_str(), target = %id, state = %event.state, "operators' page: action refused, the event is not dead");
        return error_response(
            StatusCode::CONFLICT,
            format!(
                "event {id} is {}, not dead: only dead events are retried or discarded",
                event.state
            ),
        );
    }
    let changed =
        match on_database("changing the event", action.apply(&page, &event.event_id)).await {
            Ok(changed) => changed,
            Err(refusal) => return refusal.into_response(),
        };
    tracing::info!(who = %who, action = action.as_str(), target = %id, event_id = %event.event_id, changed, "operators' page action");
    if changed == 0 {
        return error_response(
            StatusCode::CONFLICT,
            format!("event {id} is no longer dead: nothing changed"),
        );
    }
    json_response(StatusCode::OK, &json!({ "changed": changed }))
}

pub(super) async fn group_action(
    State(page): State<UiPage>,
    Path((wanted, action)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(action) = Action::parse(&action) else {
        return not_found().await;
    };
    let who = match authorize(&page, &headers, action, &wanted) {
        Ok(who) => who,
        Err(refusal) => return refusal.into_response(),
    };
    let filter = match body_fields(&body).and_then(|fields| dead_filter(&fields)) {
        Ok(filter) => filter,
        Err(refusal) => return refusal.into_response(),
    };
    let (rows, capped) = match read_dead(&page, &filter).await {
        Ok(read) => read,
        Err(refusal) => return refusal.into_response(),
    };
    let event_ids: Vec<&str> = rows
        .iter()
        .filter(|row| {
            fingerprint(&normalize(row.event.last_error.as_deref().unwrap_or(""))) == wanted
        })
        .map(|row| row.event.event_id.as_str())
        .collect();
    if event_ids.is_empty() {
        return error_response(
            StatusCode::NOT_FOUND,
            format!("no dead event under these filters has the fingerprint {wanted}"),
        );
    }
    let started = Instant::now();
    let mut changed = 0;
    for batch in event_ids.chunks(ACTION_BATCH) {
        let applied = futures::future::try_join_all(
            batch.iter().map(|event_id| action.apply(&page, event_id)),
        );
        match on_database("changing the group's events", applied).await {
            Ok(counts) => changed += counts.iter().sum::<u64>(),
            Err(refusal) => {
                tracing::warn!(who = %who, action = action.as_str(), target = %wanted, changed, "operators' page group action stopped by an error");
                return refusal.into_response();
            }
        }
    }
    tracing::info!(
        who = %who,
        action = action.as_str(),
        target = %wanted,
        selected = event_ids.len(),
        changed,
        capped,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "operators' page action"
    );
    json_response(
        StatusCode::OK,
        &json!({ "changed": changed, "capped": capped }),
    )
}

#[cfg(test)]
mod tests {
    use super::{counter_total, parse_time};

    #[test]
    fn counters_are_summed_over_their_labels() {
        let text = "# HELP outbox_relay_events_published_total x\n\
                    outbox_relay_events_published_total{topic=\"a\"} 3\n\
                    outbox_relay_events_published_total{topic=\"b\"} 4\n\
                    outbox_relay_events_published_totally 100\n";
        assert_eq!(
            counter_total(text, "outbox_relay_events_published_total"),
            7.0
        );
        assert_eq!(counter_total(text, "outbox_relay_events_failed_total"), 0.0);
    }

    #[test]
    fn times_are_rfc3339_or_local_inputs_in_utc() {
        let expected = parse_time("2026-12-06T21:00:00Z").expect("RFC 3339");
        assert_eq!(parse_time("2026-12-06T22:00:00+01:00"), Some(expected));
        assert_eq!(parse_time("2026-12-06T21:00"), Some(expected));
        assert_eq!(parse_time("yesterday"), None);
    }
}
