//! A fresh PostgreSQL database per case (`outbox_testkit::postgres`),
//! migrated by `outbox-relay migrate`, with autovacuum off on the outbox
//! table so that it is never analyzed behind the bench's back.

use outbox_testkit::TestDatabase;

use crate::deliveries::Written;
use crate::relay::migrate;
use crate::source::{EventSource, SourceKind};
use crate::sql::{
    ANALYZE, COUNT_PUBLISHED, COUNT_SETTLED, DISABLE_AUTOVACUUM, ROWS_CHANGED, TABLE_STATISTICS,
    WRITTEN_EVENTS,
};

pub(crate) struct BenchDatabase {
    pub(crate) url: String,
    /// The database's name, for the CPU of its backends.
    pub(crate) name: String,
    pub(crate) pool: sqlx::PgPool,
    /// How the relay reads it; a logical source has a slot of its own.
    pub(crate) source: EventSource,
    database: TestDatabase<sqlx::Postgres>,
}

/// What the planner knows of `outbox_events`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statistics {
    /// `pg_class.reltuples`: -1 when never vacuumed or analyzed.
    pub(crate) reltuples: f64,
    pub(crate) analyzed: bool,
}

impl BenchDatabase {
    /// A fresh database, migrated for `source`, and a pool of
    /// `connections`.
    pub(crate) async fn create(connections: u32, source: SourceKind) -> BenchDatabase {
        let database = outbox_testkit::postgres().await;
        database.pool().close().await;
        let url = database.url().to_owned();
        let source = EventSource::new(source);
        migrate(&url, &source);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(connections)
            .connect(&url)
            .await
            .expect("connect to the bench database");
        sqlx::query(DISABLE_AUTOVACUUM)
            .execute(&pool)
            .await
            .expect("disable autovacuum on outbox_events");
        let name = url
            .rsplit('/')
            .next()
            .and_then(|tail| tail.split('?').next())
            .unwrap_or_default()
            .to_owned();
        BenchDatabase {
            url,
            name,
            pool,
            source,
            database,
        }
    }

    pub(crate) async fn analyze(&self) {
        sqlx::query(ANALYZE)
            .execute(&self.pool)
            .await
            .expect("analyze");
    }

    pub(crate) async fn statistics(&self) -> Statistics {
        let (reltuples, analyzed): (f64, bool) = sqlx::query_as(TABLE_STATISTICS)
            .fetch_one(&self.pool)
            .await
            .expect("read table statistics");
        Statistics {
            reltuples,
            analyzed,
        }
    }

    pub(crate) async fn published(&self) -> u64 {
        let count: i64 = sqlx::query_scalar(COUNT_PUBLISHED)
            .fetch_one(&self.pool)
            .await
            .expect("count published");
        count as u64
    }

    /// Events marked published or deleted by the mark, of `written` in
    /// all.
    pub(crate) async fn settled(&self, written: u64) -> u64 {
        let count: i64 = sqlx::query_scalar(COUNT_SETTLED)
            .bind(i64::try_from(written).unwrap_or(i64::MAX))
            .fetch_one(&self.pool)
            .await
            .expect("count settled");
        count as u64
    }

    /// Every event's id and aggregate, in the order they were written.
    pub(crate) async fn written(&self) -> Vec<Written> {
        let rows: Vec<(String, String)> = sqlx::query_as(WRITTEN_EVENTS)
            .fetch_all(&self.pool)
            .await
            .expect("read the written events");
        rows.into_iter()
            .map(|(event_id, aggregate_id)| Written {
                event_id,
                aggregate_id,
            })
            .collect()
    }

    /// Rows of `outbox_events` updated or deleted so far, as the server's
    /// statistics say; a session's counts arrive when it ends or idles.
    pub(crate) async fn rows_changed(&self) -> u64 {
        let count: i64 = sqlx::query_scalar(ROWS_CHANGED)
            .fetch_one(&self.pool)
            .await
            .expect("read the table's row counts");
        count as u64
    }

    pub(crate) async fn drop_database(self) {
        self.pool.close().await;
        // The test database drops the database (WITH (FORCE)) on drop.
        drop(self.database);
    }
}
