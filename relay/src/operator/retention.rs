//! Retention: delete published events once they are old enough, in bounded
//! batches. Pending and dead events are never deleted.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::store::OperatorStore;

/// When published events are deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionSettings {
    /// Age after publication at which an event is deleted.
    pub keep_published: Duration,
    /// Pause between two passes.
    pub interval: Duration,
    /// Rows deleted per statement.
    pub batch_size: i64,
}

/// The `[retention]` defaults: a week after publication, a pass a minute,
/// 1,000 rows a statement.
impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            keep_published: Duration::from_secs(7 * 24 * 60 * 60),
            interval: Duration::from_secs(60),
            batch_size: 1000,
        }
    }
}

/// Most statements in one pass, so one pass never holds the database long.
const MAX_BATCHES_PER_PASS: usize = 100;

/// One retention pass: delete batches until fewer than a batch remain or
/// the pass limit is reached. Returns the rows deleted.
pub async fn run_retention_pass(
    store: &dyn OperatorStore,
    settings: &RetentionSettings,
) -> Result<u64, Error> {
    let mut deleted = 0;
    for _ in 0..MAX_BATCHES_PER_PASS {
        let batch = store
            .delete_published(settings.keep_published, settings.batch_size)
            .await?;
        deleted += batch;
        if batch < settings.batch_size.max(0) as u64 {
            break;
        }
    }
    Ok(deleted)
}

/// Run retention passes every `interval` until `stop`.
pub async fn run_retention(
    store: Arc<dyn OperatorStore>,
    settings: RetentionSettings,
    stop: CancellationToken,
) {
    every_interval(settings.interval, &stop, || {
        run_retention_pass(store.as_ref(), &settings)
    })
    .await;
}

/// Run `pass` now and then every `interval` until `stop`, logging what
/// each pass deleted or why it failed.
pub(super) async fn every_interval<F, Pass>(
    interval: Duration,
    stop: &CancellationToken,
    mut pass: F,
) where
    F: FnMut() -> Pass,
    Pass: Future<Output = Result<u64, Error>>,
{
    loop {
        match pass().await {
            Ok(0) => {}
            Ok(deleted) => tracing::info!(deleted, "retention deleted published events"),
            Err(error) => tracing::warn!(%error, "retention pass failed"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}
