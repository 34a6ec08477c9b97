//! [`DatabaseUrl`]: the `--database-url` value, checked before anything
//! connects, and [`resolve_database_url`], which picks it from the flag, the
//! environment or the default.
//!
//! Every URL that reaches an error message or a log line goes through
//! [`mask_password`] first, so a password never leaves the process.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

pub use outbox::mask_password;

use crate::error::Error;
use crate::source::OutboxStore;
use crate::store::Connections;
#[cfg(feature = "mysql")]
use crate::store::MySqlStore;
#[cfg(feature = "postgres")]
use crate::store::PostgresStore;
#[cfg(feature = "sqlite")]
use crate::store::SqliteStore;

/// The database the relay runs on when neither `--database-url` nor the
/// environment names one.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://outbox.db";

/// The environment variables consulted for the database URL, in order.
const DATABASE_URL_VARIABLES: [&str; 2] = ["OUTBOX_DATABASE_URL", "DATABASE_URL"];

const ACCEPTED_DATABASE_URLS: &str =
    "expected postgres://, postgresql://, mysql://, mariadb://, sqlite://PATH or sqlite:PATH";

/// The database the outbox lives in: the application's own database, the
/// one its transactions write `outbox_events` to.
///
/// Each variant holds the URL to hand to sqlx, with a lowercase scheme;
/// `mariadb://` is rewritten to `mysql://`. [`Display`](fmt::Display) masks
/// the password; [`DatabaseUrl::as_str`] does not.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatabaseUrl {
    /// `postgres://` or `postgresql://`.
    Postgres(String),
    /// `mysql://`, or `mariadb://` rewritten to `mysql://`.
    MySql(String),
    /// `sqlite://PATH` or `sqlite:PATH`, never an in-memory database.
    Sqlite(String),
}

impl DatabaseUrl {
    /// Checks `input` and classifies it by scheme.
    ///
    /// Surrounding whitespace is ignored and the scheme is case-insensitive.
    /// An in-memory SQLite database is refused: the relay must read the
    /// database the application writes, and an in-memory one exists only
    /// inside the process that opened it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidDatabaseUrl`], with the password masked and a reason
    /// that names what is wrong and what is accepted;
    /// [`Error::FeatureNotBuilt`] for a database this build was compiled
    /// without.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let url = parse_database_url(input.trim()).map_err(|reason| Error::InvalidDatabaseUrl {
            url: mask_password(input.trim()),
            reason,
        })?;
        url.check_built()?;
        Ok(url)
    }

    /// [`Error::FeatureNotBuilt`] when this build has no driver for the
    /// database.
    pub(crate) fn check_built(&self) -> Result<(), Error> {
        let built = match self {
            DatabaseUrl::Postgres(_) => cfg!(feature = "postgres"),
            DatabaseUrl::MySql(_) => cfg!(feature = "mysql"),
            DatabaseUrl::Sqlite(_) => cfg!(feature = "sqlite"),
        };
        Error::require_feature(self.backend(), built, || format!("the database URL {self}"))
    }

    /// The URL to connect with, password included. Never log this; log the
    /// [`Display`](fmt::Display) form instead.
    pub fn as_str(&self) -> &str {
        match self {
            DatabaseUrl::Postgres(url) | DatabaseUrl::MySql(url) | DatabaseUrl::Sqlite(url) => url,
        }
    }

    /// The backend's name, for logs: `postgres`, `mysql` or `sqlite`.
    pub fn backend(&self) -> &'static str {
        match self {
            DatabaseUrl::Postgres(_) => "postgres",
            DatabaseUrl::MySql(_) => "mysql",
            DatabaseUrl::Sqlite(_) => "sqlite",
        }
    }
}

impl FromStr for DatabaseUrl {
    type Err = Error;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        DatabaseUrl::parse(input)
    }
}

/// The URL with its password masked.
impl fmt::Display for DatabaseUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&mask_password(self.as_str()))
    }
}

