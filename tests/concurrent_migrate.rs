//! `outbox::migrate` called by several replicas at once, each with its own
//! pool, on a fresh database of every backend: every call succeeds, each
//! migration is applied and recorded once, and the tables work afterwards.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use outbox::{Backend, Event};
use outbox_testkit::{TestBackend, TestDatabase};
use serde::Serialize;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{MySql, Pool, Postgres, Sqlite};
use tokio::sync::Barrier;

/// Replicas migrating at once.
const REPLICAS: usize = 8;

/// Connections in each replica's pool.
const REPLICA_POOL_SIZE: u32 = 2;

/// How long a replica's SQLite connection waits for another's write lock:
/// a bound against a hanging test, never a measured expectation.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Serialize, Event)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: uuid::Uuid,
}

/// A database the replicas connect to, each with a pool of its own.
trait ReplicaPool: Backend + TestBackend {
    /// Partitions the migration seeds in `outbox_partitions`.
    const PARTITIONS: i64;

    /// A new pool on `url`, as one replica opens it.
    fn connect_replica(url: String) -> impl Future<Output = Pool<Self>> + Send;
}

impl ReplicaPool for Postgres {
    const PARTITIONS: i64 = 32;

    async fn connect_replica(url: String) -> Pool<Self> {
        let options = PgConnectOptions::from_str(&url).expect("a PostgreSQL URL");
        PgPoolOptions::new()
            .max_connections(REPLICA_POOL_SIZE)
            .connect_with(options)
            .await
            .unwrap_or_else(|error| panic!("connect a replica to {url}: {error}"))
    }
}

impl ReplicaPool for MySql {
    const PARTITIONS: i64 = 32;

    async fn connect_replica(url: String) -> Pool<Self> {
        let options = MySqlConnectOptions::from_str(&url).expect("a MariaDB URL");
        MySqlPoolOptions::new()
            .max_connections(REPLICA_POOL_SIZE)
            .connect_with(options)
            .await
            .unwrap_or_else(|error| panic!("connect a replica to {url}: {error}"))
    }
}

impl ReplicaPool for Sqlite {
    const PARTITIONS: i64 = 1;

    async fn connect_replica(url: String) -> Pool<Self> {
        let options = SqliteConnectOptions::from_str(&url)
            .expect("a SQLite URL")
            .busy_timeout(SQLITE_BUSY_TIMEOUT);
        SqlitePoolOptions::new()
            .max_connections(REPLICA_POOL_SIZE)
            .connect_with(options)
            .await
            .unwrap_or_else(|error| panic!("connect a replica to {url}: {error}"))
    }
}

/// Eight replicas, each with its own pool, connect first and then all call
/// `outbox::migrate` at the same moment.
async fn replicas_migrate_a_fresh_database_at_once<DB: ReplicaPool>(db: &TestDatabase<DB>) {
    let start = Arc::new(Barrier::new(REPLICAS));
    let mut replicas = Vec::with_capacity(REPLICAS);
    for replica in 0..REPLICAS {
        let url = db.url().to_owned();
        let start = Arc::clone(&start);
        replicas.push(tokio::spawn(async move {
            let pool = DB::connect_replica(url).await;
            start.wait().await;
            let migrated = outbox::migrate(&pool).await;
            pool.close().await;
            (replica, migrated)
        }));
    }
    let mut failures = Vec::new();
    for replica in replicas {
        let (replica, migrated) = replica.await.expect("the replica's task");
        if let Err(error) = migrated {
            failures.push(format!("replica {replica}: {error}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {REPLICAS} concurrent migrations failed on {}:\n{}",
        failures.len(),
        DB::LABEL,
        failures.join("\n")
    );

    let shipped = i64::try_from(DB::migrator().iter().count()).expect("a few migrations");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM _outbox_migrations").await,
        shipped,
        "each migration is recorded once"
    );
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT version) FROM _outbox_migrations WHERE success")
            .await,
        shipped,
        "every shipped migration is recorded as applied"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_partitions").await,
        DB::PARTITIONS,
        "the partitions were seeded once"
    );

    // The tables work: an enqueue commits, and the inbox takes a row.
    let mut tx = db.pool().begin().await.expect("begin");
    outbox::enqueue(
        &mut tx,
        &OrderCreated {
            order_id: uuid::Uuid::now_v7(),
        },
    )
    .await
    .expect("enqueue after the concurrent migrations");
    tx.commit().await.expect("commit");
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 1);
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(
        &mut connection,
        "INSERT INTO inbox_messages (consumer, event_id) VALUES ('billing', 'e-1')",
    )
    .await
    .expect("record an inbox message");
    drop(connection);
    assert_eq!(db.count("SELECT COUNT(*) FROM inbox_messages").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_replicas_migrate_a_fresh_postgres_database_at_once() {
    let db = outbox_testkit::postgres().await;
    replicas_migrate_a_fresh_database_at_once(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_replicas_migrate_a_fresh_mariadb_database_at_once() {
    let db = outbox_testkit::mysql().await;
    replicas_migrate_a_fresh_database_at_once(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_replicas_migrate_a_fresh_sqlite_file_at_once() {
    let db = outbox_testkit::sqlite().await;
    replicas_migrate_a_fresh_database_at_once(&db).await;
}
