//! Retention under the logical source. Streamed events are published
//! without a write, so they stay `pending` in the table; they are deleted
//! once they are older than `retention.published` *and* the slot has
//! confirmed them, judged by checkpoints: each pass records the WAL insert
//! position and the oldest running transaction; a checkpoint older than the
//! retention whose position the slot has confirmed proves that every
//! transaction older than its snapshot has had all its events settled.
//! Events of the failure path end `published` and go with the polling
//! relay's retention; dead ones are kept.

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::retention::every_interval;
use crate::error::Error;
use super::retention::run_retention_pass;
use crate::operator::RetentionSettings;
use crate::source::SlotName;
use crate::store::OperatorStore;

sql_files!(take_checkpoint, delete_streamed, forget_checkpoints);

/// Most statements in one pass, as for the polling relay's retention.
const MAX_BATCHES_PER_PASS: usize = 100;

/// One pass: delete old published rows of the failure path, old confirmed
/// streamed rows, then take a checkpoint when the last one is older than
/// `interval`. Returns the rows deleted.
///
/// # Errors
/// [`Error::Database`] when a statement fails.
pub async fn run_logical_retention_pass(
    pool: &PgPool,
    store: &dyn OperatorStore,
    slot: &SlotName,
    settings: &RetentionSettings,
) -> Result<u64, Error> {
    let mut deleted = run_retention_pass(store, settings).await?;
    let keep_seconds = settings.keep_published.as_secs_f64();
    for _ in 0..MAX_BATCHES_PER_PASS {
        let batch = sqlx::query(sql::delete_streamed)
            .bind(keep_seconds)
            .bind(slot.as_str())
            .bind(settings.batch_size)
            .execute(pool)
            .await?
            .rows_affected();
        deleted += batch;
        if batch < settings.batch_size.max(0) as u64 {
            break;
        }
    }
    sqlx::query(sql::forget_checkpoints)
        .bind(keep_seconds)
        .bind(slot.as_str())
        .execute(pool)
        .await?;
    sqlx::query(sql::take_checkpoint)
        .bind(settings.interval.as_secs_f64())
        .execute(pool)
        .await?;
    Ok(deleted)
}

/// Run passes every `interval` until `stop`.
pub async fn run_logical_retention(
    pool: PgPool,
    store: Arc<dyn OperatorStore>,
    slot: SlotName,
    settings: RetentionSettings,
    stop: CancellationToken,
) {
    every_interval(settings.interval, &stop, || {
        run_logical_retention_pass(&pool, store.as_ref(), &slot, &settings)
    })
    .await;
}
