//! What each `outbox-relay` subcommand does, one file per subcommand:
//! `run.rs` (the relay), `status.rs`, `dead.rs`, `replay.rs`,
//! `recover_slot.rs` and `leave_logical.rs`; `migrate` is one statement,
//! here.

mod dead;
mod leave_logical;
mod recover_slot;
mod replay;
mod run;
mod status;

use outbox_relay::error::Error;
use std::path::PathBuf;

use crate::args::{Command, DatabaseArgs, EventSourceArgs};
use outbox_relay::config::broker_url::{BrokerUrl, resolve_broker_url};
use outbox_relay::config::database_url::{DatabaseUrl, resolve_database_url};
use outbox_relay::config::open_store;
use outbox_relay::config::{EventSourceKind, RelayConfig};
use outbox_relay::operator::ReplayTime;
use outbox_relay::source::logical::SlotName;
use outbox_relay::store::{Connections, OperatorStore, PostgresStore};

pub(crate) fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn database_url(args: &DatabaseArgs) -> Result<DatabaseUrl, Error> {
    resolve_database_url(args.database_url.as_deref(), environment)
}

/// The database, the broker and the configuration of a command that
/// publishes, each resolved and checked.
fn relay_inputs(
    database: &DatabaseArgs,
    broker: Option<&str>,
    config: Option<PathBuf>,
) -> Result<(DatabaseUrl, BrokerUrl, RelayConfig), Error> {
    let database_url = database_url(database)?;
    let broker_url = resolve_broker_url(broker, environment)?;
    let config = match config {
        Some(path) => RelayConfig::load(path)?,
        None => RelayConfig::default(),
    };
    Ok((database_url, broker_url, config))
}

/// `--source` and `--slot` (or their variables) over the config file's.
fn apply_event_source_args(config: &mut RelayConfig, events: EventSourceArgs) {
    if let Some(source) = events.source {
        config.source = source;
    }
    if let Some(slot) = events.slot {
        config.slot = slot;
    }
}

/// The slot of `--source logical`, checked, or `None` when polling.
/// Refuses the logical source on a database other than PostgreSQL.
fn event_source_slot(
    database_url: &DatabaseUrl,
    config: &RelayConfig,
) -> Result<Option<SlotName>, Error> {
    if config.source != EventSourceKind::Logical {
        return Ok(None);
    }
    if !matches!(database_url, DatabaseUrl::Postgres(_)) {
        return Err(Error::Logical(format!(
            "--source logical needs PostgreSQL (logical decoding of the WAL); this database is {}: \
             use --source poll",
            database_url.backend()
        )));
    }
    SlotName::parse(&config.slot).map(Some)
}

/// The slot of a command that only makes sense for `--source logical`
/// (`recover-slot`, `leave-logical`): `--slot` or its fallbacks, checked,
/// on PostgreSQL only.
fn logical_slot(database_url: &DatabaseUrl, slot: Option<String>) -> Result<SlotName, Error> {
    let mut config = RelayConfig::default();
    apply_event_source_args(
        &mut config,
        EventSourceArgs {
            source: Some(EventSourceKind::Logical),
            slot,
        },
    );
    event_source_slot(database_url, &config)?
        .ok_or_else(|| Error::Logical("this command needs --source logical".to_owned()))
}

/// Run one subcommand to completion.
///
/// # Errors
/// Every failure, as one line naming the problem.
pub async fn execute(command: Command) -> Result<(), Error> {
    match command {
        Command::Run {
            database,
            broker,
            config,
            skip_migrate,
            events,
        } => {
            // Everything that can be wrong with the input is checked before
            // anything connects, let alone claims.
            let (database_url, broker_url, mut config) =
                relay_inputs(&database, broker.as_deref(), config)?;
            apply_event_source_args(&mut config, events);
            let slot = event_source_slot(&database_url, &config)?;
            run::run(database_url, broker_url, config, slot, skip_migrate).await
        }
        Command::Migrate { database, events } => {
            let database_url = database_url(&database)?;
            let mut config = RelayConfig::default();
            apply_event_source_args(&mut config, events);
            let slot = event_source_slot(&database_url, &config)?;
            match slot {
                Some(slot) => {
                    let store = PostgresStore::connect(database_url.as_str()).await?;
                    outbox_relay::source::logical::check_prerequisites(store.pool(), &slot).await?;
                    store.migrate().await?;
                    outbox_relay::source::logical::prepare(store.pool(), &slot).await?;
                    println!(
                        "outbox schema is up to date; replication slot and publication `{slot}` exist"
                    );
                }
                None => {
                    let store = open_store(&database_url, Connections::OnDemand).await?;
                    store.migrate().await?;
                    println!("outbox schema is up to date");
                }
            }
            Ok(())
        }
        Command::Status {
            database,
            json,
            source,
        } => {
            let database_url = database_url(&database)?;
            let mut config = RelayConfig::default();
            apply_event_source_args(&mut config, EventSourceArgs { source, slot: None });
            let logical = event_source_slot(&database_url, &config)?.is_some();
            let (status, slots, counts) = match &database_url {
                DatabaseUrl::Postgres(url) => {
                    let store = PostgresStore::connect(url).await?;
                    let mut status = store.status().await?;
                    let counts = if logical {
                        Some(
                            outbox_relay::operator::logical_status(store.pool(), &mut status)
                                .await?,
                        )
                    } else {
                        None
                    };
                    let slots = outbox_relay::source::logical::relay_slots(store.pool()).await?;
                    (status, slots, counts)
                }
                _ => (
                    open_store(&database_url, Connections::OnDemand)
                        .await?
                        .status()
                        .await?,
                    Vec::new(),
                    None,
                ),
            };
            status::print_status(&status, &slots, counts.as_ref(), json)
        }
        Command::RecoverSlot {
            database,
            slot,
            since,
        } => {
            let database_url = database_url(&database)?;
            let since = ReplayTime::parse("--since", &since)?;
            let slot = logical_slot(&database_url, slot)?;
            recover_slot::recover_slot(&database_url, &slot, since).await
        }
        Command::LeaveLogical { database, slot } => {
            let database_url = database_url(&database)?;
            let slot = logical_slot(&database_url, slot)?;
            leave_logical::leave_logical(&database_url, &slot).await
        }
        Command::Replay {
            database,
            broker,
            config,
            topic,
            since,
            until,
            events,
        } => {
            // As for `run`: every input is checked before anything connects.
            let (database_url, broker_url, mut config) =
                relay_inputs(&database, broker.as_deref(), config)?;
            apply_event_source_args(&mut config, events);
            let slot = event_source_slot(&database_url, &config)?;
            let since = ReplayTime::parse("--since", &since)?;
            let until = until
                .map(|text| ReplayTime::parse("--until", &text))
                .transpose()?;
            let request = replay::ReplayRequest {
                topic: &topic,
                since,
                until,
            };
            replay::run_replay(database_url, broker_url, config, slot, request).await
        }
        Command::Dead { action } => dead::dead(action).await,
    }
}
