//! Slow publisher confirms, as a busy RabbitMQ queue gives them: the
//! relay's connection goes through a proxy that holds back whatever the
//! broker sends for a while, every [`HELD_ACKS_PERIOD`]. A queue syncs its
//! disk, and only then confirms persistent messages, at least that often
//! while it is busy; between syncs the confirms wait.

use std::sync::Arc;
use std::time::Duration;

use outbox_testkit::TcpProxy;

/// How often the confirms are held back.
pub(crate) const HELD_ACKS_PERIOD: Duration = Duration::from_millis(200);

/// A proxy in front of the broker holding its answers back for `hold`
/// every [`HELD_ACKS_PERIOD`], until [`HeldAcks::stop_holding`]. Dropped,
/// it closes the connections through it.
pub(crate) struct HeldAcks {
    proxy: Arc<TcpProxy>,
    pulsing: tokio::task::JoinHandle<()>,
}

impl HeldAcks {
    pub(crate) async fn start(broker_url: &str, hold: Duration) -> HeldAcks {
        let proxy = Arc::new(TcpProxy::in_front_of(broker_url).await);
        let pulse = Arc::clone(&proxy);
        let open = HELD_ACKS_PERIOD.saturating_sub(hold);
        let pulsing = tokio::spawn(async move {
            loop {
                tokio::time::sleep(open).await;
                pulse.hold_to_client();
                tokio::time::sleep(hold).await;
                pulse.release_held();
            }
        });
        HeldAcks { proxy, pulsing }
    }

    /// `broker_url` through the proxy.
    pub(crate) fn route(&self, broker_url: &str) -> String {
        self.proxy.route(broker_url)
    }

    /// Let every answer through from now on; the connections stay.
    pub(crate) fn stop_holding(&self) {
        self.pulsing.abort();
        self.proxy.release_held();
    }
}

impl Drop for HeldAcks {
    fn drop(&mut self) {
        self.pulsing.abort();
    }
}
