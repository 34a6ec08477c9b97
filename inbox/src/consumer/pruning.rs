//! [`BackgroundPruning`]: the pruning task a consumer runs beside itself.

use tokio_util::sync::CancellationToken;

use crate::backend::InboxBackend;
use crate::inbox::Inbox;
use crate::prune::{PruneSettings, prune_until_stopped};

/// The pruning task a consumer runs while it consumes: started with
/// [`BackgroundPruning::start`], stopped with [`BackgroundPruning::stop`] or
/// when dropped.
pub(crate) struct BackgroundPruning {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl BackgroundPruning {
    /// Prune `inbox` by `settings` in a task of its own.
    pub(crate) fn start<DB: InboxBackend>(inbox: &Inbox<DB>, settings: PruneSettings) -> Self {
        let stop = CancellationToken::new();
        let task = tokio::spawn(prune_until_stopped(
            inbox.pool().clone(),
            inbox.consumer().to_owned(),
            settings,
            stop.clone(),
        ));
        BackgroundPruning { stop, task }
    }

    /// Stop pruning and wait for the task to end.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        if let Err(error) = (&mut self.task).await {
            tracing::warn!(%error, "the inbox pruning task failed");
        }
    }
}

impl Drop for BackgroundPruning {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
