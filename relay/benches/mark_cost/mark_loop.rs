//! The mark alone over the backlog, in id order: `batch` ids a statement,
//! each in the relay's transaction (`BEGIN`, `SET LOCAL
//! synchronous_commit = off`, the mark, `COMMIT`).

use crate::fence::Fence;
use crate::relay_statements::settle;
use crate::session::Session;
use crate::statements::{DELETE_ACKNOWLEDGED, MARK_PUBLISHED};
use crate::variants::Settle;

/// How the backlog is marked.
pub(crate) struct MarkLoop {
    statement: &'static str,
    batch: usize,
}

impl MarkLoop {
    /// `batch` ids a statement, settled as `settle` says.
    pub(crate) fn new(settle: Settle, batch: usize) -> MarkLoop {
        MarkLoop {
            statement: match settle {
                Settle::Update => MARK_PUBLISHED,
                Settle::Delete => DELETE_ACKNOWLEDGED,
            },
            batch,
        }
    }

    /// Settle `ids` from the `settled` first ones on until `until` are
    /// settled; returns the batches settled.
    pub(crate) async fn run_until(
        &self,
        session: &mut Session,
        fence: &Fence,
        ids: &[i64],
        settled: &mut usize,
        until: usize,
    ) -> u64 {
        let mut batches = 0;
        while *settled < until {
            let end = (*settled + self.batch).min(until);
            let changed = settle(session, self.statement, fence, &ids[*settled..end], false).await;
            assert_eq!(changed as usize, end - *settled, "rows settled");
            *settled = end;
            batches += 1;
        }
        batches
    }
}
