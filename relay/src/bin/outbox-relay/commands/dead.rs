//! `outbox-relay dead list|retry|discard`: dead events, by event id,
//! aggregate or all.

use super::database_url;
use crate::args::{DeadAction, DeadSelection};
use outbox_relay::config::open_store;
use outbox_relay::error::Error;
use outbox_relay::store::{Connections, DeadSelector};

fn parse_aggregate(text: &str) -> Result<DeadSelector, Error> {
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
            "invalid --aggregate `{text}`: expected TYPE:ID, e.g. order:42"
        ))),
    }
}

fn selector(selection: &DeadSelection) -> Result<DeadSelector, Error> {
    if let Some(event_id) = &selection.event_id {
        return Ok(DeadSelector::EventId(event_id.clone()));
    }
    if let Some(aggregate) = &selection.aggregate {
        return parse_aggregate(aggregate);
    }
    Ok(DeadSelector::All)
}

pub(super) async fn dead(action: DeadAction) -> Result<(), Error> {
    match action {
        DeadAction::List {
            database,
            event_id,
            aggregate,
            limit,
            json,
        } => {
            let selector = match (event_id, aggregate) {
                (Some(event_id), _) => DeadSelector::EventId(event_id),
                (None, Some(aggregate)) => parse_aggregate(&aggregate)?,
                (None, None) => DeadSelector::All,
            };
            let store = open_store(&database_url(&database)?, Connections::OnDemand).await?;
            let dead = store.list_dead(&selector, limit).await?;
            if json {
                let text = serde_json::to_string_pretty(&dead)?;
                println!("{text}");
            } else {
                for event in &dead {
                    println!(
                        "{} {} {} {}:{} topic={} attempts={} error={}",
                        event.id,
                        event.event_id,
                        event.event_type,
                        event.aggregate_type,
                        event.aggregate_id,
                        event.topic,
                        event.attempts,
                        event.last_error.as_deref().unwrap_or("-")
                    );
                }
                println!("{} dead event(s)", dead.len());
            }
            Ok(())
        }
        DeadAction::Retry {
            database,
            selection,
        } => {
            let selector = selector(&selection)?;
            let store = open_store(&database_url(&database)?, Connections::OnDemand).await?;
            let retried = store.retry_dead(&selector).await?;
            require_a_match(retried, &selector)?;
            println!("{retried} dead event(s) made pending again");
            Ok(())
        }
        DeadAction::Discard {
            database,
            selection,
        } => {
            let selector = selector(&selection)?;
            let store = open_store(&database_url(&database)?, Connections::OnDemand).await?;
            let discarded = store.discard_dead(&selector).await?;
            require_a_match(discarded, &selector)?;
            println!("{discarded} dead event(s) discarded");
            Ok(())
        }
    }
}

/// A `dead retry` or `dead discard` that names an event or an aggregate
/// and matched nothing is an error (a mistyped id, or an event that is not
/// dead); `--all` matching nothing is not.
fn require_a_match(matched: u64, selector: &DeadSelector) -> Result<(), Error> {
    if matched > 0 {
        return Ok(());
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
        DeadSelector::All => Ok(()),
    }
}
