//! The fence of every write: every partition's lease taken as the relay
//! takes them, and the values the relay binds with it on its mark and its
//! fetch.

use outbox_relay::config::{DEFAULT_MAX_BATCH_BYTES, DeadLetterPolicy};
use outbox_relay::event::Lease;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgPool, Postgres, Row};

use crate::statements::{ACQUIRE_LEASES, PARTITION_COUNT};

/// The relay id the leases are taken for.
const RELAY_ID: &str = "mark-cost";
/// How long the leases last: longer than any run.
const LEASE_SECONDS: f64 = 3600.0;
/// Events a fetch asks for: the relay's default batch.
const FETCH_LIMIT: i64 = 500;

/// A statement with the values bound so far.
pub(crate) type BoundQuery<'q> = Query<'q, Postgres, PgArguments>;

/// The relay, the partition count, the leases.
pub(crate) struct Fence {
    partition_count: i32,
    partitions: Vec<i32>,
    leases: String,
}

impl Fence {
    /// Every partition's lease, taken as the relay takes them.
    pub(crate) async fn take(pool: &PgPool) -> Fence {
        let partition_count: i32 = sqlx::query_scalar(PARTITION_COUNT)
            .fetch_one(pool)
            .await
            .expect("partition count");
        let rows = sqlx::query(ACQUIRE_LEASES)
            .bind(RELAY_ID)
            .bind(LEASE_SECONDS)
            .bind(i64::from(partition_count))
            .fetch_all(pool)
            .await
            .expect("acquire leases");
        let leases: Vec<Lease> = rows
            .iter()
            .map(|row| Lease {
                partition_no: row.get(0),
                lease_token: row.get(1),
            })
            .collect();
        assert_eq!(leases.len(), partition_count as usize, "every lease taken");
        Fence {
            partition_count,
            partitions: leases.iter().map(|lease| lease.partition_no).collect(),
            leases: serde_json::to_string(&leases).expect("leases as JSON"),
        }
    }

    /// The mark's `$1`..`$4` bound on `query` for `ids`, as the relay
    /// binds them.
    pub(crate) fn bind_mark<'q>(&self, query: BoundQuery<'q>, ids: &[i64]) -> BoundQuery<'q> {
        query
            .bind(RELAY_ID)
            .bind(self.partition_count)
            .bind(self.leases.clone())
            .bind(ids.to_vec())
    }

    /// The fetch's six values bound on `query`, `exclude` left out, as the
    /// relay binds them.
    pub(crate) fn bind_fetch<'q>(&self, query: BoundQuery<'q>, exclude: &[i64]) -> BoundQuery<'q> {
        query
            .bind(self.partition_count)
            .bind(self.partitions.clone())
            .bind(DeadLetterPolicy::default() == DeadLetterPolicy::Hold)
            .bind(FETCH_LIMIT)
            .bind(exclude.to_vec())
            .bind(i64::try_from(DEFAULT_MAX_BATCH_BYTES).unwrap_or(i64::MAX))
    }
}
