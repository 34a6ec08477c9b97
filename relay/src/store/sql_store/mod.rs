//! [`SqlStore`]: the relay's polling store, written once for every SQL
//! backend. A [`Dialect`] (`store/postgres.rs`, `store/mysql.rs`,
//! `store/sqlite.rs`) gives its statements, loaded from
//! `store/sql/<backend>/`, and the few things the backends do differently:
//! how lists of integers, times and durations bind (by default: JSON,
//! and seconds), the settings of a
//! fetch and of a mark, and how commits are watched. Lease statements
//! differ in shape too, where a database lacks `UPDATE ... RETURNING`
//! ([`LeaseStatements`]).
//!
//! The store traits are implemented in `leases.rs`, `events.rs` and
//! `operator.rs`; `statements.rs` names what each placeholder takes (for
//! numbered placeholders once for all, in `numbered.rs`),
//! `binds.rs` binds a call's values in that order, `database.rs` runs them.

mod binds;
mod database;
#[cfg(feature = "test-util")]
mod explain;
pub(crate) mod fetch_values;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod numbered;
mod operator;
mod statements;

use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool, Transaction};

pub use binds::{Bound, Values};
pub use database::{On, RowsAffected, SqlDatabase};
#[cfg(feature = "test-util")]
pub use explain::ExplainFetch;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use numbered::NumberedSql;
pub use statements::{LeaseStatements, Param, Statement, Statements};

use super::rows::{integers_json, seconds};
use super::{ACQUIRE_TIMEOUT, Connections, POOL_SIZE};
use crate::error::Error;
use crate::event::Wakeup;
use crate::tasks::Tasks;

/// The options a connection of `D` is opened with.
pub type ConnectOptions<DB> = <<DB as Database>::Connection as Connection>::Options;

/// What sets one SQL backend apart; everything else the store does the same
/// way on all of them.
pub trait Dialect: Send + Sync + 'static {
    /// The sqlx database.
    type Database: SqlDatabase;

    /// Every statement, with what its placeholders take.
    const STATEMENTS: &'static Statements;

    /// Statements run before a fetch, in its transaction; by default none,
    /// and the fetch runs on its own.
    const FETCH_SETTINGS: &'static [&'static str] = &[];

    /// Statements run before a mark, in its transaction; by default none,
    /// and the mark runs on its own.
    const MARK_SETTINGS: &'static [&'static str] = &[];

    /// Whether the fetch is planned for its values on each call rather than
    /// prepared once and cached; by default it is. A generic plan of a
    /// cached statement compares every row with each id the fetch leaves
    /// out (thousands while marks are in flight); a plan for the actual
    /// list hashes it.
    const PLAN_EACH_FETCH: bool = true;

    /// The connection options of `url`.
    ///
    /// # Errors
    /// The error of sqlx for options it rejects.
    fn connect_options(url: &str) -> Result<ConnectOptions<Self::Database>, sqlx::Error>;

    /// A list of partition numbers; by default a JSON array, as text.
    fn partition_list(partitions: &[i32]) -> Bound<Self::Database> {
        Self::Database::text(integers_json(partitions))
    }

    /// A list of event ids; by default a JSON array, as text.
    fn id_list(ids: &[i64]) -> Bound<Self::Database> {
        Self::Database::text(integers_json(ids))
    }

    /// A point in time.
    fn time(time: DateTime<Utc>) -> Bound<Self::Database>;

    /// A span of time; by default seconds, as a float.
    fn duration(duration: Duration) -> Bound<Self::Database> {
        Self::Database::float(seconds(duration))
    }

    /// The time until a failed event's retry, `None` when the event is
    /// dead; by default seconds, as a float, or NULL.
    fn retry_delay(retry_in: Option<Duration>) -> Bound<Self::Database> {
        Self::Database::optional_float(retry_in.map(seconds))
    }

    /// Raise `wakeup` whenever events are committed, until `tasks` is
    /// cancelled, where the database can tell; the watch runs on `tasks`.
    /// By default it cannot: the batch loop polls.
    fn watch_commits(pool: &Pool<Self::Database>, wakeup: Wakeup, tasks: &Tasks) {
        let _ = (pool, wakeup, tasks);
    }

    /// Tell producers' triggers that relay `relay_id` polls on its own for
    /// `window`, so they need not notify it; returns whether the database
    /// has such notifications at all (by default it has none).
    fn quiet_notifications<'a>(
        pool: &'a Pool<Self::Database>,
        relay_id: &'a str,
        window: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = (pool, relay_id, window);
        Box::pin(std::future::ready(Ok(false)))
    }
}

