//! `outbox-relay replay`: re-publish one topic's published events of a time
//! window, with their original ids.

use crate::Error;
use crate::broker_url::BrokerUrl;
use crate::config::RelayConfig;
use crate::database_url::DatabaseUrl;
use crate::publish::build_publisher;
use crate::replay::{ReplayTime, replay, resolve_window};
use crate::store::{Connections, open_store};

pub(super) async fn run_replay(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    topic: &str,
    since: ReplayTime,
    until: Option<ReplayTime>,
) -> Result<(), Error> {
    let store = open_store(&database_url, Connections::OnDemand).await?;
    let window = resolve_window(store.as_ref(), topic, since, until).await?;
    let publisher = build_publisher(&broker_url, &config).await?;
    tracing::info!(
        topic = %window.topic,
        since = %window.since.to_rfc3339(),
        until = %window.until.to_rfc3339(),
        database = %database_url,
        broker = %broker_url,
        "replay started"
    );
    let replayed = replay(
        store.as_ref(),
        publisher.as_ref(),
        &window,
        i64::from(config.batch_size()),
    )
    .await?;
    let summary = format!(
        "{replayed} event(s) of topic `{}` replayed (created from {} to before {})",
        window.topic,
        window.since.to_rfc3339(),
        window.until.to_rfc3339()
    );
    // On the stdout broker, stdout carries the events themselves.
    if broker_url == BrokerUrl::Stdout {
        eprintln!("{summary}");
    } else {
        println!("{summary}");
    }
    Ok(())
}
