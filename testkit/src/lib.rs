//! Test support for the outbox workspace.
//!
//! Every test that needs a database calls [`postgres`], [`mysql`] or
//! [`sqlite`] and gets a database of its own: a fresh database on the real
//! PostgreSQL or MariaDB server, or a temporary SQLite file. It is dropped
//! when the [`TestDatabase`] is. A server that cannot be reached fails the
//! test with a message naming it; nothing is skipped.
//!
//! Servers are found through `OUTBOX_TEST_POSTGRES_URL` and
//! `OUTBOX_TEST_MYSQL_URL`, defaulting to the loopback services that
//! `scripts/test.sh` starts.
//!
//! [`TcpProxy`] stands between the code under test and a server, so a test
//! can cut that code off its database (and let it back) while the shared
//! server keeps running for every other test.

mod database;
mod proxy;
mod query;

pub use database::{TestDatabase, mysql, postgres, sqlite, sqlite_unopened};
pub use proxy::TcpProxy;
pub use query::TestBackend;