/// The relay's store on the SQL backend of dialect `D`.
#[derive(Debug)]
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Database>,
    dialect: PhantomData<fn() -> D>,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore::new(self.pool.clone())
    }
}

impl<D: Dialect> SqlStore<D> {
    /// A store over `pool`.
    pub fn new(pool: Pool<D::Database>) -> Self {
        SqlStore {
            pool,
            dialect: PhantomData,
        }
    }

    /// Connect to `url`, with the connection options of the backend (a
    /// SQLite file is created when missing and opened in WAL mode with a
    /// busy timeout, as several processes sharing one need), opening
    /// connections on demand.
    ///
    /// # Errors
    /// [`Error::InvalidDatabaseUrl`] for options sqlx rejects;
    /// [`Error::Database`] when the database cannot be reached.
    #[cfg(feature = "test-util")]
    pub async fn connect(url: &str) -> Result<Self, Error> {
        Self::connect_with(url, Connections::OnDemand).await
    }

    /// Connect to `url` as [`SqlStore::connect`] does, with the pool's
    /// `connections` opened as they say.
    ///
    /// # Errors
    /// As [`SqlStore::connect`].
    pub async fn connect_with(url: &str, connections: Connections) -> Result<Self, Error> {
        let options = D::connect_options(url).map_err(|error| super::invalid_url(url, error))?;
        let mut pool = PoolOptions::<D::Database>::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT);
        if connections == Connections::KeptOpen {
            pool = pool
                .min_connections(POOL_SIZE)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        // sqlx (from 0.9.1) sets TCP_NODELAY on its sockets before the TLS
        // handshake: `tests/database_sockets.rs` checks that it still does.
        let pool = pool.connect_with(options).await?;
        Ok(SqlStore::new(pool))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D::Database> {
        &self.pool
    }

    /// Statements run on any connection of the pool.
    pub(crate) fn on_pool(&self) -> On<'_, D::Database> {
        On::Pool(&self.pool)
    }

    /// A transaction with `settings` applied, or none when there are no
    /// settings to apply.
    pub(crate) async fn settings_transaction(
        &self,
        settings: &[&'static str],
    ) -> Result<Option<Transaction<'static, D::Database>>, Error> {
        if settings.is_empty() {
            return Ok(None);
        }
        let mut transaction = outbox::begin_transaction(&self.pool).await?;
        for &setting in settings {
            execute::<D::Database>(
                On::Transaction(&mut transaction),
                &Statement::new(setting, &[]),
                &Values::new(),
            )
            .await?;
        }
        Ok(Some(transaction))
    }
}

/// Where to run a statement: in `transaction` if there is one, else on
/// `pool`.
pub(crate) fn on_either<'a, DB: Database>(
    pool: &'a Pool<DB>,
    transaction: &'a mut Option<Transaction<'static, DB>>,
) -> On<'a, DB> {
    match transaction {
        Some(transaction) => On::Transaction(transaction),
        None => On::Pool(pool),
    }
}

/// Commit `transaction` if there is one.
pub(crate) async fn commit<DB: Database>(
    transaction: Option<Transaction<'static, DB>>,
) -> Result<(), Error> {
    if let Some(transaction) = transaction {
        transaction.commit().await?;
    }
    Ok(())
}

/// Every row of `statement` with `values`.
pub(crate) async fn fetch_all<DB: SqlDatabase>(
    on: On<'_, DB>,
    statement: &Statement,
    values: &Values<DB>,
) -> Result<Vec<DB::Row>, Error> {
    let arguments = values.arguments(statement)?;
    Ok(DB::fetch_all(on, statement.sql, arguments, true).await?)
}

/// The one row of `statement` with `values` (the first, of a statement
/// that returns more).
pub(crate) async fn fetch_one<DB: SqlDatabase>(
    on: On<'_, DB>,
    statement: &Statement,
    values: &Values<DB>,
) -> Result<DB::Row, Error> {
    let rows = fetch_all(on, statement, values).await?;
    Ok(rows.into_iter().next().ok_or(sqlx::Error::RowNotFound)?)
}

/// Run `statement` with `values`; returns the rows it changed.
pub(crate) async fn execute<DB: SqlDatabase>(
    on: On<'_, DB>,
    statement: &Statement,
    values: &Values<DB>,
) -> Result<u64, Error> {
    let arguments = values.arguments(statement)?;
    Ok(DB::execute(on, statement.sql, arguments).await?)
}
