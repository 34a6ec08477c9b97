//! [`InboxBackend`]: the inbox statements of each database. The SQL is in
//! `sql/<backend>/`.

use std::collections::HashSet;
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

    /// Insert `(consumer, event_id)` for each of `event_ids` unless present,
    /// in one statement; the ids inserted.
    #[doc(hidden)]
    fn record_messages<'c>(
        connection: &'c mut Self::Connection,
        consumer: &'c str,
        event_ids: &'c [&'c str],
    ) -> impl Future<Output = Result<HashSet<String>, sqlx::Error>> + Send + 'c;

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
/// backend only in the SQL files they load, and in how a batch's ids are
/// bound: `$ids` turns them into the statement's parameter (a PostgreSQL
/// array, or a JSON array for MariaDB's `JSON_TABLE` and SQLite's
/// `json_each`).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
macro_rules! impl_inbox_backend {
    ($database:ty, $connection:ty, $dir:literal, $ids:expr) => {
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

            async fn record_messages<'c>(
                connection: &'c mut $connection,
                consumer: &'c str,
                event_ids: &'c [&'c str],
            ) -> Result<HashSet<String>, sqlx::Error> {
                let inserted: Vec<String> =
                    sqlx::query_scalar(include_str!(concat!("sql/", $dir, "/record_messages.sql")))
                        .bind(consumer)
                        .bind(($ids)(event_ids))
                        .fetch_all(connection)
                        .await?;
                Ok(inserted.into_iter().collect())
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
impl_inbox_backend!(sqlx::Postgres, sqlx::PgConnection, "postgres", text_array);
#[cfg(feature = "mysql")]
impl_inbox_backend!(sqlx::MySql, sqlx::MySqlConnection, "mysql", json_array);
#[cfg(feature = "sqlite")]
impl_inbox_backend!(sqlx::Sqlite, sqlx::SqliteConnection, "sqlite", json_array);

/// `ids` as they are: a PostgreSQL `text[]`.
#[cfg(feature = "postgres")]
fn text_array<'a>(ids: &'a [&'a str]) -> &'a [&'a str] {
    ids
}

/// `ids` as a JSON array of strings, for `JSON_TABLE` and `json_each`.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
fn json_array(ids: &[&str]) -> String {
    serde_json::Value::from(ids.to_vec()).to_string()
}
