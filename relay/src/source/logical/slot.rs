//! The replication slot and the publication: start-up checks, creation when
//! missing, and where the slot stands. Plain SQL on an sqlx pool.

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, PgPool, Row};

use super::slot_backlog::{self, BacklogBound, SlotCreationLock};
use crate::error::Error;
use crate::source::SlotName;

sql_files!(
    wal_level,
    role_can_replicate,
    slot_plugin,
    create_slot,
    publication_exists,
    publication_state,
    slot_backlogs_table,
    forget_all_checkpoints,
    slot_status,
    relay_slots
);

/// The output plugin the stream decodes.
pub const OUTPUT_PLUGIN: &str = "pgoutput";

/// `CREATE PUBLICATION` for a checked name (see [`SlotName`]): inserts of
/// `outbox_events` only.
fn create_publication_statement(publication: &str) -> String {
    format!(
        "CREATE PUBLICATION \"{publication}\" FOR TABLE outbox_events WITH (publish = 'insert')"
    )
}

/// `ALTER PUBLICATION ... SET TABLE outbox_events` for a checked name:
/// the one table it publishes.
fn set_table_statement(publication: &str) -> String {
    format!("ALTER PUBLICATION \"{publication}\" SET TABLE outbox_events")
}

/// `ALTER PUBLICATION ... SET (publish = 'insert')` for a checked name.
fn publish_inserts_statement(publication: &str) -> String {
    format!("ALTER PUBLICATION \"{publication}\" SET (publish = 'insert')")
}

/// `DROP PUBLICATION` for a checked name (see [`SlotName`]); nothing when
/// it is gone already.
pub(crate) fn drop_publication_statement(publication: &str) -> String {
    format!("DROP PUBLICATION IF EXISTS \"{publication}\"")
}

impl SlotName {
    /// The row `statement` returns for this slot (its one parameter), if
    /// any.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub(crate) async fn row(
        &self,
        pool: &PgPool,
        statement: &'static str,
    ) -> Result<Option<sqlx::postgres::PgRow>, Error> {
        Ok(sqlx::query(statement)
            .bind(self.as_str())
            .fetch_optional(pool)
            .await?)
    }
}

/// Refuse a server or role that cannot stream, a slot of the same name
/// made for another plugin or database, a slot the server invalidated
/// (`wal_status = lost`), a slot dropped while its publication stayed, and
/// a publication dropped or altered under its slot. A slot missing while
/// its backlog is being created (a process was killed while it created the
/// slot) is not refused: [`ensure_slot_and_publication`] finishes the
/// creation. Reads only.
///
/// # Errors
/// [`Error::Logical`], one line naming the setting, attribute or slot and
/// the recovery.
pub async fn check_prerequisites(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    check_stream_prerequisites(pool, slot).await?;
    match slot_status(pool, slot).await? {
        Some(status) if status.is_lost() => Err(lost_slot_error(&status)),
        Some(_) => check_publication(pool, slot).await,
        None => {
            let publications: i64 = sqlx::query_scalar(sql::publication_exists)
                .bind(slot.publication())
                .fetch_one(pool)
                .await?;
            if publications > 0 && !slot_being_created(pool, slot).await? {
                return Err(dropped_slot_error(slot));
            }
            Ok(())
        }
    }
}

/// Whether `slot`'s backlog is begun and not bound: its creation is under
/// way, or was interrupted. False before the backlog table exists.
pub(crate) async fn slot_being_created(pool: &PgPool, slot: &SlotName) -> Result<bool, Error> {
    let table: Option<String> = sqlx::query_scalar(sql::slot_backlogs_table)
        .fetch_one(pool)
        .await?;
    if table.is_none() {
        return Ok(false);
    }
    Ok(slot_backlog::state(pool, slot)
        .await?
        .is_some_and(|state| state.being_created()))
}

/// What the slot's publication publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PublicationState {
    /// There is no publication of the slot's name.
    Missing,
    /// It publishes inserts of `outbox_events`.
    Streams,
    /// It exists but no longer lists `outbox_events`, lists other tables
    /// (`outbox_events` renamed, or a table added), or no longer publishes
    /// inserts: it was altered.
    Altered,
}

/// What `slot`'s publication publishes now.
pub(crate) async fn publication_state(
    pool: &PgPool,
    slot: &SlotName,
) -> Result<PublicationState, Error> {
    let Some(row) = sqlx::query(sql::publication_state)
        .bind(slot.publication())
        .fetch_optional(pool)
        .await?
    else {
        return Ok(PublicationState::Missing);
    };
    let inserts: bool = row.try_get("publishes_inserts")?;
    let table: bool = row.try_get("lists_table")?;
    let other_tables: bool = row.try_get("lists_other_tables")?;
    Ok(if inserts && table && !other_tables {
        PublicationState::Streams
    } else {
        PublicationState::Altered
    })
}