/// Masks the password, like [`Display`](fmt::Display), so that `{:?}` is
/// safe to log too.
impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let variant = match self {
            DatabaseUrl::Postgres(_) => "Postgres",
            DatabaseUrl::MySql(_) => "MySql",
            DatabaseUrl::Sqlite(_) => "Sqlite",
        };
        formatter
            .debug_tuple(variant)
            .field(&mask_password(self.as_str()))
            .finish()
    }
}

/// Picks the database URL: the `--database-url` flag if given, else the
/// first non-empty of the environment variables `OUTBOX_DATABASE_URL` and
/// `DATABASE_URL`, else [`DEFAULT_DATABASE_URL`].
///
/// `env` looks up one environment variable; pass
/// `|name| std::env::var(name).ok()` in the binary and a map in tests. An
/// empty or blank variable counts as unset; an empty flag is an error.
///
/// # Errors
///
/// [`Error::InvalidDatabaseUrl`] for the value that was picked; the reason
/// says where it came from.
pub fn resolve_database_url(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<DatabaseUrl, Error> {
    resolve_url(
        flag.map(|value| ("--database-url", value)),
        &DATABASE_URL_VARIABLES,
        DEFAULT_DATABASE_URL,
        env,
        DatabaseUrl::parse,
    )
}

/// Picks a URL and parses it with `parse`: the flag's value if given (the
/// flag named with it), else the first of the environment `variables` set
/// and not blank, else `default`. An error names the flag or variable the
/// value came from.
pub(crate) fn resolve_url<T>(
    flag: Option<(&str, &str)>,
    variables: &[&str],
    default: &str,
    env: impl Fn(&str) -> Option<String>,
    parse: fn(&str) -> Result<T, Error>,
) -> Result<T, Error> {
    if let Some((flag_name, flag_value)) = flag {
        return parse(flag_value).map_err(|error| error.with_source(flag_name));
    }
    for variable in variables {
        if let Some(value) = env(variable).filter(|value| !value.trim().is_empty()) {
            return parse(&value)
                .map_err(|error| error.with_source(&format!("environment variable {variable}")));
        }
    }
    parse(default)
}

fn parse_database_url(input: &str) -> Result<DatabaseUrl, String> {
    if input.is_empty() {
        return Err(format!("the URL is empty; {ACCEPTED_DATABASE_URLS}"));
    }
    let Some(colon) = input.find(':') else {
        return Err(format!(
            "no scheme; {ACCEPTED_DATABASE_URLS} (for a SQLite file, write sqlite://{input})"
        ));
    };
    let scheme = input[..colon].to_ascii_lowercase();
    let after_scheme = &input[colon + 1..];
    match scheme.as_str() {
        "postgres" | "postgresql" => {
            let rest = server_url_rest(&scheme, after_scheme)?;
            check_server_authority(rest)?;
            Ok(DatabaseUrl::Postgres(format!("{scheme}://{rest}")))
        }
        "mysql" | "mariadb" => {
            let rest = server_url_rest(&scheme, after_scheme)?;
            check_server_authority(rest)?;
            Ok(DatabaseUrl::MySql(format!("mysql://{rest}")))
        }
        "sqlite" => parse_sqlite(after_scheme),
        "jdbc" => Err(format!(
            "JDBC URLs are not supported; drop the `jdbc:` prefix ({ACCEPTED_DATABASE_URLS})"
        )),
        "file" => Err(format!(
            "`file:` URLs are not supported; for a SQLite file write sqlite://PATH ({ACCEPTED_DATABASE_URLS})"
        )),
        _ => Err(format!(
            "unsupported scheme `{}`; {ACCEPTED_DATABASE_URLS}",
            &input[..colon]
        )),
    }
}

/// What follows `scheme://`, or an error when the `//` is missing.
fn server_url_rest<'a>(scheme: &str, after_scheme: &'a str) -> Result<&'a str, String> {
    after_scheme.strip_prefix("//").ok_or_else(|| {
        format!("expected `{scheme}://` followed by user:password@host:port/database")
    })
}

/// Checks the port of a `postgres://` or `mysql://` URL, when it has one.
/// Everything else (socket paths in the query, default hosts) is left to
/// the driver.
fn check_server_authority(rest: &str) -> Result<(), String> {
    let authority = UrlParts::split(rest).authority;
    let host_and_port = match authority.rfind('@') {
        Some(at) => &authority[at + 1..],
        None => authority,
    };
    let (_, port) = split_host_port(host_and_port)?;
    if let Some(port) = port {
        parse_port(port)?;
    }
    Ok(())
}

