//! MariaDB's and MySQL's migration lock: a named lock (`GET_LOCK`).

use sqlx::migrate::Migrator;
use sqlx::{MySql, Pool};

use super::session::{finish, session_for_lock};
use crate::migrate::apply_missing;
use crate::{Error, MIGRATIONS_TABLE};

/// The session's database on MariaDB / MySQL.
const MYSQL_CURRENT_DATABASE: &str = include_str!("../backend/sql/mysql/current_database.sql");
/// Takes the MariaDB / MySQL lock; binds its name.
const MYSQL_LOCK: &str = include_str!("../backend/sql/mysql/migration_lock.sql");
/// Releases the MariaDB / MySQL lock; binds its name.
const MYSQL_UNLOCK: &str = include_str!("../backend/sql/mysql/migration_unlock.sql");
/// The longest lock name MySQL accepts, in characters.
const MYSQL_MAX_LOCK_NAME_CHARS: usize = 64;

/// Apply the missing migrations of `migrator` on MariaDB / MySQL, holding
/// the named lock.
pub(crate) async fn migrate_mysql(pool: &Pool<MySql>, migrator: Migrator) -> Result<(), Error> {
    let mut connection = session_for_lock(pool).await?;
    let database: Option<String> = sqlx::query_scalar(MYSQL_CURRENT_DATABASE)
        .fetch_one(&mut *connection)
        .await?;
    let name = mysql_lock_name(database.as_deref().unwrap_or_default());
    let lock = format!("GET_LOCK('{name}')");
    tracing::debug!(lock = %lock, "taking the outbox migration lock");
    let (taken, timeout_seconds): (Option<i64>, Option<i64>) = sqlx::query_as(MYSQL_LOCK)
        .bind(&name)
        .fetch_one(&mut *connection)
        .await?;
    match taken {
        Some(1) => {}
        Some(_) => {
            return Err(Error::MigrationLock {
                lock,
                reason: format!(
                    "another session held it for longer than this session's \
                     lock_wait_timeout ({} s)",
                    timeout_seconds.unwrap_or_default()
                ),
            });
        }
        None => {
            return Err(Error::MigrationLock {
                lock,
                reason: "the server answered NULL (an error while waiting)".to_owned(),
            });
        }
    }
    let migrated = apply_missing(&mut *connection, &migrator).await;
    let released = sqlx::query(MYSQL_UNLOCK)
        .bind(&name)
        .execute(&mut *connection)
        .await
        .map(drop);
    finish(connection, &lock, migrated, released).await
}

/// The name of the MariaDB / MySQL migration lock of `database`:
/// `<database>._outbox_migrations`. Named locks are server-wide, hence the
/// database in the name. MySQL refuses names above 64 characters, so a
/// long database name is cut and followed by a hash of the whole.
fn mysql_lock_name(database: &str) -> String {
    let suffix_chars = MIGRATIONS_TABLE.chars().count() + 1;
    let room = MYSQL_MAX_LOCK_NAME_CHARS - suffix_chars;
    if database.chars().count() <= room {
        return format!("{database}.{MIGRATIONS_TABLE}");
    }
    let hash = format!("{:016x}", fnv1a_64(database.as_bytes()));
    let kept: String = database.chars().take(room - hash.len() - 1).collect();
    format!("{kept}~{hash}.{MIGRATIONS_TABLE}")
}

/// 64-bit FNV-1a: a stable hash, the same in every process and release.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::{MYSQL_MAX_LOCK_NAME_CHARS, mysql_lock_name};

    #[test]
    fn the_mysql_lock_name_carries_the_database() {
        assert_eq!(mysql_lock_name("shop"), "shop._outbox_migrations");
    }

    #[test]
    fn a_long_database_name_still_gives_a_distinct_lock_name_mysql_accepts() {
        let long = "a".repeat(64);
        let other = format!("{}b", "a".repeat(63));
        let (long_name, other_name) = (mysql_lock_name(&long), mysql_lock_name(&other));
        assert!(
            long_name.chars().count() <= MYSQL_MAX_LOCK_NAME_CHARS,
            "{long_name}"
        );
        assert!(long_name.ends_with("._outbox_migrations"), "{long_name}");
        assert_ne!(long_name, other_name);
        assert_eq!(long_name, mysql_lock_name(&long), "stable");
    }
}
