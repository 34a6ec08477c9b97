//! The settings of a [`Relay`](crate::Relay) from a [`RelayConfig`].

use super::{DeadLetterPolicy, RelayConfig};
use crate::batch::{DispatchSettings, RetryPolicy};
use crate::operator::RetentionSettings;
use crate::relay::RelaySettings;

/// The relay's settings from its configuration.
pub fn relay_settings(relay_id: String, config: &RelayConfig) -> RelaySettings {
    RelaySettings {
        relay_id,
        lease_duration: config.lease_duration,
        dispatch: DispatchSettings {
            batch_size: i64::from(config.batch_size()),
            max_batch_bytes: i64::try_from(config.max_batch_bytes).unwrap_or(i64::MAX),
            publish_timeout: config.publish_timeout,
            retry: RetryPolicy {
                base_delay: config.retry.base_delay,
                max_delay: config.retry.max_delay,
                max_attempts: config.retry.max_attempts,
                jitter: config.retry.jitter,
            },
            hold_dead: config.dead_letter.policy == DeadLetterPolicy::Hold,
            poll_interval_min: config.poll_interval_min,
            poll_interval_max: config.poll_interval_max,
            handover_after: config.effective_handover_after(),
            delete_acknowledged: config.deletes_on_publish(),
        },
        retention: config.retention.enabled.then(|| RetentionSettings {
            keep_published: config.retention.published,
            interval: config.retention.interval,
            batch_size: i64::from(config.retention.batch_size),
        }),
    }
}
