//! [`TestDatabase`]: a throwaway database on a real server.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
use sqlx::{
    AssertSqlSafe, Connection, Database, Executor, IntoArguments, MySqlConnection, PgConnection,
    Pool,
};

/// Default PostgreSQL server for tests; `OUTBOX_TEST_POSTGRES_URL` overrides it.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Default MariaDB / MySQL server for tests; `OUTBOX_TEST_MYSQL_URL` overrides it.
pub const DEFAULT_MYSQL_URL: &str = "mysql://root@127.0.0.1:3306/test";

/// Connections per test pool: enough for tests that run 16 tasks at once.
const POOL_SIZE: u32 = 20;

/// A database created for one test, dropped (or deleted) on drop.
pub struct TestDatabase<DB: Database> {
    pool: Pool<DB>,
    url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    DropServerDatabase {
        admin_url: String,
        name: String,
        kind: ServerKind,
    },
    DeleteFiles(PathBuf),
}

#[derive(Clone, Copy)]
enum ServerKind {
    Postgres,
    MySql,
}

impl ServerKind {
    /// The server's name in messages.
    fn server(self) -> &'static str {
        match self {
            ServerKind::Postgres => "PostgreSQL",
            ServerKind::MySql => "MariaDB/MySQL",
        }
    }

    /// The environment variable that names the server.
    fn variable(self) -> &'static str {
        match self {
            ServerKind::Postgres => "OUTBOX_TEST_POSTGRES_URL",
            ServerKind::MySql => "OUTBOX_TEST_MYSQL_URL",
        }
    }

    /// The server when the variable is not set.
    fn default_url(self) -> &'static str {
        match self {
            ServerKind::Postgres => DEFAULT_POSTGRES_URL,
            ServerKind::MySql => DEFAULT_MYSQL_URL,
        }
    }

    /// The statement that creates test database `name`.
    fn create_database(self, name: &str) -> String {
        match self {
            ServerKind::Postgres => format!("CREATE DATABASE \"{name}\""),
            ServerKind::MySql => {
                format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            }
        }
    }
}

impl<DB: Database> TestDatabase<DB> {
    /// A pool connected to the test database.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The URL of the test database, for child processes such as the relay.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl<DB: crate::TestBackend> TestDatabase<DB> {
    /// The integer `sql` selects (e.g. a `COUNT(*)`).
    ///
    /// # Panics
    /// When the query fails; the message names the backend and the query.
    pub async fn count(&self, sql: &str) -> i64 {
        let mut connection = self.pool.acquire().await.expect("acquire");
        DB::fetch_i64(&mut connection, sql)
            .await
            .unwrap_or_else(|error| panic!("{}: {sql}: {error}", DB::LABEL))
    }
}

impl<DB: Database> Drop for TestDatabase<DB> {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::DeleteFiles(path) => {
                for suffix in ["", "-wal", "-shm", "-journal"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    // A file that was never created is not an error here.
                    let _ = std::fs::remove_file(file);
                }
            }
            Cleanup::DropServerDatabase {
                admin_url,
                name,
                kind,
            } => {
                // Drop runs inside the test's runtime; a thread with its own
                // runtime can block on the DROP without stalling it.
                let (admin_url, name, kind) = (admin_url.clone(), name.clone(), *kind);
                let dropper =
                    std::thread::spawn(move || drop_server_database(&admin_url, &name, kind));
                if let Err(panic) = dropper.join() {
                    eprintln!("could not drop a test database: {panic:?}");
                }
            }
        }
    }
}

fn drop_server_database(admin_url: &str, name: &str, kind: ServerKind) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("could not drop test database {name}: {error}");
            return;
        }
    };
    let outcome: Result<(), sqlx::Error> = runtime.block_on(async {
        match kind {
            ServerKind::Postgres => {
                // A database with a replication slot cannot be dropped.
                crate::slots::drop_slots(admin_url, None, Some(name)).await?;
                let mut admin = PgConnection::connect(admin_url).await?;
                let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
                sqlx::query(AssertSqlSafe(sql)).execute(&mut admin).await?;
            }
            ServerKind::MySql => {
                let mut admin = MySqlConnection::connect(admin_url).await?;
                let sql = format!("DROP DATABASE IF EXISTS `{name}`");
                sqlx::query(AssertSqlSafe(sql)).execute(&mut admin).await?;
            }
        }
        Ok(())
    });
    if let Err(error) = outcome {
        eprintln!("could not drop test database {name}: {error}");
    }
}

