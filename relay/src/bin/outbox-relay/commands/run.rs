//! `outbox-relay run`: the relay ([`RelayService`]) with its HTTP endpoint,
//! and the graceful stop on SIGTERM or SIGINT.

use outbox_relay::RelayService;
use outbox_relay::config::{BrokerUrl, DatabaseUrl, EventSourceKind, RelayConfig, SlotName};
use outbox_relay::error::Error;
use tokio_util::sync::CancellationToken;

pub(super) async fn run(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    slot: Option<SlotName>,
    skip_migrate: bool,
) -> Result<(), Error> {
    let mut signals = StopSignals::catch()?;
    let mut relay = RelayService::builder()
        .database(database_url)
        .broker(broker_url)
        .config(config)
        .serve_http(true)
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
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn catch() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Wait for SIGTERM or SIGINT, also one caught before this call.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
            _ = self.interrupt.recv() => tracing::info!(signal = "SIGINT", "signal received"),
        }
    }
}
