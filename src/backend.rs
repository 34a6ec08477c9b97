//! [`Backend`]: the databases the outbox runs on, and what differs between them.
//!
//! Each backend keeps its SQL in `backend/sql/<backend>/` and its migrations
//! in `migrations/<backend>/`, with the same version numbers everywhere.

use std::future::Future;

use sqlx::Pool;
use sqlx::migrate::Migrator;

use crate::Error;

/// Name of the table in which `outbox` records its applied migrations. It is
/// not sqlx's default, so the application's own sqlx migrations can share
/// the database.
pub const MIGRATIONS_TABLE: &str = "_outbox_migrations";

mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
}

/// A database the outbox supports: [`sqlx::Postgres`], [`sqlx::MySql`]
/// (MySQL and MariaDB) or [`sqlx::Sqlite`].
///
/// The trait is sealed; its methods are the backend-specific statements
/// behind [`enqueue`](crate::enqueue) and [`migrate`](crate::migrate).
///
/// Each database is behind the feature of its name (`postgres`, `mysql`,
/// `sqlite`); a pool of a database whose feature is off does not compile,
/// and the compiler's message names the feature.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an outbox database in this build",
    note = "turn on the `outbox` crate's feature for this database: `postgres`, `mysql` or `sqlite`"
)]
pub trait Backend: sqlx::Database + sealed::Sealed {
    /// The embedded migrations of this backend, recording themselves in
    /// [`MIGRATIONS_TABLE`].
    fn migrator() -> Migrator;

    /// Insert every event of `events_json`, a JSON array of contract-column
    /// objects, in one statement and in array order. Returns the number of
    /// rows written.
    #[doc(hidden)]
    fn insert_events(
        connection: &mut Self::Connection,
        events_json: String,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + '_;

    /// Apply the migrations that the database lacks, holding the lock that
    /// keeps concurrent migrators apart.
    #[doc(hidden)]
    fn run_migrations(pool: &Pool<Self>) -> impl Future<Output = Result<(), Error>> + Send + '_;
}

/// Set the outbox's migrations table on a migrator built by `sqlx::migrate!`.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn with_outbox_table(mut migrator: Migrator) -> Migrator {
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// Implement [`Backend`] for one database; the statements differ by backend
/// only in the SQL files they load, and migrations in the lock they hold.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
macro_rules! impl_backend {
    ($database:ty, $connection:ty, $dir:literal, $migrations:literal, $migrate_locked:path) => {
        impl Backend for $database {
            fn migrator() -> Migrator {
                with_outbox_table(sqlx::migrate!($migrations))
            }

            fn insert_events(
                connection: &mut $connection,
                events_json: String,
            ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + '_ {
                async move {
                    let insert_events =
                        include_str!(concat!("backend/sql/", $dir, "/insert_events.sql"));
                    let result = sqlx::query(insert_events)
                        .bind(events_json)
                        .execute(connection)
                        .await?;
                    Ok(result.rows_affected())
                }
            }

            fn run_migrations(
                pool: &Pool<Self>,
            ) -> impl Future<Output = Result<(), Error>> + Send + '_ {
                $migrate_locked(pool, Self::migrator())
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl_backend!(
    sqlx::Postgres,
    sqlx::PgConnection,
    "postgres",
    "migrations/postgres",
    crate::migration_lock::migrate_postgres
);
#[cfg(feature = "mysql")]
impl_backend!(
    sqlx::MySql,
    sqlx::MySqlConnection,
    "mysql",
    "migrations/mysql",
    crate::migration_lock::migrate_mysql
);
#[cfg(feature = "sqlite")]
impl_backend!(
    sqlx::Sqlite,
    sqlx::SqliteConnection,
    "sqlite",
    "migrations/sqlite",
    crate::migration_lock::migrate_sqlite
);
