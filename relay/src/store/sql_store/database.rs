//! [`SqlDatabase`]: what the generic store needs of an sqlx database, with
//! the sqlx bounds that say so written once, on the blanket impl, instead
//! of on every function of the store.

use futures::future::BoxFuture;
use sqlx::database::HasStatementCache;
use sqlx::{Database, Encode, Executor, IntoArguments, Pool, Transaction, Type};

use super::binds::Bound;
use crate::store::rows::StoreRow;

/// The rows a statement changed, which each backend's result reports.
pub trait RowsAffected {
    /// How many rows the statement inserted, updated or deleted.
    fn rows_affected(&self) -> u64;
}

/// Where a statement runs: on a pooled connection, or on the connection of
/// a transaction.
pub enum On<'a, DB: Database> {
    /// Any connection of the pool.
    Pool(&'a Pool<DB>),
    /// The connection of a transaction.
    Transaction(&'a mut Transaction<'static, DB>),
}

/// An sqlx database the relay's store runs on: PostgreSQL, MySQL /
/// MariaDB, SQLite.
pub trait SqlDatabase: outbox::Backend<Row: StoreRow, QueryResult: RowsAffected> {
    /// A text value.
    fn text(value: impl Into<String>) -> Bound<Self>;
    /// A nullable text value.
    fn optional_text(value: Option<&str>) -> Bound<Self>;
    /// An `INTEGER` value.
    fn int(value: i32) -> Bound<Self>;
    /// A `BIGINT` value.
    fn bigint(value: i64) -> Bound<Self>;
    /// A boolean.
    fn flag(value: bool) -> Bound<Self>;
    /// A `DOUBLE PRECISION` value.
    fn float(value: f64) -> Bound<Self>;
    /// A nullable `DOUBLE PRECISION` value.
    fn optional_float(value: Option<f64>) -> Bound<Self>;

    /// Run `sql` with `arguments` and return every row. A statement not
    /// `persistent` is planned for its values each time rather than
    /// prepared once and cached.
    fn fetch_all<'a>(
        on: On<'a, Self>,
        sql: &'static str,
        arguments: Self::Arguments,
        persistent: bool,
    ) -> BoxFuture<'a, Result<Vec<Self::Row>, sqlx::Error>>;

    /// Run `sql` with `arguments` and return the rows it changed.
    fn execute<'a>(
        on: On<'a, Self>,
        sql: &'static str,
        arguments: Self::Arguments,
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>>;
}

impl<DB> SqlDatabase for DB
where
    DB: outbox::Backend<Row: StoreRow, QueryResult: RowsAffected> + HasStatementCache,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    String: for<'t> Encode<'t, DB> + Type<DB>,
    Option<String>: for<'t> Encode<'t, DB> + Type<DB>,
    i32: for<'t> Encode<'t, DB> + Type<DB>,
    i64: for<'t> Encode<'t, DB> + Type<DB>,
    bool: for<'t> Encode<'t, DB> + Type<DB>,
    f64: for<'t> Encode<'t, DB> + Type<DB>,
    Option<f64>: for<'t> Encode<'t, DB> + Type<DB>,
{
    fn text(value: impl Into<String>) -> Bound<Self> {
        Box::new(value.into())
    }

    fn optional_text(value: Option<&str>) -> Bound<Self> {
        Box::new(value.map(str::to_owned))
    }

    fn int(value: i32) -> Bound<Self> {
        Box::new(value)
    }

    fn bigint(value: i64) -> Bound<Self> {
        Box::new(value)
    }

    fn flag(value: bool) -> Bound<Self> {
        Box::new(value)
    }

    fn float(value: f64) -> Bound<Self> {
        Box::new(value)
    }

    fn optional_float(value: Option<f64>) -> Bound<Self> {
        Box::new(value)
    }

    fn fetch_all<'a>(
        on: On<'a, Self>,
        sql: &'static str,
        arguments: Self::Arguments,
        persistent: bool,
    ) -> BoxFuture<'a, Result<Vec<Self::Row>, sqlx::Error>> {
        let query = sqlx::query_with(sql, arguments).persistent(persistent);
        match on {
            On::Pool(pool) => Box::pin(query.fetch_all(pool)),
            On::Transaction(transaction) => Box::pin(query.fetch_all(&mut **transaction)),
        }
    }

    fn execute<'a>(
        on: On<'a, Self>,
        sql: &'static str,
        arguments: Self::Arguments,
    ) -> BoxFuture<'a, Result<u64, sqlx::Error>> {
        let query = sqlx::query_with(sql, arguments);
        Box::pin(async move {
            let result = match on {
                On::Pool(pool) => query.execute(pool).await?,
                On::Transaction(transaction) => query.execute(&mut **transaction).await?,
            };
            Ok(result.rows_affected())
        })
    }
}
