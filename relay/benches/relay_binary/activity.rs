//! Where the relay's database sessions spend the drain: `pg_stat_activity`
//! of the bench's database, read every few milliseconds from a connection
//! of the bench's own, each session's statement sorted into the relay's
//! phases (fetch, mark, leases, ...). Time in a phase is counted in
//! session-seconds: two marks running together for 10 ms count 20 ms.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use sqlx::Connection;
use sqlx::postgres::PgConnection;
use tokio_util::sync::CancellationToken;

use crate::sql::SESSIONS;

/// Session-seconds per phase, state and wait.
#[derive(Default, Debug)]
pub(crate) struct Profile {
    pub(crate) wall: Duration,
    pub(crate) samples: u64,
    /// Running a statement, by phase.
    pub(crate) active: BTreeMap<&'static str, f64>,
    /// Idle inside a transaction (the relay has the connection and is not
    /// sending anything), by the phase of its last statement.
    pub(crate) idle_in_transaction: BTreeMap<&'static str, f64>,
    /// Active sessions by phase and wait event (`-` when on CPU).
    pub(crate) waits: BTreeMap<String, f64>,
    /// Wall time with no relay session running or inside a transaction.
    pub(crate) relay_idle: f64,
    /// Wall time with a fetch running, and with a mark running.
    pub(crate) fetch_wall: f64,
    pub(crate) mark_wall: f64,
    /// Most marks seen running at once.
    pub(crate) most_marks: usize,
}

/// A session: pid, state, wait event type, wait event, query.
type SessionRow = (
    i32,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The phase of a statement, from its text; `previous` is the phase of the
/// session's last statement, for `COMMIT`.
fn phase(query: &str, previous: Option<&'static str>) -> &'static str {
    let text = query.trim_start();
    // `pg_stat_activity` cuts a query at `track_activity_query_size` (1 kB
    // by default): the fetch's comments leave its byte cap in view, not its
    // `WHERE` clause.
    if text.contains("e.id <> ALL(")
        || text.contains("bytes_through")
        || text.contains("enable_sort")
    {
        "fetch"
    } else if text.contains("SET state = 'published', published_at = now()")
        || text.contains("synchronous_commit")
    {
        "mark"
    } else if text.contains("LISTEN") {
        "listen"
    } else if text.contains("oldest_pending_at") {
        "metrics scrape"
    } else if text.contains("outbox_partitions") || text.contains("outbox_relays") {
        "leases"
    } else if text.contains("DELETE FROM outbox_events") {
        "retention"
    } else if text.starts_with("INSERT INTO outbox_events") || text.contains("generate_series") {
        "bench"
    } else if text.eq_ignore_ascii_case("COMMIT") || text.eq_ignore_ascii_case("ROLLBACK") {
        previous.unwrap_or("commit")
    } else if text.eq_ignore_ascii_case("BEGIN") {
        "begin"
    } else {
        "other"
    }
}

/// Read `pg_stat_activity` every `interval` until `stop`.
pub(crate) async fn profile(
    database_url: String,
    interval: Duration,
    stop: CancellationToken,
) -> Profile {
    let mut connection = PgConnection::connect(&database_url)
        .await
        .expect("connect for pg_stat_activity");
    let mut profile = Profile::default();
    let mut last_phase: HashMap<i32, &'static str> = HashMap::new();
    let started = Instant::now();
    let mut previous = Instant::now();
    while !stop.is_cancelled() {
        let rows: Vec<SessionRow> = sqlx::query_as(SESSIONS)
            .fetch_all(&mut connection)
            .await
            .expect("read pg_stat_activity");
        let now = Instant::now();
        let weight = (now - previous).as_secs_f64();
        previous = now;
        profile.samples += 1;
        let (mut relay_busy, mut fetching, mut marks) = (false, false, 0);
        for (pid, state, wait_type, wait_event, query) in rows {
            let query = query.unwrap_or_default();
            let phase = phase(&query, last_phase.get(&pid).copied());
            if phase == "bench" {
                continue;
            }
            if !matches!(phase, "begin" | "commit") {
                last_phase.insert(pid, phase);
            }
            match state.as_deref() {
                Some("active") => {
                    relay_busy |= phase != "listen";
                    fetching |= phase == "fetch";
                    marks += usize::from(phase == "mark");
                    *profile.active.entry(phase).or_default() += weight;
                    let wait = match (wait_type, wait_event) {
                        (Some(kind), Some(event)) => format!("{kind}:{event}"),
                        _ => "-".to_owned(),
                    };
                    *profile.waits.entry(format!("{phase} {wait}")).or_default() += weight;
                }
                Some(state) if state.starts_with("idle in transaction") => {
                    relay_busy = true;
                    *profile.idle_in_transaction.entry(phase).or_default() += weight;
                }
                _ => {}
            }
        }
        if !relay_busy {
            profile.relay_idle += weight;
        }
        if fetching {
            profile.fetch_wall += weight;
        }
        if marks > 0 {
            profile.mark_wall += weight;
        }
        profile.most_marks = profile.most_marks.max(marks);
        tokio::time::sleep(interval).await;
    }
    profile.wall = started.elapsed();
    let _ = connection.close().await;
    profile
}

impl Profile {
    /// Lines for the report: per phase, session time (ms and µs per event)
    /// and share of the wall time; then the waits.
    pub(crate) fn describe(&self, events: u64) -> String {
        let wall = self.wall.as_secs_f64().max(f64::EPSILON);
        let per_event = |seconds: f64| seconds * 1e6 / events.max(1) as f64;
        let mut lines = vec![format!(
            "    pg_stat_activity: {} samples over {:.2} s ({:.1} ms apart); no relay session active or in a transaction {:.0}% of the time; a fetch running {:.0}%, a mark running {:.0}%, at most {} marks at once",
            self.samples,
            wall,
            wall * 1e3 / self.samples.max(1) as f64,
            100.0 * self.relay_idle / wall,
            100.0 * self.fetch_wall / wall,
            100.0 * self.mark_wall / wall,
            self.most_marks
        )];
        for (phase, seconds) in &self.active {
            let idle = self.idle_in_transaction.get(phase).copied().unwrap_or(0.0);
            lines.push(format!(
                "      {phase}: running {:.0} ms ({:.1} µs/event, {:.0}% of wall), idle in transaction {:.0} ms",
                seconds * 1e3,
                per_event(*seconds),
                100.0 * seconds / wall,
                idle * 1e3
            ));
        }
        let mut waits: Vec<_> = self.waits.iter().collect();
        waits.sort_by(|a, b| b.1.total_cmp(a.1));
        let top: Vec<String> = waits
            .iter()
            .take(8)
            .map(|(wait, seconds)| format!("{wait} {:.0} ms", *seconds * 1e3))
            .collect();
        lines.push(format!("      waits (active sessions): {}", top.join(", ")));
        lines.join("\n")
    }

    /// Session-seconds running the fetch and the mark, per event, in µs.
    pub(crate) fn fetch_and_mark_per_event(&self, events: u64) -> (f64, f64) {
        let per_event = |phase: &str| {
            self.active.get(phase).copied().unwrap_or(0.0) * 1e6 / events.max(1) as f64
        };
        (per_event("fetch"), per_event("mark"))
    }
}
