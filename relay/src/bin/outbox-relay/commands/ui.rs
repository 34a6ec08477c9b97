//! `outbox-relay ui`: the operators' page of a database, served with no
//! relay in the process ([`RelayAdmin::bind_page`]), until SIGTERM or
//! SIGINT.

use std::net::SocketAddr;

use outbox_relay::admin::{PageOptions, RelayAdmin};
use outbox_relay::config::{DatabaseUrl, SlotName, UiTokens};
use outbox_relay::error::Error;
use tokio_util::sync::CancellationToken;

use super::run::StopSignals;

pub(super) async fn ui(
    database_url: DatabaseUrl,
    listen: SocketAddr,
    slot: Option<SlotName>,
    tokens: UiTokens,
) -> Result<(), Error> {
    let mut signals = StopSignals::catch()?;
    let admin = RelayAdmin::connect(database_url).await?;
    let token_names = tokens.names().join(",");
    let read_only = tokens.is_empty();
    let mut options = PageOptions::new().tokens(tokens);
    if let Some(slot) = slot {
        options = options.logical(slot);
    }
    let page = admin.bind_page(listen, options).await?;
    let address = page.local_addr();
    if !address.ip().is_loopback() {
        tracing::warn!(
            %address,
            "the operators' page listens beyond loopback over plain HTTP: put a reverse proxy \
             with TLS in front of it (docs/operations.md, The operators' page)"
        );
    }
    tracing::info!(
        %address,
        read_only,
        tokens = %token_names,
        "operators' page at http://{address}/ui"
    );
    let stop = CancellationToken::new();
    let serving = page.serve(stop.clone());
    tokio::pin!(serving);
    tokio::select! {
        () = &mut serving => return Ok(()),
        () = signals.recv() => stop.cancel(),
    }
    serving.await;
    Ok(())
}
