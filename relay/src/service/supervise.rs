//! A running [`RelayService`](super::RelayService) until its stop, and the
//! graceful stop: the batch in flight finished within `shutdown_timeout`,
//! the HTTP endpoint closed after the relay, every task ended.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::batch::DispatchTotals;
use crate::error::Error;
use crate::service::start::Running;
use crate::tasks::Tasks;

/// How long a stop waits for the HTTP endpoint's open connections.
const HTTP_STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the tasks still running after the relay and its endpoint
/// stopped may take to end.
const TASKS_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// Wait for `stop` (or the relay ending on its own, which it does only
/// when it cannot start, or the slot's watch failing), then stop the relay
/// within `shutdown_timeout` and the HTTP endpoint after it. After the
/// slot's watch failed, the relay ends with its error. Returns what the
/// relay did.
pub(super) async fn supervise(
    running: Running,
    stop: &CancellationToken,
    shutdown_timeout: Duration,
) -> Result<DispatchTotals, Error> {
    let Running {
        mut relay_task,
        relay,
        http,
        slot_watch,
    } = running;
    let mut failed = None;
    tokio::select! {
        () = stop.cancelled() => {}
        error = slot_failure(slot_watch) => failed = Some(error),
        ended = &mut relay_task => {
            stop_http_endpoint(http).await;
            return match ended {
                Ok(result) => result,
                Err(join_error) => Err(Error::Shutdown(format!("the relay task failed: {join_error}"))),
            };
        }
    }
    tracing::info!("stop requested; finishing the batch in flight");
    relay.cancel();
    let stopped = tokio::time::timeout(shutdown_timeout, relay_task).await;
    stop_http_endpoint(http).await;
    if let Some(error) = failed {
        return Err(error);
    }
    match stopped {
        Ok(Ok(result)) => result,
        Ok(Err(join_error)) => Err(Error::Shutdown(format!(
            "the relay task failed: {join_error}"
        ))),
        Err(_) => {
            tracing::warn!(
                timeout_ms = shutdown_timeout.as_millis() as u64,
                "graceful stop timed out; leases expire on their own"
            );
            Err(Error::Shutdown(format!(
                "graceful stop did not finish within {} ms",
                shutdown_timeout.as_millis()
            )))
        }
    }
}

/// Stop every task still running and wait for it, at most
/// [`TASKS_STOP_TIMEOUT`] (a relay whose graceful stop timed out may still
/// hold one).
pub(super) async fn end_every_task(tasks: &Tasks) {
    tasks.cancel();
    match tokio::time::timeout(TASKS_STOP_TIMEOUT, tasks.wait()).await {
        Ok(()) => tracing::debug!("every task ended"),
        Err(_) => tracing::warn!(
            tasks_left = tasks.len(),
            "tasks still running after the stop; they end with the process"
        ),
    }
}

/// The error that ends the relay from beside it: the slot's watch reports
/// a slot the server invalidated. Never resolves otherwise.
async fn slot_failure(watch: Option<JoinHandle<Result<(), Error>>>) -> Error {
    if let Some(watch) = watch {
        match watch.await {
            Ok(Err(error)) => return error,
            Ok(Ok(())) => {}
            Err(join_error) => tracing::error!(%join_error, "the slot's watch failed"),
        }
    }
    std::future::pending().await
}

/// Stop the HTTP endpoint, if the relay serves one: wait briefly for it to
/// close its connections, then drop whatever a scraper still holds open.
async fn stop_http_endpoint(http: Option<(JoinHandle<()>, Tasks)>) {
    let Some((task, tasks)) = http else {
        return;
    };
    tasks.cancel();
    let abort = task.abort_handle();
    match tokio::time::timeout(HTTP_STOP_TIMEOUT, task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "the http endpoint task failed"),
        Err(_) => abort.abort(),
    }
}
