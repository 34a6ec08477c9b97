//! The relay's batch loop with a broker that answers at once, 500 events
//! a batch: fetch batch N + 1 (batch N's ids left out, as the relay leaves
//! out the ids in flight) and mark batch N, as two statements or one (the
//! mark as a data-modifying CTE in front of the fetch); each in its
//! transaction, or alone, the settings made for the session.

use std::sync::Arc;

use crate::fence::Fence;
use crate::relay_statements::{fetch, mark_and_fetch, settle};
use crate::session::Session;
use crate::statements::{FETCH_PENDING, MARK_PUBLISHED, mark_then_fetch};

/// Where the loop is.
pub(crate) struct FetchMarkLoop {
    /// The mark and the fetch as one statement, when they are sent as one.
    together: Option<Arc<str>>,
    session_settings: bool,
    /// The batch fetched and not yet marked.
    in_flight: Option<Vec<i64>>,
}

impl FetchMarkLoop {
    /// The loop sending the mark and the fetch as one statement when
    /// `together`, without transactions when `session_settings`.
    pub(crate) fn new(together: bool, session_settings: bool) -> FetchMarkLoop {
        FetchMarkLoop {
            together: together.then(|| mark_then_fetch(MARK_PUBLISHED, FETCH_PENDING).into()),
            session_settings,
            in_flight: None,
        }
    }

    /// Settle batches until `settled` reaches `until`, or none is left;
    /// returns the batches settled.
    pub(crate) async fn run_until(
        &mut self,
        session: &mut Session,
        fence: &Fence,
        settled: &mut usize,
        until: usize,
    ) -> u64 {
        let session_settings = self.session_settings;
        if self.in_flight.is_none() && *settled == 0 {
            self.in_flight = Some(fetch(session, fence, &[], None, session_settings).await);
        }
        let mut batches = 0;
        while *settled < until {
            let Some(current) = self.in_flight.take() else {
                break;
            };
            if current.is_empty() {
                break;
            }
            let next = match &self.together {
                Some(together) => {
                    mark_and_fetch(session, together, fence, &current, session_settings).await
                }
                None => {
                    let next = fetch(session, fence, &current, None, session_settings).await;
                    let changed =
                        settle(session, MARK_PUBLISHED, fence, &current, session_settings).await;
                    assert_eq!(changed as usize, current.len(), "rows marked");
                    next
                }
            };
            *settled += current.len();
            self.in_flight = Some(next);
            batches += 1;
        }
        batches
    }
}
