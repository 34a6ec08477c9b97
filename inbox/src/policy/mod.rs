//! The delivery policy, the same for every broker: decode, process,
//! classify, back off, poison and dead letter (`docs/inbox.md`).
//!
//! An adapter turns each broker message into a [`BrokerMessage`], hands it
//! to [`DeliveryPolicy::deliver`] and settles the [`Settlement`] it gets
//! back with its broker: an ack or a committable offset for a finished
//! message, nothing (or a requeue) for a released one. The policy:
//!
//! 1. **Decode**: the message's CloudEvent, then [`Handler::decode`]. A
//!    message that does not decode (or whose decoding panics) is poison:
//!    dead-lettered at once.
//! 2. **Process**: [`Inbox::process`] runs [`Handler::handle`] in the inbox
//!    transaction, in an `inbox.handle` span ([`handler_span`]).
//! 3. **Classify** ([`AttemptResult`]): processed or duplicate finishes the
//!    message; a database outage is tried again without counting; a
//!    handler error or panic counts as an attempt.
//! 4. **Back off** ([`RetrySchedule`]): in place, holding the message
//!    unacknowledged, exponentially with jitter; the backoff of outages
//!    grows with consecutive outages of the message.
//! 5. **Dead letter**: after `max_attempts` failed attempts. Sending the
//!    dead letter is retried until the broker accepts it; only then is the
//!    message finished.
//!
//! Cancelling the `give_up` token (the consumer stops, or its connection
//! is gone) cuts every pause short and releases the message; an attempt
//! already running finishes first.

mod attempt;
mod backoff;
mod batch;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use self::attempt::AttemptResult;
pub(crate) use self::attempt::panic_message;
pub(crate) use self::backoff::RetrySchedule;
use crate::backend::InboxBackend;
use crate::consumer::StatsCounters;
use crate::delivery::Delivery;
use crate::error::{DecodeError, Error};
use crate::handler::Handler;
use crate::inbox::{Inbox, Outcome};
use crate::incoming::IncomingEvent;
use crate::stats::ConsumerStats;
use crate::trace_context::handler_span;

/// One message as a broker adapter hands it to the [`DeliveryPolicy`].
pub(crate) trait BrokerMessage: Send + Sync {
    /// The CloudEvent the message carries, read from its binding.
    fn incoming(&self) -> Result<IncomingEvent, DecodeError>;

    /// Failed handler attempts recorded on the message before this
    /// delivery; 0 when the broker keeps no count.
    fn previous_attempts(&self) -> u32;

    /// Send the message to its dead-letter destination with `reason` and
    /// the handler attempts made; the destination's name once the broker
    /// accepted it.
    fn dead_letter(
        &self,
        reason: &str,
        attempts: u32,
    ) -> impl Future<Output = Result<String, Error>> + Send;
}

/// How the policy finished with one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// The handler ran and committed.
    Processed,
    /// The event was processed before.
    Duplicate,
    /// The broker accepted the dead letter.
    DeadLettered,
    /// Given up without finishing (the consumer stops or lost its
    /// connection): the broker must deliver the message again.
    Released,
    /// A batch's handler failed and rolled back: nothing is settled, and
    /// the adapter runs the message again on its own with
    /// [`DeliveryPolicy::deliver`], so that only the failing event retries
    /// and messages of other keys are not held behind it.
    RunAlone,
}

impl Settlement {
    /// Whether the message is finished: acknowledge it, or let its offset
    /// be committed.
    pub(crate) fn is_finished(self) -> bool {
        !matches!(self, Settlement::Released | Settlement::RunAlone)
    }
}

/// The delivery policy of one consumer: its inbox, handler, retry
/// schedule and counters.
pub(crate) struct DeliveryPolicy<DB: InboxBackend, H: Handler<DB>> {
    inbox: Inbox<DB>,
    handler: Arc<H>,
    retry: RetrySchedule,
    stats: StatsCounters,
}

impl<DB: InboxBackend, H: Handler<DB>> DeliveryPolicy<DB, H> {
    pub(crate) fn new(inbox: Inbox<DB>, handler: H, retry: RetrySchedule) -> Self {
        DeliveryPolicy {
            inbox,
            handler: Arc::new(handler),
            retry,
            stats: StatsCounters::default(),
        }
    }

    pub(crate) fn inbox(&self) -> &Inbox<DB> {
        &self.inbox
    }

    /// The counts so far.
    pub(crate) fn stats(&self) -> ConsumerStats {
        self.stats.snapshot()
    }

    /// Take `message` to its end: processed, duplicate or dead-lettered,
    /// or released when `give_up` is cancelled while it waits.
    pub(crate) async fn deliver<M: BrokerMessage>(
        &self,
        message: &M,
        give_up: &CancellationToken,
    ) -> Settlement {
        let previous_attempts = message.previous_attempts();
        let (incoming, event) = match self.decode(message) {
            Ok(decoded) => decoded,
            Err(reason) => {
                tracing::error!(%reason, "poison message; dead-lettering it");
                return self
                    .dead_letter(message, &reason, previous_attempts, give_up)
                    .await;
            }
        };
        self.deliver_decoded(message, &incoming, &event, previous_attempts, give_up)
            .await
    }

