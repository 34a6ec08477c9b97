//! The lock that keeps concurrent `outbox::migrate` calls apart, on every
//! backend: while another session holds it, a migrator waits as long as its
//! connection's lock wait setting allows and then fails with an error
//! naming the lock, having migrated nothing; once it is free, migrating
//! works; and a migration refused for a changed migration leaves it free.

use std::str::FromStr;
use std::time::Duration;

use outbox::{Error, POSTGRES_MIGRATION_LOCK_KEY};
use outbox_testkit::{TestBackend, TestDatabase};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Connection, Executor, MySqlConnection, PgConnection, SqliteConnection};

/// A short lock wait for the migrator under test, so the held lock makes it
/// give up soon; no test measures how long it waited.
const SHORT_LOCK_WAIT: Duration = Duration::from_millis(200);

/// The checksum of applied migration 1, overwritten.
const CORRUPT_POSTGRES_CHECKSUM: &str =
    "UPDATE _outbox_migrations SET checksum = '\\x00'::bytea WHERE version = 1";
/// The same on MariaDB and SQLite.
const CORRUPT_CHECKSUM: &str = "UPDATE _outbox_migrations SET checksum = X'00' WHERE version = 1";

/// The MariaDB lock name of the database `database`.
fn mysql_lock_name(database: &str) -> String {
    format!("{database}.{}", outbox::MIGRATIONS_TABLE)
}

/// `outbox::migrate` failed because the lock was held, and said which lock
/// and which setting bounded the wait.
fn assert_lock_error(result: Result<(), Error>, lock: &str, setting: &str) {
    let error = result.expect_err("the lock is held elsewhere");
    assert!(
        matches!(&error, Error::MigrationLock { lock: named, .. } if named.contains(lock)),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(lock) && message.contains(setting),
        "the message names the lock ({lock}) and the setting ({setting}): {message}"
    );
}

/// Whether `_outbox_migrations` holds any row; false when it does not exist.
async fn anything_migrated<DB: TestBackend>(db: &TestDatabase<DB>) -> bool {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_i64(&mut connection, "SELECT COUNT(*) FROM _outbox_migrations")
        .await
        .is_ok_and(|rows| rows > 0)
}