/// Refuse a publication dropped or altered under an existing slot: the
/// slot skips (or, dropped, cannot decode) what commits meanwhile.
///
/// # Errors
/// [`Error::Logical`], one line naming the recovery.
pub(crate) async fn check_publication(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    match publication_state(pool, slot).await? {
        PublicationState::Streams => Ok(()),
        PublicationState::Missing => Err(Error::Logical(format!(
            "publication `{}` of replication slot `{slot}` is missing: it was dropped, and the slot \
            cannot decode the events committed since; run `outbox-relay recover-slot --slot \
            {slot} --since <a time before it was dropped>` to re-create both and publish those \
            events from the table",
            slot.publication()
        ))),
        PublicationState::Altered => Err(Error::Logical(format!(
            "publication `{}` no longer publishes the inserts into outbox_events, and only \
            those (it was altered, or the table renamed), so the slot skips the events committed \
            since; run `outbox-relay recover-slot --slot {slot} --since <a time before the \
            change>` to repair it and publish those events from the table",
            slot.publication()
        ))),
    }
}

/// The one-line error for a slot missing while its publication exists: it
/// was dropped after both were created (the publication is created first),
/// and the events committed since are in no slot. A new slot would start at
/// the end of the WAL and skip them for good.
pub(crate) fn dropped_slot_error(slot: &SlotName) -> Error {
    Error::Logical(format!(
        "replication slot `{slot}` is missing while its publication `{}` exists: the slot was \
         dropped, and the events committed since are in no slot; run `outbox-relay recover-slot \
         --slot {slot} --since <a time before it was dropped>` to recreate it and publish those \
         events from the table",
        slot.publication()
    ))
}

