//! [`Tasks`]: who owns the relay's background tasks, and how they stop.
//!
//! Every task the relay spawns (the LISTEN connection, the marks and the
//! fetch ahead of the batch loop, the stream of the logical source, lease
//! renewal, retention, the HTTP endpoint, a publisher's connection work)
//! is spawned through a [`Tasks`]: one [`TaskTracker`] that sees them all,
//! and a tree of [`CancellationToken`]s that tells them to stop. The
//! program that starts the relay keeps the root, cancels it on SIGTERM and
//! waits with [`Tasks::wait`] until every task has ended.

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A handle on the relay's tasks: the tracker they are spawned on and the
/// token that stops them. Cloning it shares both; [`Tasks::child`] shares
/// the tracker with a token that its parent's cancellation reaches.
///
/// ```
/// use outbox_relay::tasks::Tasks;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let tasks = Tasks::new();
/// let stop = tasks.stop_token();
/// tasks.spawn(async move { stop.cancelled().await });
/// tasks.cancel();
/// tasks.wait().await;
/// assert_eq!(tasks.len(), 0);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Tasks {
    /// A new root: its own tracker and token.
    pub fn new() -> Self {
        Tasks::default()
    }

    /// A root whose token is `stop` (cancelled on SIGTERM, for instance).
    #[cfg(feature = "test-util")]
    pub fn stopped_by(stop: CancellationToken) -> Self {
        Tasks {
            tracker: TaskTracker::new(),
            stop,
        }
    }

    /// The same tracker with a child token: cancelling it stops the tasks
    /// spawned with it, cancelling this one stops them too.
    pub fn child(&self) -> Self {
        Tasks {
            tracker: self.tracker.clone(),
            stop: self.stop.child_token(),
        }
    }

    /// Spawn `task` on the tracker. The task watches
    /// [`Tasks::stop_token`] (or a child of it) to end when told.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Run the blocking `work` on the tracker.
    #[cfg(any(feature = "kafka", feature = "test-util"))]
    pub fn spawn_blocking<F, T>(&self, work: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.tracker.spawn_blocking(work)
    }

    /// The token the tasks of this handle stop on.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Whether this handle's token is cancelled.
    #[cfg(feature = "test-util")]
    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Tell the tasks of this handle (and of its children) to stop.
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// How many tasks spawned on the tracker are still alive.
    pub fn len(&self) -> usize {
        self.tracker.len()
    }

    /// Whether every task spawned on the tracker has ended.
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.tracker.is_empty()
    }

    /// Wait until every task spawned on the tracker has ended. The tracker
    /// is closed first; a task spawned afterwards is waited for too.
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }
}
