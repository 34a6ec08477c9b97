//! A variant's database and backlog: a fresh database, migrated, with
//! autovacuum off on the outbox table and `pg_walinspect` when the server
//! has it, the variant's schema change, a backlog written by plain SQL
//! `INSERT`s and never analyzed, and every partition lease taken as the
//! relay takes them.

use outbox_testkit::TestDatabase;
use sqlx::{PgPool, Postgres};

use crate::Settings;
use crate::fence::Fence;
use crate::keys::KeyDistribution;
use crate::sql::DISABLE_AUTOVACUUM;
use crate::statements::{CREATE_WALINSPECT, DATABASE_OID, PENDING_IDS, ROW_WIDTH};
use crate::variants::Variant;
use crate::writers::write_backlog;

/// Aggregates of the backlog, drawn uniformly.
const AGGREGATES: u64 = 1000;
/// The topic of every event.
const TOPIC: &str = "mark-cost";

/// The backlog as written: mean bytes of a row and of its payload as text,
/// and the table's heap pages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BacklogSize {
    pub(crate) row_bytes: f64,
    pub(crate) payload_bytes: f64,
    pub(crate) heap_pages: i64,
}

/// A variant's database, its backlog written and its leases taken.
pub(crate) struct Backlog {
    pub(crate) database: TestDatabase<Postgres>,
    pub(crate) pool: PgPool,
    /// Whether `pg_walinspect` could be created.
    pub(crate) walinspect: bool,
    pub(crate) size: BacklogSize,
    pub(crate) fence: Fence,
    /// The backlog's ids, in the order the relay publishes them.
    pub(crate) ids: Vec<i64>,
    /// This database's oid, which names its blocks in the WAL.
    pub(crate) database_oid: i64,
}

impl Backlog {
    /// `variant`'s database with a backlog of `settings.events`.
    pub(crate) async fn write(variant: Variant, settings: &Settings) -> Backlog {
        let database = outbox_testkit::postgres().await;
        let pool = database.pool().clone();
        outbox::migrate(&pool).await.expect("migrate");
        execute(&pool, DISABLE_AUTOVACUUM).await;
        let walinspect = sqlx::query(CREATE_WALINSPECT).execute(&pool).await;
        if let Err(error) = &walinspect {
            println!("  no pg_walinspect ({error}): WAL from the LSN alone");
        }
        for statement in variant.schema {
            execute(&pool, statement).await;
        }
        let payload_bytes = variant.payload_bytes.unwrap_or(settings.payload_bytes);
        let writing = write_backlog(
            &pool,
            TOPIC,
            KeyDistribution::Uniform {
                aggregates: AGGREGATES,
            },
            settings.events,
            payload_bytes,
        )
        .await;
        let (row_bytes, payload_text_bytes, heap_pages): (f64, f64, i64) =
            sqlx::query_as(ROW_WIDTH)
                .fetch_one(&pool)
                .await
                .expect("row width");
        let fence = Fence::take(&pool).await;
        let ids: Vec<i64> = sqlx::query_scalar(PENDING_IDS)
            .fetch_all(&pool)
            .await
            .expect("read the backlog's ids");
        assert_eq!(ids.len() as u64, settings.events, "the backlog's size");
        let database_oid: i64 = sqlx::query_scalar(DATABASE_OID)
            .fetch_one(&pool)
            .await
            .expect("database oid");
        println!(
            "  {}: backlog of {} written in {:.1} s; row {:.0} bytes, payload {:.0} bytes, {} heap pages",
            variant.name,
            ids.len(),
            writing.as_secs_f64(),
            row_bytes,
            payload_text_bytes,
            heap_pages
        );
        Backlog {
            database,
            pool,
            walinspect: walinspect.is_ok(),
            size: BacklogSize {
                row_bytes,
                payload_bytes: payload_text_bytes,
                heap_pages,
            },
            fence,
            ids,
            database_oid,
        }
    }
}

/// Run `statement` on `pool`, or fail.
async fn execute(pool: &PgPool, statement: &'static str) {
    sqlx::query(statement)
        .execute(pool)
        .await
        .unwrap_or_else(|error| panic!("{statement}: {error}"));
}
