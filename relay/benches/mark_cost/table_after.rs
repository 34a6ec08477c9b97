//! The outbox table after the work: the changes its statistics counted,
//! and its size.

use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::statements::{TABLE_CHANGES, TABLE_SIZE};

/// Updates, HOT updates and deletes of `outbox_events`; its heap pages and
/// its indexes' bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableAfter {
    pub(crate) updates: i64,
    pub(crate) hot_updates: i64,
    pub(crate) deletes: i64,
    pub(crate) heap_pages: i64,
    pub(crate) index_bytes: i64,
}

impl TableAfter {
    /// The table once the measured session's statistics arrived (it
    /// reports them as it ends): at least `events` rows changed, or after
    /// 10 s whatever there is.
    pub(crate) async fn read(pool: &PgPool, events: u64) -> TableAfter {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (updates, hot_updates, deletes) = loop {
            let (updates, hot, deletes): (i64, i64, i64) = sqlx::query_as(TABLE_CHANGES)
                .fetch_one(pool)
                .await
                .expect("table statistics");
            if (updates + deletes) as u64 >= events || Instant::now() > deadline {
                break (updates, hot, deletes);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (heap_pages, index_bytes): (i64, i64) = sqlx::query_as(TABLE_SIZE)
            .fetch_one(pool)
            .await
            .expect("table size");
        TableAfter {
            updates,
            hot_updates,
            deletes,
            heap_pages,
            index_bytes,
        }
    }
}
