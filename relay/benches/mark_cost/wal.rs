//! The WAL the work wrote: `pg_wal_lsn_diff` over each measured window
//! (every session's WAL), and this database's own records within them,
//! read with `pg_walinspect`.

use std::time::{Duration, Instant};

use sqlx::{PgPool, Row};

use crate::statements::{WAL_DIFF, WAL_FLUSHED, WAL_LSN, WAL_RECORD_KINDS, WAL_RECORDS};

/// This database's WAL records over the measured work, in bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct WalRecords {
    pub(crate) heap: i64,
    pub(crate) btree: i64,
    pub(crate) commits: i64,
    pub(crate) other: i64,
    /// Full-page images, counted in the kinds above too.
    pub(crate) full_pages: i64,
    pub(crate) records: i64,
    /// By resource manager and record type (`Heap/UPDATE`): records and
    /// bytes, most bytes first; commits are not among them.
    pub(crate) kinds: Vec<(String, i64, i64)>,
}

impl WalRecords {
    pub(crate) fn total(&self) -> i64 {
        self.heap + self.btree + self.commits + self.other
    }

    fn add(&mut self, other: WalRecords) {
        self.heap += other.heap;
        self.btree += other.btree;
        self.commits += other.commits;
        self.other += other.other;
        self.full_pages += other.full_pages;
        self.records += other.records;
        for (kind, records, bytes) in other.kinds {
            match self.kinds.iter_mut().find(|(known, _, _)| *known == kind) {
                Some(entry) => {
                    entry.1 += records;
                    entry.2 += bytes;
                }
                None => self.kinds.push((kind, records, bytes)),
            }
        }
        self.kinds
            .sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    }
}

/// The WAL over the work.
#[derive(Debug, Clone)]
pub(crate) struct WalWritten {
    /// `pg_wal_lsn_diff` over the work: every session's WAL.
    pub(crate) lsn_bytes: i64,
    /// This database's own records over the work, when `pg_walinspect`
    /// could read them.
    pub(crate) records: Option<WalRecords>,
}

/// The measured windows: where the WAL was at each one's start and end,
/// and the bytes between them.
#[derive(Debug, Default)]
pub(crate) struct WalWindows {
    windows: Vec<(String, String)>,
    lsn_bytes: i64,
}

impl WalWindows {
    /// Where the WAL is now.
    pub(crate) async fn position(pool: &PgPool) -> String {
        sqlx::query_scalar(WAL_LSN)
            .fetch_one(pool)
            .await
            .expect("WAL position")
    }

    /// The window from `start` to `end`.
    pub(crate) async fn add(&mut self, pool: &PgPool, start: String, end: String) {
        self.lsn_bytes += sqlx::query_scalar::<_, i64>(WAL_DIFF)
            .bind(&start)
            .bind(&end)
            .fetch_one(pool)
            .await
            .expect("WAL difference");
        self.windows.push((start, end));
    }

    /// The WAL over the windows; this database's own records (its oid
    /// `database_oid`) only with `walinspect`.
    pub(crate) async fn written(
        &self,
        pool: &PgPool,
        database_oid: i64,
        walinspect: bool,
    ) -> WalWritten {
        WalWritten {
            lsn_bytes: self.lsn_bytes,
            records: if walinspect {
                self.records(pool, database_oid).await
            } else {
                None
            },
        }
    }

    /// This database's WAL records within the windows, once the WAL is
    /// flushed that far; `None` when it cannot be read (a checkpoint may
    /// have recycled it).
    async fn records(&self, pool: &PgPool, database_oid: i64) -> Option<WalRecords> {
        let last = &self.windows.last()?.1;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let flushed: bool = sqlx::query_scalar(WAL_FLUSHED)
                .bind(last)
                .fetch_one(pool)
                .await
                .expect("WAL flush position");
            if flushed || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut total = WalRecords::default();
        for (start, end) in &self.windows {
            let row = sqlx::query(WAL_RECORDS)
                .bind(start)
                .bind(end)
                .bind(database_oid)
                .fetch_one(pool)
                .await;
            let kinds = sqlx::query_as::<_, (String, i64, i64)>(WAL_RECORD_KINDS)
                .bind(start)
                .bind(end)
                .bind(database_oid)
                .fetch_all(pool)
                .await;
            match row.and_then(|row| Ok((row, kinds?))) {
                Ok((row, kinds)) => total.add(WalRecords {
                    heap: row.get(0),
                    btree: row.get(1),
                    commits: row.get(2),
                    other: row.get(3),
                    full_pages: row.get(4),
                    records: row.get(5),
                    kinds,
                }),
                Err(error) => {
                    println!("  cannot read the WAL from {start} to {end}: {error}");
                    return None;
                }
            }
        }
        Some(total)
    }
}
