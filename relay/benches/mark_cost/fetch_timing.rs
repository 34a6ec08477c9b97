//! The relay's fetch timed apart from the work, on the measured session:
//! the backend's CPU of the first fetch at that point and the mean of the
//! repeats after it; after half the backlog also entered past the last
//! settled id, and the buffers and indexes of its plan.

use sqlx::{AssertSqlSafe, Row};

use crate::fence::Fence;
use crate::relay_statements::fetch;
use crate::session::Session;
use crate::statements::{FETCH_PENDING, FETCH_SETTING};

/// The CPU of one fetch, in µs: the first one at that point and the mean
/// of the repeats after it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FetchCost {
    pub(crate) first_us: f64,
    pub(crate) repeat_us: f64,
    pub(crate) rows: usize,
}

/// The fetch after half the backlog: from the start of the table and from
/// the last settled id; the buffers the one from the start touched and
/// the indexes its plan used.
#[derive(Debug, Clone, Default)]
pub(crate) struct FetchAfterHalf {
    pub(crate) from_start: FetchCost,
    pub(crate) from_last: FetchCost,
    pub(crate) buffers: i64,
    pub(crate) indexes: Vec<String>,
}

/// The backend CPU of the relay's fetch (in its transaction), entered
/// past `after` when given, once and then `repeats` times more, in µs.
pub(crate) async fn fetch_cost(
    session: &mut Session,
    fence: &Fence,
    after: Option<i64>,
    repeats: usize,
) -> FetchCost {
    let timed = async |session: &mut Session| {
        let before = session.cpu.read();
        let rows = fetch(session, fence, &[], after, false).await;
        let spent = session.cpu.read() - before;
        (spent.sched_seconds * 1e6, rows.len())
    };
    let (first_us, rows) = timed(session).await;
    let mut total = 0.0;
    for _ in 0..repeats {
        total += timed(session).await.0;
    }
    FetchCost {
        first_us,
        repeat_us: total / repeats.max(1) as f64,
        rows,
    }
}

/// The fetch after half the backlog, `last` the last id settled, each
/// repeated `repeats` times (at least once), and its plan; the statements
/// it sends are not counted.
pub(crate) async fn fetch_after_half(
    session: &mut Session,
    fence: &Fence,
    last: i64,
    repeats: usize,
) -> FetchAfterHalf {
    let statements = session.statements;
    let repeats = repeats.max(1);
    let from_start = fetch_cost(session, fence, None, repeats).await;
    let from_last = fetch_cost(session, fence, Some(last), repeats).await;
    let (buffers, indexes) = explain_fetch(session, fence).await;
    session.statements = statements;
    FetchAfterHalf {
        from_start,
        from_last,
        buffers,
        indexes,
    }
}

/// The fetch's plan, run (`EXPLAIN (ANALYZE, BUFFERS)`) in its
/// transaction: the buffers it touched and the indexes it used.
async fn explain_fetch(session: &mut Session, fence: &Fence) -> (i64, Vec<String>) {
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) {FETCH_PENDING}");
    let query = fence
        .bind_fetch(sqlx::query(AssertSqlSafe(explain)), &[])
        .persistent(false);
    let plan: serde_json::Value = session
        .send(&[FETCH_SETTING], false, async move |connection| {
            query
                .fetch_one(connection)
                .await
                .expect("explain the fetch")
                .get(0)
        })
        .await;
    let top = &plan[0]["Plan"];
    let buffers = ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|key| top[*key].as_i64())
        .sum();
    let mut indexes = Vec::new();
    index_names(top, &mut indexes);
    indexes.sort();
    indexes.dedup();
    (buffers, indexes)
}

fn index_names(node: &serde_json::Value, names: &mut Vec<String>) {
    if let Some(name) = node["Index Name"].as_str() {
        names.push(name.to_owned());
    }
    if let Some(children) = node["Plans"].as_array() {
        for child in children {
            index_names(child, names);
        }
    }
}
