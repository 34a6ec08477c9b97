//! `outbox-relay replay`: re-publish one topic's published events of a time
//! window, with their original ids (see [`RelayAdmin::replay`]).

use outbox_relay::admin::{RelayAdmin, ReplayRequest};
use outbox_relay::config::{BrokerUrl, DatabaseUrl, RelayConfig};
use outbox_relay::error::Error;

/// Replay `request` to `broker_url`, from where `config` says the events
/// were published from (its `source` and `slot`).
pub(super) async fn run_replay(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    request: ReplayRequest,
) -> Result<(), Error> {
    let admin = RelayAdmin::connect(database_url).await?;
    let replayed = admin.replay(&request, &broker_url, &config).await?;
    let window = &replayed.window;
    let mut summary = format!(
        "{} event(s) of topic `{}` replayed (created from {} to before {})",
        replayed.replayed,
        window.topic,
        window.since.to_rfc3339(),
        window.until.to_rfc3339()
    );
    if replayed.left_out > 0 {
        summary.push_str(&format!(
            "; {} streamed event(s) of the window were left out: committed after the newest \
             retention checkpoint the slot has confirmed, so not known to be published yet \
             (replay again after the next retention pass)",
            replayed.left_out
        ));
    }
    // On the stdout broker, stdout carries the events themselves.
    if broker_url == BrokerUrl::Stdout {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    Ok(())
}
