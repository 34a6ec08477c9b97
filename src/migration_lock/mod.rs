//! The lock that keeps concurrent migrators apart, one kind per backend.
//!
//! Several replicas of a service may call [`migrate`](crate::migrate) on
//! boot at the same moment. Each run takes a database lock on the
//! connection it migrates with, reads the applied migrations only once it
//! holds the lock, applies the missing ones and releases it, so the runs
//! follow one another and the later ones find nothing left to do:
//!
//! - PostgreSQL: the session-level advisory lock [`POSTGRES_MIGRATION_LOCK_KEY`],
//!   waiting as long as the session's `lock_timeout` allows;
//! - MariaDB / MySQL: the named lock `<database>._outbox_migrations`
//!   (`GET_LOCK`), waiting at most the session's `lock_wait_timeout`;
//! - SQLite: the database's write lock, taken up front by `BEGIN IMMEDIATE`
//!   and held by one transaction around every migration, waiting as long as
//!   the connection's busy timeout allows.
//!
//! Each backend's lock is in a file of its own, built with the backend's
//! feature.
//!
//! These locks stand in for sqlx's own migration lock, which on MariaDB is
//! never taken (`GET_LOCK(name, -1)` returns `NULL` there instead of
//! waiting) and on SQLite does nothing.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod session;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "mysql")]
pub(crate) use mysql::migrate_mysql;
#[cfg(feature = "postgres")]
pub(crate) use postgres::migrate_postgres;
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::migrate_sqlite;

/// Key of the PostgreSQL advisory lock that serializes outbox migrations:
/// `outbox` in ASCII. Advisory locks are per database, so one key serves
/// every database of a server.
pub const POSTGRES_MIGRATION_LOCK_KEY: i64 = 0x6f75_7462_6f78;
