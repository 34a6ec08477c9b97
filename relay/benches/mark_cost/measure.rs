//! One variant's run: its database and backlog, then, on one connection,
//! a fetch before the work, the work measured over the backlog, and what
//! the work did to the WAL and the table.

use sqlx::Connection;

use crate::Settings;
use crate::backlog::{Backlog, BacklogSize};
use crate::fetch_timing::{FetchAfterHalf, FetchCost, fetch_cost};
use crate::session::Session;
use crate::statements::COUNT_PENDING;
use crate::table_after::TableAfter;
use crate::variants::{Variant, Work};
use crate::wal::WalWritten;
use crate::work::{WorkCost, measure_work};

/// What one variant's run measured.
#[derive(Debug, Clone)]
pub(crate) struct Figures {
    pub(crate) variant: Variant,
    pub(crate) events: u64,
    pub(crate) backlog: BacklogSize,
    pub(crate) work: WorkCost,
    pub(crate) wal: WalWritten,
    pub(crate) table: TableAfter,
    pub(crate) fetch_before: FetchCost,
    pub(crate) fetch_after: FetchAfterHalf,
}

/// Run `variant` on a database of its own.
pub(crate) async fn run(variant: Variant, settings: &Settings) -> Figures {
    let Backlog {
        database,
        pool,
        walinspect,
        size,
        fence,
        ids,
        database_oid,
    } = Backlog::write(variant, settings).await;
    let session_settings = matches!(
        variant.work,
        Work::Loop {
            session_settings: true,
            ..
        }
    );
    let mut session = Session::connect(database.url(), session_settings).await;
    let fetch_before = fetch_cost(&mut session, &fence, None, settings.repeats).await;
    let work = measure_work(
        variant.work,
        &mut session,
        &pool,
        &fence,
        &ids,
        settings.repeats,
    )
    .await;
    session
        .connection
        .close()
        .await
        .expect("close the measured session");

    let pending: i64 = sqlx::query_scalar(COUNT_PENDING)
        .fetch_one(&pool)
        .await
        .expect("count pending");
    assert_eq!(pending, 0, "{}: events left pending", variant.name);
    let wal = work.wal.written(&pool, database_oid, walinspect).await;
    let table = TableAfter::read(&pool, settings.events).await;
    pool.close().await;
    drop(database);
    Figures {
        variant,
        events: settings.events,
        backlog: size,
        work: work.cost,
        wal,
        table,
        fetch_before,
        fetch_after: work.fetch_after,
    }
}
