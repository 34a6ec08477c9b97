//! The raw lapin client over several channels of one connection, each
//! aggregate always on the same channel (so each keeps its order, as a
//! relay must): how far the broker goes past one channel's rate.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use lapin::options::ConfirmSelectOptions;
use uuid::Uuid;

use super::raw::{Properties, RawRecord, amqp_confirm_channel, publish_confirmed};

/// Publish `records` to `exchange` over `channels` channels in confirm
/// mode, with `properties`, at most `window` confirms outstanding per
/// channel; returns acknowledged messages per second, from the first send
/// to the last confirm.
pub async fn raw_lapin_channels(
    amqp_url: &str,
    exchange: &str,
    records: &[RawRecord],
    window: usize,
    channels: usize,
    properties: Properties,
) -> f64 {
    assert!(channels > 0, "raw lapin: at least one channel");
    let (connection, first, _) = amqp_confirm_channel(amqp_url, exchange).await;
    let mut open = vec![first];
    while open.len() < channels {
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        open.push(channel);
    }
    // Each channel's records, and their event ids.
    let mut shares: Vec<(Vec<RawRecord>, Vec<Uuid>)> = vec![(Vec::new(), Vec::new()); channels];
    for record in records {
        let (share, ids) = &mut shares[channel_of(&record.key, channels)];
        share.push(record.clone());
        ids.push(Uuid::now_v7());
    }
    let started = Instant::now();
    let sends: Vec<_> = open
        .into_iter()
        .zip(shares)
        .map(|(channel, (share, ids))| {
            let exchange = exchange.to_owned();
            tokio::spawn(async move {
                publish_confirmed(&channel, &exchange, &share, &ids, window, properties).await
            })
        })
        .collect();
    let mut acknowledged = 0u64;
    for send in sends {
        acknowledged += send.await.expect("a channel's publisher");
    }
    let elapsed = started.elapsed();
    let _ = connection.close(200, "bye".into()).await;
    acknowledged as f64 / elapsed.as_secs_f64()
}

/// The channel that carries aggregate `key`.
fn channel_of(key: &str, channels: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    (hasher.finish() % channels as u64) as usize
}
