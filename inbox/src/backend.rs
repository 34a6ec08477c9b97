//! [`InboxBackend`]: the inbox statements of each database. The SQL is in
//! `sql/<backend>/`.

use std::future::Future;
use std::time::Duration;

use sqlx::{MySql, MySqlConnection, PgConnection, Pool, Postgres, Sqlite, SqliteConnection};

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::Postgres {}
    impl Sealed for sqlx::MySql {}
    impl Sealed for sqlx::Sqlite {}
}

/// A database the inbox runs on: PostgreSQL, MySQL / MariaDB or SQLite.
pub trait InboxBackend: outbox::Backend + sealed::Sealed {
    /// Insert `(consumer, event_id)` unless present; `true` when inserted.
    #[doc(hidden)]
    fn record_message<'c>(
        connection: &'c mut Self::Connection,
        consumer: &'c str,
        event_id: &'c str,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send + 'c;

    /// Delete at most `limit` rows of `consumer` older than `window`.
    #[doc(hidden)]
    fn prune_older_than<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        window: Duration,
        limit: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'p;

    /// Delete at most `limit` rows of `consumer` beyond its newest `keep`.
    #[doc(hidden)]
    fn prune_beyond_count<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        keep: i64,
        limit: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send + 'p;
}

impl InboxBackend for Postgres {
    async fn record_message<'c>(
        connection: &'c mut PgConnection,
        consumer: &'c str,
        event_id: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/postgres/record_message.sql"))
            .bind(consumer)
            .bind(event_id)
            .execute(connection)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn prune_older_than<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        window: Duration,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/postgres/prune_older_than.sql"))
            .bind(consumer)
            .bind(window.as_secs_f64())
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn prune_beyond_count<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        keep: i64,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/postgres/prune_beyond_count.sql"))
            .bind(consumer)
            .bind(keep)
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }
}

impl InboxBackend for MySql {
    async fn record_message<'c>(
        connection: &'c mut MySqlConnection,
        consumer: &'c str,
        event_id: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/mysql/record_message.sql"))
            .bind(consumer)
            .bind(event_id)
            .execute(connection)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn prune_older_than<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        window: Duration,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let micros = i64::try_from(window.as_micros()).unwrap_or(i64::MAX);
        let result = sqlx::query(include_str!("sql/mysql/prune_older_than.sql"))
            .bind(consumer)
            .bind(micros)
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn prune_beyond_count<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        keep: i64,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/mysql/prune_beyond_count.sql"))
            .bind(consumer)
            .bind(keep)
            .bind(limit)
            .bind(consumer)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }
}

impl InboxBackend for Sqlite {
    async fn record_message<'c>(
        connection: &'c mut SqliteConnection,
        consumer: &'c str,
        event_id: &'c str,
    ) -> Result<bool, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/sqlite/record_message.sql"))
            .bind(consumer)
            .bind(event_id)
            .execute(connection)
            .await?;
        Ok(result.rows_affected() == 1)
    }

    async fn prune_older_than<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        window: Duration,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/sqlite/prune_older_than.sql"))
            .bind(consumer)
            .bind(window.as_secs_f64())
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }

    async fn prune_beyond_count<'p>(
        pool: &'p Pool<Self>,
        consumer: &'p str,
        keep: i64,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        let result = sqlx::query(include_str!("sql/sqlite/prune_beyond_count.sql"))
            .bind(consumer)
            .bind(keep)
            .bind(limit)
            .execute(pool)
            .await?;
        Ok(result.rows_affected())
    }
}
