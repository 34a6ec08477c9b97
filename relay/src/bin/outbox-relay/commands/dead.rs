//! `outbox-relay dead list|retry|discard`: dead events, by event id,
//! aggregate or all.

use super::database_url;
use crate::args::{DeadAction, DeadSelection};
use outbox_relay::admin::{DeadSelector, RelayAdmin};
use outbox_relay::error::Error;

/// `--aggregate TYPE:ID`.
fn parse_aggregate(text: &str) -> Result<DeadSelector, Error> {
    DeadSelector::aggregate(text).map_err(|_| {
        Error::InvalidArgument(format!(
            "invalid --aggregate `{text}`: expected TYPE:ID, e.g. order:42"
        ))
    })
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
            let admin = RelayAdmin::connect(database_url(&database)?).await?;
            let dead = admin.dead_events(&selector, limit).await?;
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
            let admin = RelayAdmin::connect(database_url(&database)?).await?;
            let retried = admin.retry_dead(&selector).await?;
            println!("{retried} dead event(s) made pending again");
            Ok(())
        }
        DeadAction::Discard {
            database,
            selection,
        } => {
            let selector = selector(&selection)?;
            let admin = RelayAdmin::connect(database_url(&database)?).await?;
            let discarded = admin.discard_dead(&selector).await?;
            println!("{discarded} dead event(s) discarded");
            Ok(())
        }
    }
}
