//! [`InboxBackend`]: the inbox statements of each database. The SQL is in
//! `sql/<backend>/`.

use std::future::Future;
use std::time::Duration;

use sqlx::Pool;

/// A database the inbox runs on: PostgreSQL, MySQL / MariaDB or SQLite.
///
/// Each database is behind the feature of its name (`postgres`, `mysql`,
/// `sqlite`).
///
/// Sealed through [`outbox::Backend`]: only the three databases implement
/// that sealed trait, and this crate implements `InboxBackend` for each.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an inbox database in this build",
    note = "turn on the `outbox-inbox` crate's feature for this database: `postgres`, `mysql` or `sqlite`"
)]
pub trait InboxBackend: outbox::Backend {
    /// Insert `(consumer, event_id)` unless present; `true` when inserted.
    #[doc(hidden)]
    fn record_message<'c>(
        connection: &'c mut Self::Connection,
        consumer: &'c str,
        event_id: &'c str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// Delete at most `limit` of the rows of `consumer` that `rule` names;
    /// the number deleted.
    #[doc(hidden)]
    fn prune<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        rule: PruneRule,
        limit: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'p;
}

/// Which inbox rows of a consumer [`InboxBackend::prune`] deletes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneRule {
    /// The rows older than this.
    OlderThan(Duration),
    /// The rows beyond the newest this many.
    BeyondCount(i64),
}

/// Implement [`InboxBackend`] for one database; the statements differ by
/// backend only in the SQL files they load.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
macro_rules! impl_inbox_backend {
    ($database:ty, $connection:ty, $dir:literal) => {
        impl InboxBackend for $database {
            async fn record_message<'c>(
                connection: &'c mut $connection,
                consumer: &'c str,
                event_id: &'c str,
            ) -> Result<bool, sqlx::Error> {
                let result =
                    sqlx::query(include_str!(concat!("sql/", $dir, "/record_message.sql")))
                        .bind(consumer)
                        .bind(event_id)
                        .execute(connection)
                        .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn prune<'p>(
                pool: &'p Pool<Self>,
                consumer: &'p str,
                rule: PruneRule,
                limit: i64,
            ) -> Result<u64, sqlx::Error> {
                let query = match rule {
                    PruneRule::OlderThan(window) => {
                        sqlx::query(include_str!(concat!("sql/", $dir, "/prune_older_than.sql")))
                            .bind(consumer)
                            .bind(window.as_secs_f64())
                    }
                    PruneRule::BeyondCount(keep) => sqlx::query(include_str!(concat!(
                        "sql/",
                        $dir,
                        "/prune_beyond_count.sql"
                    )))
                    .bind(consumer)
                    .bind(keep),
                };
                let result = query.bind(limit).execute(pool).await?;
                Ok(result.rows_affected())
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl_inbox_backend!(sqlx::Postgres, sqlx::PgConnection, "postgres");
#[cfg(feature = "mysql")]
impl_inbox_backend!(sqlx::MySql, sqlx::MySqlConnection, "mysql");
#[cfg(feature = "sqlite")]
impl_inbox_backend!(sqlx::Sqlite, sqlx::SqliteConnection, "sqlite");