fn parse_sqlite(after_scheme: &str) -> Result<DatabaseUrl, String> {
    let location = after_scheme.strip_prefix("//").unwrap_or(after_scheme);
    let (path, query) = match location.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (location, None),
    };
    let in_memory_mode = query.is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair.eq_ignore_ascii_case("mode=memory"))
    });
    if path.starts_with(":memory:") || in_memory_mode {
        return Err(
            "an in-memory SQLite database cannot be relayed: the relay must open the \
                    database file the application writes; give its path, e.g. sqlite://outbox.db"
                .to_owned(),
        );
    }
    if path.is_empty() {
        return Err("no database file; write sqlite://PATH, e.g. sqlite://outbox.db".to_owned());
    }
    Ok(DatabaseUrl::Sqlite(format!("sqlite:{after_scheme}")))
}

/// Splits `host[:port]` or `[ipv6][:port]`; the port is returned unparsed.
pub(crate) fn split_host_port(host_and_port: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(bracketed) = host_and_port.strip_prefix('[') {
        let Some(close) = bracketed.find(']') else {
            return Err(format!("unclosed `[` in `{host_and_port}`"));
        };
        let host = &host_and_port[..close + 2];
        let after_host = &bracketed[close + 1..];
        return match after_host.strip_prefix(':') {
            Some(port) => Ok((host, Some(port))),
            None if after_host.is_empty() => Ok((host, None)),
            None => Err(format!(
                "unexpected `{after_host}` after the address `{host}`"
            )),
        };
    }
    match host_and_port.rsplit_once(':') {
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((host_and_port, None)),
    }
}

/// Parses a TCP port, 1 to 65535.
pub(crate) fn parse_port(port: &str) -> Result<u16, String> {
    match port.parse::<u16>() {
        Ok(0) => Err("port 0 is not a valid port; use 1 to 65535".to_owned()),
        Ok(number) if port.bytes().all(|byte| byte.is_ascii_digit()) => Ok(number),
        _ if port.is_empty() => Err("empty port after `:`; use 1 to 65535".to_owned()),
        _ => Err(format!("port `{port}` is not a number from 1 to 65535")),
    }
}

/// A URL cut at its structural separators, without decoding anything.
pub(crate) struct UrlParts<'a> {
    /// `userinfo@host:port`: up to the first `/`, `?` or `#`.
    pub(crate) authority: &'a str,
    /// Everything after the authority, starting with `/`, `?` or `#`.
    pub(crate) after_authority: &'a str,
}

impl<'a> UrlParts<'a> {
    /// Splits what follows `scheme://`.
    pub(crate) fn split(rest: &'a str) -> Self {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        UrlParts {
            authority: &rest[..end],
            after_authority: &rest[end..],
        }
    }
}

/// Connect to the database `url` names, with the store of its backend and
/// its pool's `connections`.
///
/// # Errors
/// [`Error::InvalidDatabaseUrl`] for options sqlx rejects;
/// [`Error::Database`] when the database cannot be reached.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused_variables, unreachable_code)
)]
pub async fn open_store(
    url: &DatabaseUrl,
    connections: Connections,
) -> Result<Arc<dyn OutboxStore>, Error> {
    Ok(match url {
        #[cfg(feature = "postgres")]
        DatabaseUrl::Postgres(text) => {
            Arc::new(PostgresStore::connect_with(text, connections).await?)
        }
        #[cfg(feature = "mysql")]
        DatabaseUrl::MySql(text) => Arc::new(MySqlStore::connect_with(text, connections).await?),
        #[cfg(feature = "sqlite")]
        DatabaseUrl::Sqlite(text) => Arc::new(SqliteStore::connect_with(text, connections).await?),
        // A variant whose driver this build lacks.
        #[allow(unreachable_patterns)]
        _ => {
            return Err(Error::FeatureNotBuilt {
                feature: url.backend(),
                needed_for: format!("the database URL {url}"),
            });
        }
    })
}
