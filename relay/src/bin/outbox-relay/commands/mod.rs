//! What each `outbox-relay` subcommand does, one file per subcommand:
//! `run.rs` (the relay), `status.rs`, `dead.rs`, `replay.rs`,
//! `recover_slot.rs`, `leave_logical.rs` and `ui.rs` (the operators'
//! page on its own); `migrate` is one statement, here.

mod dead;
mod leave_logical;
mod recover_slot;
mod replay;
mod run;
mod status;
mod ui;

use std::path::PathBuf;

use crate::args::{Command, DatabaseArgs, EventSourceArgs, UiTokenArgs};
use outbox_relay::admin::{RelayAdmin, ReplayRequest, ReplayTime};
use outbox_relay::config::{
    BrokerUrl, DatabaseUrl, EventSourceKind, RelayConfig, SlotName, UiTokens, resolve_broker_url,
    resolve_database_url,
};
use outbox_relay::error::Error;

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

/// The operators' page's tokens: `--ui-token`, `OUTBOX_UI_TOKEN` and
/// `--ui-token-file`, all of them.
fn ui_tokens(args: UiTokenArgs) -> Result<UiTokens, Error> {
    let mut tokens = UiTokens::default();
    for pair in &args.ui_token {
        tokens.add(pair)?;
    }
    if let Some(pairs) = environment("OUTBOX_UI_TOKEN") {
        tokens
            .add_pairs(&pairs)
            .map_err(|error| Error::InvalidArgument(format!("OUTBOX_UI_TOKEN: {error}")))?;
    }
    if let Some(path) = &args.ui_token_file {
        tokens.add_file(path)?;
    }
    Ok(tokens)
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
    config
        .logical_slot(database_url)?
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
            ui_tokens: token_args,
        } => {
            // Everything that can be wrong with the input is checked before
            // anything connects, let alone claims.
            let (database_url, broker_url, mut config) =
                relay_inputs(&database, broker.as_deref(), config)?;
            apply_event_source_args(&mut config, events);
            let slot = config.logical_slot(&database_url)?;
            let tokens = ui_tokens(token_args)?;
            let inputs = run::RunInputs {
                database_url,
                broker_url,
                config,
                slot,
                skip_migrate,
                tokens,
            };
            run::run(inputs).await
        }
        Command::Ui {
            database,
            listen,
            events,
            ui_tokens: token_args,
        } => {
            let database_url = database_url(&database)?;
            let mut config = RelayConfig::default();
            apply_event_source_args(&mut config, events);
            let slot = config.logical_slot(&database_url)?;
            let tokens = ui_tokens(token_args)?;
            ui::ui(database_url, listen, slot, tokens).await
        }
        Command::Migrate { database, events } => {
            let database_url = database_url(&database)?;
            let mut config = RelayConfig::default();
            apply_event_source_args(&mut config, events);
            let slot = config.logical_slot(&database_url)?;
            let admin = RelayAdmin::connect(database_url).await?;
            match slot {
                Some(slot) => {
                    admin.prepare_logical(&slot).await?;
                    println!(
                        "outbox schema is up to date; replication slot and publication `{slot}` exist"
                    );
                }
                None => {
                    admin.migrate().await?;
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
            config.logical_slot(&database_url)?;
            let admin = RelayAdmin::connect(database_url).await?;
            let report = admin.status(config.source).await?;
            status::print_status(&report, json)
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
            config.logical_slot(&database_url)?;
            let mut request = ReplayRequest::new(topic, ReplayTime::parse("--since", &since)?);
            if let Some(until) = until {
                request = request.until(ReplayTime::parse("--until", &until)?);
            }
            replay::run_replay(database_url, broker_url, config, request).await
        }
        Command::Dead { action } => dead::dead(action).await,
    }
}
