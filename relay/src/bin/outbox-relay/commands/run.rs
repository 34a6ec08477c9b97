//! `outbox-relay run`: the relay ([`RelayService`]) with its HTTP endpoint,
//! and the graceful stop on SIGTERM or SIGINT.

use outbox_relay::RelayService;
use outbox_relay::config::{
    BrokerUrl, DatabaseUrl, EventSourceKind, RelayConfig, SlotName, UiTokens,
};
use outbox_relay::error::Error;
use tokio_util::sync::CancellationToken;

/// What `run` was given, checked.
pub(super) struct RunInputs {
    pub(super) database_url: DatabaseUrl,
    pub(super) broker_url: BrokerUrl,
    pub(super) config: RelayConfig,
    pub(super) slot: Option<SlotName>,
    pub(super) skip_migrate: bool,
    /// The operators' page's tokens.
    pub(super) tokens: UiTokens,
}

pub(super) async fn run(inputs: RunInputs) -> Result<(), Error> {
    let RunInputs {
        database_url,
        broker_url,
        config,
        slot,
        skip_migrate,
        tokens,
    } = inputs;
    let mut signals = StopSignals::catch()?;
    let mut relay = RelayService::builder()
        .database(database_url)
        .broker(broker_url)
        .config(config)
        .serve_http(true)
        .ui_tokens(tokens)
        .skip_migrate(skip_migrate);
    relay = match slot {
        Some(slot) => relay.source(EventSourceKind::Logical).slot(slot),
        None => relay.source(EventSourceKind::Poll),
    };
    let stop = CancellationToken::new();
    let running = relay.build()?.run(stop.clone());
    tokio::pin!(running);
    tokio::select! {
        ended = &mut running => return ended.map(drop),
        () = signals.recv() => stop.cancel(),
    }
    running.await.map(drop)
}

/// SIGTERM and SIGINT, caught from the moment the relay starts: one that
/// arrives while it connects and migrates waits for [`StopSignals::recv`],
/// so the relay then stops as it does in service and exits 0, instead of
/// being killed by the signal's default action.
pub(super) struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub(super) fn catch() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Wait for SIGTERM or SIGINT, also one caught before this call.
    pub(super) async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
            _ = self.interrupt.recv() => tracing::info!(signal = "SIGINT", "signal received"),
        }
    }
}