    /// [`DeliveryPolicy::deliver`] of a message already decoded into
    /// `incoming` and `event`.
    pub(crate) async fn deliver_decoded<M: BrokerMessage>(
        &self,
        message: &M,
        incoming: &IncomingEvent,
        event: &H::Event,
        previous_attempts: u32,
        give_up: &CancellationToken,
    ) -> Settlement {
        let event_id = incoming.id.as_str();
        tracing::Span::current().record("event_id", event_id);

        let mut attempts = previous_attempts;
        let mut outages: u32 = 0;
        loop {
            let error = match self
                .attempt(incoming, event, attempts.saturating_add(1))
                .await
            {
                AttemptResult::Done(outcome) => return self.finished(event_id, &outcome),
                AttemptResult::DatabaseOutage(error) => {
                    outages = outages.saturating_add(1);
                    if !self
                        .wait_out_outage(event_id, &error, outages, give_up)
                        .await
                    {
                        return release();
                    }
                    continue;
                }
                AttemptResult::Failed(error) => error,
            };
            outages = 0;
            attempts = attempts.saturating_add(1);
            if attempts >= self.retry.max_attempts {
                tracing::error!(
                    event_id,
                    attempts,
                    %error,
                    "handler failed on every attempt; dead-lettering the message"
                );
                let reason = format!("failed {attempts} attempts; last error: {error}");
                return self.dead_letter(message, &reason, attempts, give_up).await;
            }
            let delay = self.retry.delay(attempts);
            tracing::warn!(
                event_id,
                attempt = attempts,
                max_attempts = self.retry.max_attempts,
                %error,
                retry_in_ms = millis(delay),
                "handler failed; retrying"
            );
            if !pause(delay, give_up).await {
                return release();
            }
            self.stats.count_retry();
        }
    }

    /// Count a finished attempt.
    fn finished(&self, event_id: &str, outcome: &Outcome<()>) -> Settlement {
        if outcome.is_processed() {
            self.stats.count_processed();
            tracing::debug!(event_id, "event processed");
            Settlement::Processed
        } else {
            self.stats.count_duplicate();
            tracing::debug!(event_id, "duplicate event skipped");
            Settlement::Duplicate
        }
    }

    /// Count the `outages`th outage in a row and wait its backoff; `false`
    /// when `give_up` was cancelled meanwhile.
    async fn wait_out_outage(
        &self,
        event_id: &str,
        error: &str,
        outages: u32,
        give_up: &CancellationToken,
    ) -> bool {
        self.stats.count_database_outage();
        let delay = self.retry.delay(outages);
        tracing::warn!(
            event_id,
            %error,
            outages,
            retry_in_ms = millis(delay),
            "database unreachable; retrying the message (not counted as an attempt)"
        );
        pause(delay, give_up).await
    }

    /// The message's CloudEvent and the handler's event, or why the
    /// message is poison.
    fn decode<M: BrokerMessage>(&self, message: &M) -> Result<(IncomingEvent, H::Event), String> {
        let incoming = message
            .incoming()
            .map_err(|error| format!("poison message: {error}"))?;
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.handler.decode(&incoming))) {
            Ok(Ok(event)) => Ok((incoming, event)),
            Ok(Err(error)) => Err(format!("poison message: {error}")),
            Err(panic) => Err(format!(
                "poison message: decoding event {} panicked: {}",
                incoming.id,
                panic_message(panic.as_ref())
            )),
        }
    }

    /// One run of the handler inside the inbox transaction, its
    /// `attempt`th (from 1).
    async fn attempt(
        &self,
        incoming: &IncomingEvent,
        event: &H::Event,
        attempt: u32,
    ) -> AttemptResult {
        let delivery = Delivery::new(incoming, attempt);
        let processing = async {
            let Some(mut tx) = self.inbox.begin(&incoming.id).await? else {
                return Ok(Outcome::Duplicate);
            };
            let result = self.handler.handle(&mut *tx, event, &delivery).await;
            self.inbox.settle(tx, &incoming.id, result).await
        }
        .instrument(handler_span(self.inbox.consumer(), incoming));
        let result = AssertUnwindSafe(processing).catch_unwind().await;
        AttemptResult::classify(result, &incoming.id)
    }

    /// Send the dead letter until the broker accepts it, or until
    /// `give_up`.
    async fn dead_letter<M: BrokerMessage>(
        &self,
        message: &M,
        reason: &str,
        attempts: u32,
        give_up: &CancellationToken,
    ) -> Settlement {
        let mut failures: u32 = 0;
        loop {
            match message.dead_letter(reason, attempts).await {
                Ok(destination) => {
                    self.stats.count_dead_lettered();
                    tracing::warn!(%destination, reason, attempts, "message dead-lettered");
                    return Settlement::DeadLettered;
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let delay = self.retry.delay(failures);
                    tracing::error!(
                        %error,
                        failures,
                        retry_in_ms = millis(delay),
                        "cannot dead-letter the message; it stays unacknowledged and is tried again"
                    );
                    if !pause(delay, give_up).await {
                        return release();
                    }
                }
            }
        }
    }
}

/// Leave the message to the broker; the `inbox_message` span the adapter
/// runs the policy in names it.
fn release() -> Settlement {
    tracing::info!("consumer stopping or disconnected; the message is left for redelivery");
    Settlement::Released
}

/// Wait `delay`; `false` when `give_up` was cancelled first.
async fn pause(delay: Duration, give_up: &CancellationToken) -> bool {
    tokio::select! {
        () = give_up.cancelled() => false,
        () = tokio::time::sleep(delay) => true,
    }
}

fn millis(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
}
