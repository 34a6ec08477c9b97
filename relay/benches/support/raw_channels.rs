//! The raw lapin client over several channels of one connection, each
//! aggregate always on the same channel (so each keeps its order, as a
//! relay must): how far the broker goes past one channel's rate.

use std::collections::VecDeque;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Instant;

use lapin::options::ConfirmSelectOptions;
use lapin::types::ShortString;
use lapin::{BasicProperties, Channel};
use uuid::Uuid;

use super::events::EVENT_TYPE;
use super::raw::{AMQP_PUBLISH, RawRecord, amqp_confirm_channel, amqp_properties};

/// What each message carries beside its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Properties {
    /// The relay's: persistent, its properties and `cloudEvents:*` headers.
    Relay,
    /// Persistent, with a `message_id` and nothing else, as mq-bridge sends.
    Bare,
}

impl Properties {
    fn of(self, event_id: &Uuid, key: &str) -> BasicProperties {
        match self {
            Properties::Relay => amqp_properties(event_id, key),
            Properties::Bare => BasicProperties::default()
                .with_delivery_mode(2)
                .with_message_id(ShortString::from(event_id.to_string())),
        }
    }
}

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
    let mut shares: Vec<Vec<RawRecord>> = vec![Vec::new(); channels];
    for record in records {
        shares[channel_of(&record.key, channels)].push(record.clone());
    }
    let started = Instant::now();
    let sends: Vec<_> = open
        .into_iter()
        .zip(shares)
        .map(|(channel, share)| {
            let exchange = exchange.to_owned();
            tokio::spawn(async move {
                publish_share(channel, &exchange, share, window, properties).await
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

/// Publish `share` on `channel` with `properties`, in order; returns how many were
/// acknowledged.
async fn publish_share(
    channel: Channel,
    exchange: &str,
    share: Vec<RawRecord>,
    window: usize,
    properties: Properties,
) -> u64 {
    let mut confirms = VecDeque::new();
    let mut acknowledged = 0u64;
    let mut check = |confirmation: lapin::Confirmation| {
        assert!(
            !confirmation.is_nack() && confirmation.take_message().is_none(),
            "raw lapin: message nacked or returned"
        );
        acknowledged += 1;
    };
    for record in &share {
        let confirm = channel
            .basic_publish(
                exchange.into(),
                EVENT_TYPE.into(),
                AMQP_PUBLISH,
                record.payload.as_bytes(),
                properties.of(&Uuid::now_v7(), &record.key),
            )
            .await
            .expect("publish");
        confirms.push_back(confirm);
        if confirms.len() > window
            && let Some(confirm) = confirms.pop_front()
        {
            check(confirm.await.expect("confirm"));
        }
    }
    while let Some(confirm) = confirms.pop_front() {
        check(confirm.await.expect("confirm"));
    }
    acknowledged
}
