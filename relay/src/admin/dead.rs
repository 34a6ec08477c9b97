//! Dead events: listing them, making them pending again, discarding them,
//! by event id, by aggregate or all.

use super::{DeadEvent, DeadSelector, RelayAdmin};
use crate::error::Error;

impl DeadSelector {
    /// Every dead event of the aggregate written `TYPE:ID`, as `order:42`.
    ///
    /// ```
    /// use outbox_relay::admin::DeadSelector;
    ///
    /// assert!(matches!(DeadSelector::aggregate("order:42")?, DeadSelector::Aggregate { .. }));
    /// assert!(DeadSelector::aggregate("order").is_err());
    /// # Ok::<(), outbox_relay::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `text` is two non-empty parts
    /// around a colon.
    pub fn aggregate(text: &str) -> Result<DeadSelector, Error> {
        match text.split_once(':') {
            Some((aggregate_type, aggregate_id))
                if !aggregate_type.is_empty() && !aggregate_id.is_empty() =>
            {
                Ok(DeadSelector::Aggregate {
                    aggregate_type: aggregate_type.to_owned(),
                    aggregate_id: aggregate_id.to_owned(),
                })
            }
            _ => Err(Error::InvalidArgument(format!(
                "invalid aggregate `{text}`: expected TYPE:ID, e.g. order:42"
            ))),
        }
    }
}

impl RelayAdmin {
    /// Up to `limit` dead events of `selector`, oldest first.
    ///
    /// # Errors
    /// [`Error::Database`] when the statement fails.
    pub async fn dead_events(
        &self,
        selector: &DeadSelector,
        limit: i64,
    ) -> Result<Vec<DeadEvent>, Error> {
        self.store.list_dead(selector, limit).await
    }

    /// Make the dead events of `selector` pending again, their attempts
    /// reset; how many.
    ///
    /// # Errors
    /// [`Error::NotFound`] when `selector` names an event or an aggregate
    /// and nothing matched (a mistyped id, or an event that is not dead);
    /// [`Error::Database`] when the statement fails.
    pub async fn retry_dead(&self, selector: &DeadSelector) -> Result<u64, Error> {
        let retried = self.store.retry_dead(selector).await?;
        require_a_match(retried, selector)
    }

    /// Discard the dead events of `selector` for good; how many.
    ///
    /// # Errors
    /// As [`RelayAdmin::retry_dead`].
    pub async fn discard_dead(&self, selector: &DeadSelector) -> Result<u64, Error> {
        let discarded = self.store.discard_dead(selector).await?;
        require_a_match(discarded, selector)
    }
}

/// `matched`, unless it is none of an event or an aggregate named;
/// [`DeadSelector::All`] matching nothing is no error.
fn require_a_match(matched: u64, selector: &DeadSelector) -> Result<u64, Error> {
    if matched > 0 {
        return Ok(matched);
    }
    match selector {
        DeadSelector::EventId(event_id) => Err(Error::NotFound(format!(
            "no dead event has event id {event_id}: it does not exist or is not dead"
        ))),
        DeadSelector::Aggregate {
            aggregate_type,
            aggregate_id,
        } => Err(Error::NotFound(format!(
            "aggregate {aggregate_type}:{aggregate_id} has no dead event"
        ))),
        DeadSelector::All => Ok(0),
    }
}
