//! The session loop of the consumers that read over a connection of their
//! own, Redis Streams and NATS JetStream: open a session, run what it reads
//! through the [`MessageLanes`] until it ends, and open the next one with
//! backoff ([`reconnecting`], [`run_lanes`]).

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lanes::{LaneBroker, LaneMessage, MessageLanes, sleep_until_due};
use crate::backend::InboxBackend;
use crate::error::Error;
use crate::handler::Handler;
use crate::policy::RetrySchedule;

/// A session that lasted this long ends the backoff of reconnecting.
const STABLE_SESSION: Duration = Duration::from_secs(30);

/// How one session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionEnd {
    /// `stop` was cancelled.
    Stopped,
    /// The connection failed or a read failed: the next session follows.
    Lost,
}

/// Why a session could not be opened.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The server could not be reached, or did not answer: worth waiting
    /// for.
    Unreachable(String),
    /// The server refused what was asked (credentials, a stream that does
    /// not exist): a first session ends the consumer with it.
    Refused(Error),
}

impl Display for OpenError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Unreachable(reason) => formatter.write_str(reason),
            OpenError::Refused(error) => write!(formatter, "{error}"),
        }
    }
}

/// Sessions one after another until `stop`: each from `open`, run by
/// `consume`. A session that cannot be opened, or is lost, is followed by
/// the next after the backoff of `schedule` (doubling per failure, reset by
/// a session that lasted [`STABLE_SESSION`]).
///
/// # Errors
/// The first session's [`OpenError::Refused`]: settings that cannot work
/// end the consumer at once. A later refusal is retried like an outage.
pub(crate) async fn reconnecting<S, Open, Opening, Consume, Consuming>(
    broker: &'static str,
    schedule: &RetrySchedule,
    stop: &CancellationToken,
    mut open: Open,
    mut consume: Consume,
) -> Result<(), Error>
where
    Open: FnMut() -> Opening,
    Opening: Future<Output = Result<S, OpenError>>,
    Consume: FnMut(S) -> Consuming,
    Consuming: Future<Output = SessionEnd>,
{
    let mut failures: u32 = 0;
    let mut first = true;
    loop {
        let opened = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            opened = open() => opened,
        };
        let session = match opened {
            Ok(session) => session,
            Err(OpenError::Refused(error)) if first => return Err(error),
            Err(error) => {
                failures = failures.saturating_add(1);
                let delay = schedule.delay(failures);
                tracing::warn!(
                    broker,
                    %error,
                    failures,
                    retry_in_ms = millis(delay),
                    "cannot reach the broker; retrying"
                );
                if !pause(delay, stop).await {
                    return Ok(());
                }
                continue;
            }
        };
        first = false;
        let started = Instant::now();
        if consume(session).await == SessionEnd::Stopped {
            return Ok(());
        }
        failures = if started.elapsed() >= STABLE_SESSION {
            1
        } else {
            failures.saturating_add(1)
        };
        let delay = schedule.delay(failures);
        tracing::warn!(
            broker,
            retry_in_ms = millis(delay),
            "broker session lost; reconnecting"
        );
        if !pause(delay, stop).await {
            return Ok(());
        }
    }
}

/// Run what a session's `reader` hands over through `lanes` until `stop`,
/// or until the reader reports a failure or goes away. Each unit of `room`
/// is one message in flight: it is given back as messages finish, and
/// `settled` hears of each finished message. Then the reader is aborted,
/// `room` closed, and the running messages finished; those not started
/// are given up through the lanes' broker.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_lanes<DB, H, M, B, E>(
    broker: &'static str,
    reader: AbortOnDrop,
    mut lanes: MessageLanes<DB, H, M, B>,
    received: &mut mpsc::UnboundedReceiver<Result<Vec<M>, E>>,
    room: &Semaphore,
    max_in_flight: usize,
    stop: &CancellationToken,
    mut settled: impl FnMut(&[Arc<M>]),
) -> SessionEnd
where
    DB: InboxBackend,
    H: Handler<DB>,
    M: LaneMessage,
    B: LaneBroker<M>,
    E: Display,
{
    let end = loop {
        if lanes.in_flight() >= max_in_flight {
            // Nothing more arrives until something finishes: a gathered
            // batch starts now rather than at its deadline.
            lanes.start_gathered();
        }
        let running = lanes.has_running();
        let batch_due = lanes.batch_due();
        tokio::select! {
            biased;
            () = stop.cancelled() => break SessionEnd::Stopped,
            () = sleep_until_due(batch_due), if batch_due.is_some() => lanes.start_gathered(),
            Some(joined) = lanes.next_finished(), if running => {
                let before = lanes.in_flight();
                let finished = lanes.finished(joined);
                settled(&finished);
                room.add_permits(before.saturating_sub(lanes.in_flight()));
            }
            read = received.recv() => match read {
                Some(Ok(messages)) => {
                    for message in messages {
                        lanes.received(message);
                    }
                }
                Some(Err(error)) => {
                    tracing::warn!(broker, %error, "reading from the broker failed");
                    break SessionEnd::Lost;
                }
                None => break SessionEnd::Lost,
            },
        }
    };
    drop(reader);
    room.close();
    tracing::info!(
        broker,
        in_flight = lanes.in_flight(),
        "broker session ending; finishing running messages"
    );
    lanes.stop();
    while let Some(joined) = lanes.next_finished().await {
        let finished = lanes.finished(joined);
        settled(&finished);
    }
    end
}

/// Wait `delay`; `false` when `stop` came first.
async fn pause(delay: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = stop.cancelled() => false,
        () = tokio::time::sleep(delay) => true,
    }
}

/// `duration` in whole milliseconds, for logs.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A task of a session (its reader, its refresher), aborted when the
/// session ends, also when `run` is dropped mid-way (its task aborted):
/// none outlives its session.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
