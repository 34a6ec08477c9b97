//! [`RelayDatabase`]: the database a relay or an admin works on, a URL or a
//! pool of the service's own, and opening its store.

use std::sync::Arc;

use crate::config::{DatabaseUrl, open_store};
use crate::error::Error;
use crate::source::OutboxStore;
use crate::store::Connections;

/// The database a [`RelayService`](crate::RelayService) relays from, or a
/// [`RelayAdmin`](crate::admin::RelayAdmin) works on: a URL, or a pool of the
/// service's own (polling only: the WAL source opens a replication
/// connection of its own, from a URL).
#[derive(Clone)]
#[non_exhaustive]
pub enum RelayDatabase {
    /// A checked URL; the relay opens its own pool.
    Url(DatabaseUrl),
    /// A PostgreSQL pool.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// A MySQL / MariaDB pool.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    /// A SQLite pool.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

impl std::fmt::Debug for RelayDatabase {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayDatabase::Url(url) => formatter.debug_tuple("Url").field(url).finish(),
            #[cfg(feature = "postgres")]
            RelayDatabase::Postgres(_) => formatter.write_str("Postgres(pool)"),
            #[cfg(feature = "mysql")]
            RelayDatabase::MySql(_) => formatter.write_str("MySql(pool)"),
            #[cfg(feature = "sqlite")]
            RelayDatabase::Sqlite(_) => formatter.write_str("Sqlite(pool)"),
        }
    }
}

impl From<DatabaseUrl> for RelayDatabase {
    fn from(url: DatabaseUrl) -> Self {
        RelayDatabase::Url(url)
    }
}

#[cfg(feature = "postgres")]
impl From<sqlx::PgPool> for RelayDatabase {
    fn from(pool: sqlx::PgPool) -> Self {
        RelayDatabase::Postgres(pool)
    }
}

#[cfg(feature = "mysql")]
impl From<sqlx::MySqlPool> for RelayDatabase {
    fn from(pool: sqlx::MySqlPool) -> Self {
        RelayDatabase::MySql(pool)
    }
}

#[cfg(feature = "sqlite")]
impl From<sqlx::SqlitePool> for RelayDatabase {
    fn from(pool: sqlx::SqlitePool) -> Self {
        RelayDatabase::Sqlite(pool)
    }
}

impl RelayDatabase {
    /// The URL, its password masked, or what stands for a pool in logs.
    pub(crate) fn label(&self) -> String {
        match self {
            RelayDatabase::Url(url) => url.to_string(),
            #[allow(unreachable_patterns)]
            _ => "a pool of the service's".to_owned(),
        }
    }

    /// `postgres`, `mysql` or `sqlite`.
    pub(crate) fn backend(&self) -> &'static str {
        match self {
            RelayDatabase::Url(url) => url.backend(),
            #[cfg(feature = "postgres")]
            RelayDatabase::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            RelayDatabase::MySql(_) => "mysql",
            #[cfg(feature = "sqlite")]
            RelayDatabase::Sqlite(_) => "sqlite",
        }
    }

    /// The PostgreSQL store of this database, on the pool given or one
    /// opened as `connections` say; `None` on another database.
    #[cfg(feature = "logical")]
    pub(crate) async fn open_postgres(
        &self,
        connections: Connections,
    ) -> Result<Option<Arc<crate::store::PostgresStore>>, Error> {
        Ok(match self {
            RelayDatabase::Url(DatabaseUrl::Postgres(url)) => Some(Arc::new(
                crate::store::PostgresStore::connect_with(url, connections).await?,
            )),
            RelayDatabase::Postgres(pool) => {
                Some(Arc::new(crate::store::PostgresStore::new(pool.clone())))
            }
            _ => None,
        })
    }

    /// The store of the polling source, its pool opened as `connections`
    /// say (for a URL), migrated when `migrate`.
    pub(crate) async fn open_polling_store(
        self,
        connections: Connections,
        migrate: bool,
    ) -> Result<Arc<dyn OutboxStore>, Error> {
        let store: Arc<dyn OutboxStore> = match self {
            RelayDatabase::Url(url) => open_store(&url, connections).await?,
            #[cfg(feature = "postgres")]
            RelayDatabase::Postgres(pool) => Arc::new(crate::store::PostgresStore::new(pool)),
            #[cfg(feature = "mysql")]
            RelayDatabase::MySql(pool) => Arc::new(crate::store::MySqlStore::new(pool)),
            #[cfg(feature = "sqlite")]
            RelayDatabase::Sqlite(pool) => Arc::new(crate::store::SqliteStore::new(pool)),
        };
        if migrate {
            store.migrate().await?;
        }
        Ok(store)
    }
}