/// A fresh database on the PostgreSQL server at `OUTBOX_TEST_POSTGRES_URL`.
///
/// # Panics
/// When the server cannot be reached or the database cannot be created; the
/// message names the server and the variable to set.
pub async fn postgres() -> TestDatabase<sqlx::Postgres> {
    server_database(ServerKind::Postgres).await
}

/// A fresh database on the MariaDB / MySQL server at `OUTBOX_TEST_MYSQL_URL`.
///
/// # Panics
/// When the server cannot be reached or the database cannot be created; the
/// message names the server and the variable to set.
pub async fn mysql() -> TestDatabase<sqlx::MySql> {
    server_database(ServerKind::MySql).await
}

/// A fresh database on the `kind` server named by its variable (or at its
/// default URL), dropped with the [`TestDatabase`].
async fn server_database<DB: Database>(kind: ServerKind) -> TestDatabase<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    let variable = kind.variable();
    let admin_url = server_url(variable, kind.default_url());
    let name = fresh_name();
    let mut admin = DB::Connection::connect(&admin_url)
        .await
        .unwrap_or_else(|error| unreachable_server(kind.server(), variable, &admin_url, &error));
    sqlx::query(AssertSqlSafe(kind.create_database(&name)))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|error| {
            panic!("cannot create test database {name} on {admin_url}: {error}")
        });
    let url = with_database(&admin_url, &name);
    let options = <DB::Connection as Connection>::Options::from_str(&url)
        .unwrap_or_else(|error| panic!("bad {variable} {admin_url}: {error}"));
    let pool = pool_options()
        .connect_with(options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect to test database {url}: {error}"));
    TestDatabase {
        pool,
        url,
        cleanup: Cleanup::DropServerDatabase {
            admin_url,
            name,
            kind,
        },
    }
}

/// A fresh SQLite file in the system's temporary directory, in WAL mode with
/// a busy timeout, as several processes sharing it need.
///
/// # Panics
/// When the file cannot be created.
pub async fn sqlite() -> TestDatabase<sqlx::Sqlite> {
    let path = std::env::temp_dir().join(format!("{}.db", fresh_name()));
    let pool = pool_options()
        .connect_with(sqlite_options(&path))
        .await
        .unwrap_or_else(|error| {
            panic!(
                "cannot create SQLite test database {}: {error}",
                path.display()
            )
        });
    TestDatabase {
        pool,
        url: format!("sqlite://{}", path.display()),
        cleanup: Cleanup::DeleteFiles(path),
    }
}

/// A SQLite test database whose file does not exist yet: the test's own
/// pool connects lazily, so the first process or pool that opens the URL
/// creates the file. For tests of what happens on a brand-new file, such
/// as several processes creating and migrating it at once. Call it inside
/// the test's runtime.
pub fn sqlite_unopened() -> TestDatabase<sqlx::Sqlite> {
    let path = std::env::temp_dir().join(format!("{}.db", fresh_name()));
    let pool = pool_options().connect_lazy_with(sqlite_options(&path));
    TestDatabase {
        pool,
        url: format!("sqlite://{}", path.display()),
        cleanup: Cleanup::DeleteFiles(path),
    }
}

/// The options of every test pool: [`POOL_SIZE`] connections, each waited
/// for up to 30 s.
fn pool_options<DB: Database>() -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(POOL_SIZE)
        .acquire_timeout(Duration::from_secs(30))
}

/// The test pools' SQLite options: created when missing, WAL, busy timeout.
fn sqlite_options(path: &std::path::Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30))
}

fn server_url(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

fn fresh_name() -> String {
    format!("outbox_test_{}", uuid::Uuid::now_v7().simple())
}

fn unreachable_server(server: &str, variable: &str, url: &str, error: &sqlx::Error) -> ! {
    panic!(
        "{server} is not reachable at {url}: {error}. These tests need a real {server} server: \
         start it (`scripts/test.sh --services-only` starts every service) or point {variable} at one."
    )
}

/// Replace the database name in a server URL, keeping any query string.
fn with_database(server_url: &str, database: &str) -> String {
    let (base, query) = match server_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (server_url, None),
    };
    let authority_start = base.find("://").map_or(0, |index| index + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_replaces_the_path_and_keeps_the_query() {
        assert_eq!(
            with_database("postgres://u@h:5432/test", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("mysql://root@h:3306", "x"),
            "mysql://root@h:3306/x"
        );
        assert_eq!(
            with_database("postgres://u@h/test?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}
