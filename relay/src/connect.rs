//! Open the store named by a database URL.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::Error;
use crate::database_url::DatabaseUrl;
use crate::store::{MySqlStore, OutboxStore, PostgresStore, SqliteStore};
use crate::wakeup::Wakeup;

/// Connections per relay: the batch loop, the marker, lease renewal,
/// retention and the LISTEN connection.
const POOL_SIZE: u32 = 6;
/// How long to wait for a connection before giving up.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long SQLite waits for another process's write lock.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// An open database: the store, and what raises wake-ups for it.
pub struct OpenStore {
    /// The relay's statements on this database.
    pub store: Arc<dyn OutboxStore>,
    /// The PostgreSQL pool, for `LISTEN`; `None` on other backends.
    pub postgres_pool: Option<sqlx::PgPool>,
}

/// Connect to `url`. SQLite files are created when missing and opened in
/// WAL mode with a busy timeout, as several processes sharing one need.
///
/// # Errors
/// [`Error::InvalidDatabaseUrl`] for options sqlx rejects; [`Error::Database`]
/// when the database cannot be reached.
pub async fn open_store(url: &DatabaseUrl) -> Result<OpenStore, Error> {
    let invalid = |error: sqlx::Error| Error::InvalidDatabaseUrl {
        url: url.to_string(),
        reason: error.to_string(),
    };
    match url {
        DatabaseUrl::Postgres(text) => {
            let options = PgConnectOptions::from_str(text).map_err(invalid)?;
            let pool = PgPoolOptions::new()
                .max_connections(POOL_SIZE)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await?;
            Ok(OpenStore {
                store: Arc::new(PostgresStore::new(pool.clone())),
                postgres_pool: Some(pool),
            })
        }
        DatabaseUrl::MySql(text) => {
            let options = MySqlConnectOptions::from_str(text).map_err(invalid)?;
            let pool = MySqlPoolOptions::new()
                .max_connections(POOL_SIZE)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await?;
            Ok(OpenStore {
                store: Arc::new(MySqlStore::new(pool)),
                postgres_pool: None,
            })
        }
        DatabaseUrl::Sqlite(text) => {
            let options = SqliteConnectOptions::from_str(text)
                .map_err(invalid)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT);
            let pool = SqlitePoolOptions::new()
                .max_connections(POOL_SIZE)
                .acquire_timeout(ACQUIRE_TIMEOUT)
                .connect_with(options)
                .await?;
            Ok(OpenStore {
                store: Arc::new(SqliteStore::new(pool)),
                postgres_pool: None,
            })
        }
    }
}

impl OpenStore {
    /// The wake-up of the relay on this database: `NOTIFY` on PostgreSQL
    /// (listened to until `stop`), polling elsewhere.
    pub fn wakeup(&self, stop: &tokio_util::sync::CancellationToken) -> Wakeup {
        let wakeup = Wakeup::new();
        if let Some(pool) = &self.postgres_pool {
            tokio::spawn(wakeup.clone().listen_postgres(pool.clone(), stop.clone()));
        }
        wakeup
    }
}
