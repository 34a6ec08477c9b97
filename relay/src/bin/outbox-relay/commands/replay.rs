//! `outbox-relay replay`: re-publish one topic's published events of a time
//! window, with their original ids; under `--source logical`, the streamed
//! events the slot confirmed too.

use outbox_relay::config::RelayConfig;
use outbox_relay::config::broker_url::BrokerUrl;
use outbox_relay::config::build_publisher;
use outbox_relay::config::database_url::DatabaseUrl;
use outbox_relay::config::open_store;
use outbox_relay::error::Error;
use outbox_relay::operator::{ReplaySource, ReplayTime, replay, resolve_window};
use outbox_relay::operator::{StreamedReplay, unconfirmed_in_window};
use outbox_relay::source::logical::{SlotName, missing_slot_error, slot_status};
use outbox_relay::store::{Connections, OperatorStore, PostgresStore, ReplayWindow};
use outbox_relay::tasks::Tasks;

/// The topic and the window asked for, before they are resolved against
/// the database.
pub(super) struct ReplayRequest<'a> {
    pub(super) topic: &'a str,
    pub(super) since: ReplayTime,
    pub(super) until: Option<ReplayTime>,
}

/// Replay `request` to `broker_url`; `slot` is the logical source's, or
/// `None` when polling.
pub(super) async fn run_replay(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    slot: Option<SlotName>,
    request: ReplayRequest<'_>,
) -> Result<(), Error> {
    if slot.is_none() && config.deletes_on_publish() {
        return Err(Error::InvalidArgument(
            "nothing to replay: with retention.published = \"0s\" the relay deletes each event \
             as the broker acknowledges it; keep published events (retention.published above \
             0s) to replay them"
                .to_owned(),
        ));
    }
    let inputs = (&database_url, &broker_url, &config);
    let (window, replayed, left_out) = match &slot {
        None => {
            let store = open_store(&database_url, Connections::OnDemand).await?;
            let (window, replayed) =
                replay_request(store.as_ref(), store.as_ref(), &request, inputs).await?;
            (window, replayed, 0)
        }
        Some(slot) => {
            let store = PostgresStore::connect(database_url.as_str()).await?;
            if slot_status(store.pool(), slot).await?.is_none() {
                return Err(missing_slot_error(
                    slot,
                    "name the slot with --slot, or replay without --source logical once the \
                     relays poll",
                ));
            }
            let source = StreamedReplay::new(store.pool(), slot);
            let (window, replayed) = replay_request(&store, &source, &request, inputs).await?;
            let left_out = unconfirmed_in_window(store.pool(), slot, &window).await?;
            (window, replayed, left_out)
        }
    };
    let mut summary = format!(
        "{replayed} event(s) of topic `{}` replayed (created from {} to before {})",
        window.topic,
        window.since.to_rfc3339(),
        window.until.to_rfc3339()
    );
    if left_out > 0 {
        summary.push_str(&format!(
            "; {left_out} streamed event(s) of the window were left out: committed after the \
             newest retention checkpoint the slot has confirmed, so not known to be published \
             yet (replay again after the next retention pass)"
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

/// Resolve `request`'s window on `store`, then replay what `source` reads
/// of it through a publisher of `config`; the window and how many events
/// were replayed.
async fn replay_request<S: ReplaySource + ?Sized>(
    store: &dyn OperatorStore,
    source: &S,
    request: &ReplayRequest<'_>,
    (database_url, broker_url, config): (&DatabaseUrl, &BrokerUrl, &RelayConfig),
) -> Result<(ReplayWindow, u64), Error> {
    let window = resolve_window(store, request.topic, request.since, request.until).await?;
    // The publisher's background work ends with the replay.
    let tasks = Tasks::new();
    let publisher = build_publisher(broker_url, config, &tasks).await?;
    tracing::info!(
        topic = %window.topic,
        since = %window.since.to_rfc3339(),
        until = %window.until.to_rfc3339(),
        database = %database_url,
        broker = %broker_url,
        "replay started"
    );
    let page_size = i64::from(config.batch_size());
    let replayed = replay(source, publisher.as_ref(), &window, page_size).await;
    tasks.cancel();
    tasks.wait().await;
    Ok((window, replayed?))
}
