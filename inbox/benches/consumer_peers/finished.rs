//! When an in-process inbox consumer finished its last delivery.
//!
//! `ConsumerStats` come back only when `run` returns, and stopping a
//! RabbitMQ consumer while deliveries sit in its buffer requeues them, so
//! the bench counts finished deliveries as they happen: the inbox's
//! delivery policy emits one debug event per message it settles, where it
//! counts `processed` and `duplicates` (`event processed`, `duplicate event
//! skipped`, and the same `in a batch`). A `tracing` layer of the bench
//! counts those events (nothing else is enabled at debug level) and notes
//! the instant of the one that completes the run. The count is checked
//! against the stats `run` returns afterwards; a count that stops short
//! (the messages changed) fails the run after [`STALL`] without progress.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt as log_format};

/// The module (and its submodules) whose debug events say a delivery was
/// settled.
const POLICY_TARGET: &str = "outbox_inbox::policy";
/// The messages of those events.
const SETTLED: [&str; 4] = [
    "event processed",
    "duplicate event skipped",
    "event processed in a batch",
    "duplicate event skipped in a batch",
];
/// How long the count may stand still before [`wait`] gives up.
const STALL: Duration = Duration::from_secs(30);

/// The count of the current run.
struct Count {
    settled: AtomicU64,
    target: AtomicU64,
    done_at: Mutex<Option<Instant>>,
    done: Notify,
}

static COUNT: OnceLock<Count> = OnceLock::new();

fn count() -> &'static Count {
    COUNT.get_or_init(|| Count {
        settled: AtomicU64::new(0),
        target: AtomicU64::new(u64::MAX),
        done_at: Mutex::new(None),
        done: Notify::new(),
    })
}

/// Install the bench's subscriber: warnings and errors (or `RUST_LOG`) to
/// stderr, and the counting layer.
pub(crate) fn install() {
    let log = log_format::layer()
        .with_writer(std::io::stderr)
        .with_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")));
    let counting = Counting.with_filter(filter_fn(|metadata| {
        metadata.is_event()
            && *metadata.level() == Level::DEBUG
            && metadata.target().starts_with(POLICY_TARGET)
    }));
    tracing_subscriber::registry()
        .with(log)
        .with(counting)
        .init();
}

/// Start counting for a run of `deliveries`.
pub(crate) fn reset(deliveries: u64) {
    let count = count();
    count.settled.store(0, Ordering::SeqCst);
    count.target.store(deliveries, Ordering::SeqCst);
    *count.done_at.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Deliveries settled so far in this run.
pub(crate) fn settled() -> u64 {
    count().settled.load(Ordering::SeqCst)
}

/// The instant the run's last delivery was settled; `None` when that did
/// not happen within `limit`, or the count stood still for [`STALL`].
pub(crate) async fn wait(limit: Duration) -> Option<Instant> {
    let count = count();
    let deadline = tokio::time::Instant::now() + limit;
    let mut last = (settled(), tokio::time::Instant::now());
    loop {
        let notified = count.done.notified();
        if let Some(at) = *count.done_at.lock().unwrap_or_else(PoisonError::into_inner) {
            return Some(at);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline || now.duration_since(last.1) >= STALL {
            return None;
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), notified).await;
        if settled() != last.0 {
            last = (settled(), tokio::time::Instant::now());
        }
    }
}

struct Counting;

impl<S: Subscriber> Layer<S> for Counting {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let mut message = MessageIs::default();
        event.record(&mut message);
        if !message.settled {
            return;
        }
        let count = count();
        let settled = count.settled.fetch_add(1, Ordering::SeqCst) + 1;
        if settled == count.target.load(Ordering::SeqCst) {
            *count.done_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            count.done.notify_waiters();
        }
    }
}

/// Whether an event's message is one of [`SETTLED`].
#[derive(Default)]
struct MessageIs {
    settled: bool,
}

impl Visit for MessageIs {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let text = format!("{value:?}");
            self.settled = SETTLED.contains(&text.as_str());
        }
    }
}