#[tokio::test]
async fn a_held_postgres_lock_fails_the_migration_naming_it() {
    let db = outbox_testkit::postgres().await;
    let mut holder = PgConnection::connect(db.url()).await.expect("connect");
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(POSTGRES_MIGRATION_LOCK_KEY)
        .execute(&mut holder)
        .await
        .expect("hold the migration lock");

    let lock_timeout = format!("{}ms", SHORT_LOCK_WAIT.as_millis());
    let options = PgConnectOptions::from_str(db.url())
        .expect("a PostgreSQL URL")
        .options([("lock_timeout", lock_timeout.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("connect the migrator");
    assert_lock_error(
        outbox::migrate(&pool).await,
        &POSTGRES_MIGRATION_LOCK_KEY.to_string(),
        "lock_timeout",
    );
    assert!(!anything_migrated(&db).await, "nothing was migrated");

    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(POSTGRES_MIGRATION_LOCK_KEY)
        .execute(&mut holder)
        .await
        .expect("release the migration lock");
    outbox::migrate(&pool)
        .await
        .expect("migrate once the lock is free");
    assert!(anything_migrated(&db).await);
}

#[tokio::test]
async fn a_held_mariadb_lock_fails_the_migration_naming_it() {
    let db = outbox_testkit::mysql().await;
    let mut holder = MySqlConnection::connect(db.url()).await.expect("connect");
    let database: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut holder)
        .await
        .expect("the database name");
    let name = mysql_lock_name(&database);
    let taken: i64 = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut holder)
        .await
        .expect("hold the migration lock");
    assert_eq!(taken, 1, "the lock {name} was free");

    let options = MySqlConnectOptions::from_str(db.url()).expect("a MariaDB URL");
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .after_connect(|connection, _meta| {
            Box::pin(async move {
                connection
                    .execute("SET SESSION lock_wait_timeout = 1")
                    .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .expect("connect the migrator");
    assert_lock_error(
        outbox::migrate(&pool).await,
        &format!("GET_LOCK('{name}')"),
        "lock_wait_timeout (1 s)",
    );
    assert!(!anything_migrated(&db).await, "nothing was migrated");

    sqlx::query("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .execute(&mut holder)
        .await
        .expect("release the migration lock");
    outbox::migrate(&pool)
        .await
        .expect("migrate once the lock is free");
    assert!(anything_migrated(&db).await);
}

#[tokio::test]
async fn a_held_sqlite_write_lock_fails_the_migration_naming_it() {
    let db = outbox_testkit::sqlite().await;
    let options = SqliteConnectOptions::from_str(db.url()).expect("a SQLite URL");
    let mut holder = SqliteConnection::connect_with(&options)
        .await
        .expect("connect");
    let writing = holder
        .begin_with("BEGIN IMMEDIATE")
        .await
        .expect("hold the write lock");

    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.busy_timeout(SHORT_LOCK_WAIT))
        .await
        .expect("connect the migrator");
    assert_lock_error(
        outbox::migrate(&pool).await,
        "SQLite write lock",
        "busy timeout",
    );
    assert!(!anything_migrated(&db).await, "nothing was migrated");

    writing.rollback().await.expect("release the write lock");
    outbox::migrate(&pool)
        .await
        .expect("migrate once the lock is free");
    assert!(anything_migrated(&db).await);
}

/// Migrate, change applied migration 1, and migrate again: refused.
async fn refuse_a_changed_migration<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
    corrupt_checksum: &str,
) {
    outbox::migrate(db.pool()).await.expect("first migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, corrupt_checksum)
        .await
        .expect("corrupt the checksum");
    drop(connection);
    let refused = outbox::migrate(db.pool()).await;
    assert!(
        matches!(refused, Err(Error::MigrationModified { version: 1 })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_refused_postgres_migration_leaves_the_lock_free() {
    let db = outbox_testkit::postgres().await;
    refuse_a_changed_migration(&db, CORRUPT_POSTGRES_CHECKSUM).await;
    let mut probe = PgConnection::connect(db.url()).await.expect("connect");
    let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(POSTGRES_MIGRATION_LOCK_KEY)
        .fetch_one(&mut probe)
        .await
        .expect("try the migration lock");
    assert!(taken, "no session kept the migration lock");
}

#[tokio::test]
async fn a_refused_mariadb_migration_leaves_the_lock_free() {
    let db = outbox_testkit::mysql().await;
    refuse_a_changed_migration(&db, CORRUPT_CHECKSUM).await;
    let mut probe = MySqlConnection::connect(db.url()).await.expect("connect");
    let database: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut probe)
        .await
        .expect("the database name");
    let free: i64 = sqlx::query_scalar("SELECT IS_FREE_LOCK(?)")
        .bind(mysql_lock_name(&database))
        .fetch_one(&mut probe)
        .await
        .expect("probe the migration lock");
    assert_eq!(free, 1, "no session kept the migration lock");
}

#[tokio::test]
async fn a_refused_sqlite_migration_leaves_the_write_lock_free() {
    let db = outbox_testkit::sqlite().await;
    refuse_a_changed_migration(&db, CORRUPT_CHECKSUM).await;
    let options = SqliteConnectOptions::from_str(db.url())
        .expect("a SQLite URL")
        .busy_timeout(Duration::ZERO);
    let mut probe = SqliteConnection::connect_with(&options)
        .await
        .expect("connect");
    let writing = probe
        .begin_with("BEGIN IMMEDIATE")
        .await
        .expect("no transaction kept the write lock");
    writing.rollback().await.expect("rollback");
}
