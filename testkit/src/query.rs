//! [`TestBackend`]: run literal SQL on any backend from generic test code.

use futures_core::future::BoxFuture;
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Executor, IntoArguments, MySql, Postgres, Row,
    Sqlite, Type,
};

/// Literal-SQL helpers that generic test scenarios use on every backend.
/// Statements carry their values inline, so one string serves all three.
pub trait TestBackend: Database {
    /// Backend name for messages.
    const LABEL: &'static str;

    /// Run a statement; returns the rows affected.
    fn execute<'c>(
        connection: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<u64, sqlx::Error>>;

    /// The first column of the first row, as an integer.
    fn fetch_i64<'c>(
        connection: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>>;

    /// The first column of every row, as text.
    fn fetch_strings<'c>(
        connection: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>>;
}

/// The first column of every row `sql` selects, as `T`.
async fn first_column<DB, T>(
    connection: &mut DB::Connection,
    sql: &str,
) -> Result<Vec<T>, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    usize: ColumnIndex<DB::Row>,
    T: for<'r> Decode<'r, DB> + Type<DB>,
{
    let rows = sqlx::query(AssertSqlSafe(sql))
        .fetch_all(connection)
        .await?;
    rows.iter().map(|row| row.try_get::<T, _>(0)).collect()
}

macro_rules! impl_test_backend {
    ($database:ty, $label:literal) => {
        impl TestBackend for $database {
            const LABEL: &'static str = $label;

            fn execute<'c>(
                connection: &'c mut Self::Connection,
                sql: &'c str,
            ) -> BoxFuture<'c, Result<u64, sqlx::Error>> {
                Box::pin(async move {
                    let result = sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(connection)
                        .await?;
                    Ok(result.rows_affected())
                })
            }

            fn fetch_i64<'c>(
                connection: &'c mut Self::Connection,
                sql: &'c str,
            ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
                Box::pin(async move {
                    let column = first_column::<Self, i64>(connection, sql).await?;
                    column.into_iter().next().ok_or(sqlx::Error::RowNotFound)
                })
            }

            fn fetch_strings<'c>(
                connection: &'c mut Self::Connection,
                sql: &'c str,
            ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>> {
                Box::pin(first_column::<Self, String>(connection, sql))
            }
        }
    };
}

impl_test_backend!(Postgres, "PostgreSQL");
impl_test_backend!(MySql, "MariaDB");
impl_test_backend!(Sqlite, "SQLite");
