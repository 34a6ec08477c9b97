//! The relay's statements on the measured session, as the relay sends
//! them: its fetch, its mark (or delete), and, for the variants that make
//! one statement of both, the mark of one batch with the fetch of the
//! next.

use std::sync::Arc;

use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, Row};

use crate::fence::Fence;
use crate::session::Session;
use crate::statements::{FETCH_PENDING, FETCH_SETTING, MARK_SETTING, fetch_from};

/// The relay's fetch, `exclude` left out, entered past `after` when
/// given, planned for its values (not prepared): in its transaction
/// (`SET LOCAL enable_sort = off`), or alone with `session_settings`.
/// Returns the ids fetched.
pub(crate) async fn fetch(
    session: &mut Session,
    fence: &Fence,
    exclude: &[i64],
    after: Option<i64>,
    session_settings: bool,
) -> Vec<i64> {
    let sql: Arc<str> = match after {
        None => Arc::from(FETCH_PENDING),
        Some(_) => Arc::from(fetch_from(FETCH_PENDING)),
    };
    let mut query = fence.bind_fetch(sqlx::query(AssertSqlSafe(sql)), exclude);
    if let Some(after) = after {
        query = query.bind(after);
    }
    let query = query.persistent(false);
    let rows = session
        .send(
            &[FETCH_SETTING],
            session_settings,
            async move |connection| query.fetch_all(connection).await.expect("fetch"),
        )
        .await;
    first_column(&rows)
}

/// Settle `ids` with `statement` (the mark or the delete): in the relay's
/// transaction (`SET LOCAL synchronous_commit = off`), or alone with
/// `session_settings`. Returns the rows changed.
pub(crate) async fn settle(
    session: &mut Session,
    statement: &'static str,
    fence: &Fence,
    ids: &[i64],
    session_settings: bool,
) -> u64 {
    let query = fence.bind_mark(sqlx::query(statement), ids);
    session
        .send(&[MARK_SETTING], session_settings, async move |connection| {
            query
                .execute(connection)
                .await
                .expect("settle")
                .rows_affected()
        })
        .await
}

/// Mark `ids` and fetch the next batch in one statement, `together` (the
/// mark as a data-modifying CTE), in a transaction with both settings or,
/// with `session_settings`, alone. Returns the ids fetched.
pub(crate) async fn mark_and_fetch(
    session: &mut Session,
    together: &Arc<str>,
    fence: &Fence,
    ids: &[i64],
    session_settings: bool,
) -> Vec<i64> {
    let marked = fence.bind_mark(sqlx::query(AssertSqlSafe(Arc::clone(together))), ids);
    let query = fence.bind_fetch(marked, ids).persistent(false);
    let rows = session
        .send(
            &[MARK_SETTING, FETCH_SETTING],
            session_settings,
            async move |connection| query.fetch_all(connection).await.expect("mark and fetch"),
        )
        .await;
    first_column(&rows)
}

/// The ids a fetch returned: its first column.
fn first_column(rows: &[PgRow]) -> Vec<i64> {
    rows.iter().map(|row| row.get::<i64, _>(0)).collect()
}