/// [`check_prerequisites`] without the check of an invalidated slot: what
/// `recover-slot` needs before it re-creates one. Reads only.
///
/// # Errors
/// [`Error::Logical`], one line naming the setting, attribute or slot.
pub async fn check_stream_prerequisites(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    let wal_level: String = sqlx::query_scalar(sql::wal_level).fetch_one(pool).await?;
    check_wal_level(&wal_level)?;
    let can_replicate: Option<bool> = sqlx::query_scalar(sql::role_can_replicate)
        .fetch_optional(pool)
        .await?;
    if can_replicate != Some(true) {
        let role: String = sqlx::query_scalar("SELECT current_user::text")
            .fetch_one(pool)
            .await?;
        return Err(Error::Logical(format!(
            "--source logical needs a role with the REPLICATION attribute; role `{role}` has none \
             (ALTER ROLE \"{role}\" REPLICATION)"
        )));
    }
    if let Some(row) = slot.row(pool, sql::slot_plugin).await? {
        let plugin: Option<String> = row.try_get("plugin")?;
        let database: Option<String> = row.try_get("database")?;
        let current: String = row.try_get("current_database")?;
        if plugin.as_deref() != Some(OUTPUT_PLUGIN) {
            return Err(Error::Logical(format!(
                "replication slot `{slot}` exists with output plugin `{}`, not `{OUTPUT_PLUGIN}`; \
                 drop it or choose another --slot",
                plugin.unwrap_or_else(|| "none (a physical slot)".to_owned())
            )));
        }
        if database.as_deref() != Some(current.as_str()) {
            return Err(Error::Logical(format!(
                "replication slot `{slot}` belongs to database `{}`, not `{current}`; choose another --slot",
                database.unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The one-line error of an operator command that reads what the slot
/// confirmed (`leave-logical`, `replay --source logical`) when there is no
/// such slot; `remedy` says what to do instead.
pub fn missing_slot_error(slot: &SlotName, remedy: &str) -> Error {
    Error::Logical(format!(
        "there is no replication slot `{slot}` in this database, so which streamed events were \
         published is unknown: {remedy}"
    ))
}

/// The one-line error for a slot the server invalidated: what may be
/// missing and how to recover. The relay never re-creates such a slot by
/// itself: that would skip, silently, what was committed since its
/// confirmed position. `outbox-relay recover-slot` does, and hands what
/// was committed since the operator's time back to the relays.
pub(crate) fn lost_slot_error(status: &SlotStatus) -> Error {
    let slot = &status.slot;
    let confirmed = status.confirmed_flush_lsn.as_deref().unwrap_or("unknown");
    Error::Logical(format!(
        "replication slot `{slot}` was invalidated by PostgreSQL (wal_status = lost: it retained \
         more WAL than max_slot_wal_keep_size); events committed after its confirmed position \
         {confirmed} may never have been published, and the relay does not re-create the slot \
         by itself. Recover: with every relay on the slot stopped, run `outbox-relay \
         recover-slot --slot {slot} --since <time>` with a time before the slot fell behind (it \
         re-creates the slot and has the relays publish again every event created since then), \
         then start the relays (docs/operations.md, \"Reading the WAL\")"
    ))
}

/// Refuse a `wal_level` other than `logical`.
///
/// # Errors
/// [`Error::Logical`] naming the setting and its value.
pub fn check_wal_level(wal_level: &str) -> Result<(), Error> {
    if wal_level == "logical" {
        return Ok(());
    }
    Err(Error::Logical(format!(
        "--source logical needs wal_level = logical; this server has wal_level = {wal_level} \
         (set it and restart PostgreSQL)"
    )))
}

/// What [`ensure_slot_and_publication`] does with a slot that is missing
/// while its publication exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DroppedSlot {
    /// Refuse (`run`, `migrate`): the publication is created before the
    /// slot, so the slot was dropped after both existed, and the events
    /// committed since are in no slot. A new slot would start at the end of
    /// the WAL and skip them for good.
    Refuse,
    /// Create it, repair the publication, and make the events created at
    /// or after `since` the slot's backlog (`recover-slot`).
    Recreate {
        /// The start of the window handed to the table path.
        since: DateTime<Utc>,
    },
}

/// Create the publication and the slot when they are missing, the
/// publication first (pgoutput looks it up as of each change it decodes),
/// and fix the backlog of a slot it creates (see `slot_backlog.rs`): the
/// events committed before the slot existed, which the stream's holder
/// hands to the table path before it streams. Under
/// [`DroppedSlot::Recreate`], the publication is repaired and the backlog
/// (from `since`) is fixed whether or not the slot is created. Safe to run
/// from several processes at once: they take turns under a lock.
///
/// Returns the bound of the backlog it fixed, if it fixed one.
///
/// # Errors
/// [`Error::Logical`] for a slot missing while its publication exists,
/// under [`DroppedSlot::Refuse`]; [`Error::Database`] when a statement
/// fails.
pub async fn ensure_slot_and_publication(
    pool: &PgPool,
    slot: &SlotName,
    dropped: DroppedSlot,
) -> Result<Option<BacklogBound>, Error> {
    let lock = SlotCreationLock::acquire(pool, slot).await?;
    let ensured = ensure_under_lock(pool, slot, dropped).await;
    lock.release().await;
    ensured
}

async fn ensure_under_lock(
    pool: &PgPool,
    slot: &SlotName,
    dropped: DroppedSlot,
) -> Result<Option<BacklogBound>, Error> {
    let publication = publication_state(pool, slot).await?;
    let slot_exists = slot.row(pool, sql::slot_plugin).await?.is_some();
    let being_created = slot_being_created(pool, slot).await?;
    let since = match dropped {
        DroppedSlot::Refuse => {
            if slot_exists {
                // Bound already, or left unbound by a process killed once
                // the slot existed: bind it now.
                return if being_created {
                    slot_backlog::bind(pool, slot).await
                } else {
                    Ok(None)
                };
            }
            if publication != PublicationState::Missing && !being_created {
                return Err(dropped_slot_error(slot));
            }
            None
        }
        DroppedSlot::Recreate { since } => Some(since),
    };
    slot_backlog::begin(pool, slot, since).await?;
    match publication {
        PublicationState::Missing => {
            sqlx::query(AssertSqlSafe(create_publication_statement(
                slot.publication(),
            )))
            .execute(pool)
            .await?;
            tracing::info!(publication = slot.publication(), "publication created");
        }
        PublicationState::Altered => repair_publication(pool, slot).await?,
        PublicationState::Streams => {}
    }
    if !slot_exists {
        // Retention's checkpoints describe a slot that is gone: against
        // the new one each would count as confirmed.
        sqlx::query(sql::forget_all_checkpoints)
            .execute(pool)
            .await?;
        let lsn: String = sqlx::query_scalar(sql::create_slot)
            .bind(slot.as_str())
            .fetch_one(pool)
            .await?;
        tracing::info!(slot = %slot, lsn, "replication slot created");
    }
    slot_backlog::bind(pool, slot).await
}

/// Make an altered publication publish the inserts into `outbox_events`
/// again, and nothing else.
async fn repair_publication(pool: &PgPool, slot: &SlotName) -> Result<(), Error> {
    let publication = slot.publication();
    sqlx::query(AssertSqlSafe(set_table_statement(publication)))
        .execute(pool)
        .await?;
    sqlx::query(AssertSqlSafe(publish_inserts_statement(publication)))
        .execute(pool)
        .await?;
    tracing::info!(
        publication,
        "publication repaired: it publishes the inserts into outbox_events again"
    );
    Ok(())
}

/// Where the slot stands, for `status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotStatus {
    /// The slot's name.
    pub slot: String,
    /// The position acknowledged to the server (`confirmed_flush_lsn`).
    pub confirmed_flush_lsn: Option<String>,
    /// The same position as a byte offset (0 when unknown).
    pub confirmed_position: u64,
    /// WAL written after the confirmed position, in bytes.
    pub lag_bytes: i64,
    /// WAL the slot keeps on disk, in bytes.
    pub retained_wal_bytes: i64,
    /// Whether a relay streams from the slot now.
    pub active: bool,
    /// `reserved`, `extended`, `unreserved` or `lost` (the slot is
    /// invalidated and must be recreated).
    pub wal_status: String,
}

impl SlotStatus {
    /// Whether the server invalidated the slot (`wal_status = lost`): it
    /// cannot stream any more.
    pub fn is_lost(&self) -> bool {
        self.wal_status == "lost"
    }
}

/// The slot's position and lag; `None` when the slot does not exist.
///
/// # Errors
/// [`Error::Database`] when the statement fails.
pub async fn slot_status(pool: &PgPool, slot: &SlotName) -> Result<Option<SlotStatus>, Error> {
    slot.row(pool, sql::slot_status)
        .await?
        .map(|row| slot_status_from_row(&row))
        .transpose()
}

/// Every slot of this database that streams a publication of the same name
/// (the relay's slots), by name.
///
/// # Errors
/// [`Error::Database`] when the statement fails.
pub async fn relay_slots(pool: &PgPool) -> Result<Vec<SlotStatus>, Error> {
    let rows = sqlx::query(sql::relay_slots).fetch_all(pool).await?;
    rows.iter().map(slot_status_from_row).collect()
}

fn slot_status_from_row(row: &sqlx::postgres::PgRow) -> Result<SlotStatus, Error> {
    let confirmed_flush_lsn: Option<String> = row.try_get("confirmed_flush_lsn")?;
    let confirmed_position = row
        .try_get::<Option<String>, _>("confirmed_position")?
        .and_then(|text| text.parse::<u64>().ok())
        .unwrap_or(0);
    Ok(SlotStatus {
        slot: row.try_get("slot_name")?,
        confirmed_flush_lsn,
        confirmed_position,
        lag_bytes: row.try_get("lag_bytes")?,
        retained_wal_bytes: row.try_get("retained_bytes")?,
        active: row.try_get("active")?,
        wal_status: row.try_get("wal_status")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wal_level_other_than_logical_is_refused_by_name_and_value() {
        let message = check_wal_level("replica").expect_err("refused").to_string();
        assert!(message.contains("wal_level = replica"), "{message}");
        assert!(check_wal_level("logical").is_ok());
    }

    #[test]
    fn a_lost_slot_is_refused_on_one_line_naming_the_recovery() {
        let status = SlotStatus {
            slot: "outbox_relay".to_owned(),
            confirmed_flush_lsn: Some("0/16B3748".to_owned()),
            confirmed_position: 0x16B_3748,
            lag_bytes: 0,
            retained_wal_bytes: 0,
            active: false,
            wal_status: "lost".to_owned(),
        };
        assert!(status.is_lost());
        let message = lost_slot_error(&status).to_string();
        assert!(!message.contains('\n'), "{message}");
        assert!(
            !message.contains("UPDATE") && !message.contains("pg_drop_replication_slot"),
            "the recovery takes no hand-written SQL: {message}"
        );
        for part in [
            "`outbox_relay` was invalidated",
            "0/16B3748",
            "outbox-relay recover-slot --slot outbox_relay --since <time>",
            "then start the relays",
        ] {
            assert!(message.contains(part), "{part} missing from: {message}");
        }
        let reserved = SlotStatus {
            wal_status: "unreserved".to_owned(),
            ..status
        };
        assert!(!reserved.is_lost());
    }

    #[test]
    fn slot_names_follow_postgresql_rules() {
        assert!(SlotName::parse("outbox_relay_2").is_ok());
        for bad in ["", "Outbox", "a-b", "a;drop", &"a".repeat(64)] {
            assert!(SlotName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
