//! The work over the backlog, measured: the mark alone or the relay's
//! loop over the first half of the backlog, the fetch after half timed
//! apart, then the work over the second half; the backend's CPU, the wall
//! time and the WAL position read around each half.

use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::cpu::CpuTime;
use crate::fence::Fence;
use crate::fetch_mark_loop::FetchMarkLoop;
use crate::fetch_timing::{FetchAfterHalf, fetch_after_half};
use crate::mark_loop::MarkLoop;
use crate::session::Session;
use crate::variants::Work;
use crate::wal::WalWindows;

/// What the work cost the marking backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkCost {
    /// The backend's CPU over the work, the fetches measured apart left
    /// out.
    pub(crate) cpu: CpuTime,
    pub(crate) wall: Duration,
    /// Statements sent per batch settled.
    pub(crate) statements_per_batch: f64,
}

/// What measuring the work found.
pub(crate) struct WorkMeasured {
    pub(crate) cost: WorkCost,
    pub(crate) wal: WalWindows,
    pub(crate) fetch_after: FetchAfterHalf,
}

/// What settles the backlog.
enum Settling {
    Mark(MarkLoop),
    FetchMark(FetchMarkLoop),
}

impl Settling {
    fn new(work: Work) -> Settling {
        match work {
            Work::Mark { settle, batch } => Settling::Mark(MarkLoop::new(settle, batch)),
            Work::Loop {
                together,
                session_settings,
            } => Settling::FetchMark(FetchMarkLoop::new(together, session_settings)),
        }
    }
}

/// Run `work` over `ids` on `session`, the fetch after half repeated
/// `repeats` times; the WAL positions read on `pool`.
pub(crate) async fn measure_work(
    work: Work,
    session: &mut Session,
    pool: &PgPool,
    fence: &Fence,
    ids: &[i64],
    repeats: usize,
) -> WorkMeasured {
    let half = ids.len() / 2;
    let mut settling = Settling::new(work);
    let mut settled = 0;
    let mut cpu = CpuTime::default();
    let mut wall = Duration::ZERO;
    let mut wal = WalWindows::default();
    let mut fetch_after = None;
    let mut batches = 0;
    session.statements = 0;
    for (index, until) in [half, ids.len()].into_iter().enumerate() {
        let start = WalWindows::position(pool).await;
        let started = Instant::now();
        let before = session.cpu.read();
        batches += match &mut settling {
            Settling::Mark(marks) => {
                marks
                    .run_until(session, fence, ids, &mut settled, until)
                    .await
            }
            Settling::FetchMark(fetch_mark) => {
                fetch_mark
                    .run_until(session, fence, &mut settled, until)
                    .await
            }
        };
        let after = session.cpu.read();
        wall += started.elapsed();
        cpu = cpu + (after - before);
        let end = WalWindows::position(pool).await;
        wal.add(pool, start, end).await;
        if index == 0 {
            let last = settled.checked_sub(1).map_or(0, |index| ids[index]);
            fetch_after = Some(fetch_after_half(session, fence, last, repeats).await);
        }
    }
    WorkMeasured {
        cost: WorkCost {
            cpu,
            wall,
            statements_per_batch: session.statements as f64 / batches.max(1) as f64,
        },
        wal,
        // The fetches after half the backlog ran between the two halves;
        // they were measured apart, here kept apart from the work's
        // figures.
        fetch_after: fetch_after.unwrap_or_default(),
    }
}
