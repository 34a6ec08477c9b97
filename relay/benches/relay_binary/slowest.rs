//! The slowest event of a latency run, traced through the relay's own log:
//! its commit and its arrival at the consumer, on the wall clock, and the
//! relay's log lines between the two (with `--relay-log
//! outbox_relay=debug`, its fetches and its batches' timings: the oldest
//! event's age when the batch was sent, the time to hand it to the broker,
//! and the time to the broker's last acknowledgement).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::support::consumers::Arrivals;

/// Log lines shown at most.
const MOST_LINES: usize = 80;
/// Log lines shown from before the commit: the batch in hand then.
const BEFORE_COMMIT: Duration = Duration::from_millis(20);

/// The slowest event: its id, commit and arrival, on the wall clock.
pub(crate) struct Slowest {
    id: Uuid,
    committed: DateTime<Utc>,
    arrived: DateTime<Utc>,
}

impl Slowest {
    /// The event of `commits` that took longest to arrive.
    pub(crate) fn find(commits: &HashMap<Uuid, Instant>, arrivals: &Arrivals) -> Option<Slowest> {
        let arrived = arrivals.lock().unwrap();
        let (id, committed, arrival) = commits
            .iter()
            .filter_map(|(id, committed)| {
                arrived
                    .get(&id.to_string())
                    .map(|arrival| (*id, *committed, *arrival))
            })
            .max_by_key(|(_, committed, arrival)| arrival.saturating_duration_since(*committed))?;
        Some(Slowest {
            id,
            committed: wall_clock(committed),
            arrived: wall_clock(arrival),
        })
    }

    /// The trace: the event, then the lines of `log` from just before its
    /// commit to its arrival.
    pub(crate) fn trace(&self, log: &str) -> String {
        let from = self.committed - BEFORE_COMMIT;
        let lines: Vec<&str> = log
            .lines()
            .filter(|line| {
                line.split_whitespace()
                    .next()
                    .and_then(|stamp| DateTime::parse_from_rfc3339(stamp).ok())
                    .is_some_and(|stamp| stamp >= from && stamp <= self.arrived)
            })
            .take(MOST_LINES)
            .collect();
        format!(
            "    slowest event {}: committed {}, arrived {} ({:.1} ms); the relay's log from {} ms before its commit:\n      {}",
            self.id,
            self.committed.format("%H:%M:%S%.6f"),
            self.arrived.format("%H:%M:%S%.6f"),
            (self.arrived - self.committed)
                .num_microseconds()
                .unwrap_or(0) as f64
                / 1e3,
            BEFORE_COMMIT.as_millis(),
            if lines.is_empty() {
                "(none: run with --relay-log outbox_relay=debug)".to_owned()
            } else {
                lines.join("\n      ")
            }
        )
    }
}

/// `instant` on the wall clock.
fn wall_clock(instant: Instant) -> DateTime<Utc> {
    let now = Instant::now();
    let wall = SystemTime::now();
    let at = match now.checked_duration_since(instant) {
        Some(ago) => wall - ago,
        None => wall + instant.duration_since(now),
    };
    DateTime::<Utc>::from(at)
}
