//! What each `outbox-relay` subcommand does.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::broker_url::{BrokerUrl, resolve_broker_url};
use crate::cli::{Command, DatabaseArgs, DeadAction, DeadSelection};
use crate::config::{DeadLetterPolicy, RelayConfig};
use crate::database_url::{DatabaseUrl, resolve_database_url};
use crate::http::{HttpEndpoint, HttpState};
use crate::metrics::RelayMetrics;
use crate::publish::Publisher;
use crate::publish_health::PublishHealth;
use crate::publishers::build_publisher;
use crate::replay::{ReplayTime, replay, resolve_window};
use crate::store::{DeadSelector, LiveLease, OutboxStatus, open_store};
use crate::wakeup::Wakeup;
use crate::{DispatchSettings, Error, Relay, RelaySettings, RetentionSettings, RetryPolicy};

fn environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn database_url(args: &DatabaseArgs) -> Result<DatabaseUrl, Error> {
    resolve_database_url(args.database_url.as_deref(), environment)
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
        } => {
            // Everything that can be wrong with the input is checked before
            // anything connects, let alone claims.
            let database_url = database_url(&database)?;
            let broker_url = resolve_broker_url(broker.as_deref(), environment)?;
            let config = match config {
                Some(path) => RelayConfig::load(path)?,
                None => RelayConfig::default(),
            };
            run(database_url, broker_url, config, skip_migrate).await
        }
        Command::Migrate { database } => {
            let store = open_store(&database_url(&database)?).await?;
            store.migrate().await?;
            println!("outbox schema is up to date");
            Ok(())
        }
        Command::Status { database, json } => {
            let store = open_store(&database_url(&database)?).await?;
            let status = store.status().await?;
            print_status(&status, json)
        }
        Command::Replay {
            database,
            broker,
            config,
            topic,
            since,
            until,
        } => {
            // As for `run`: every input is checked before anything connects.
            let database_url = database_url(&database)?;
            let broker_url = resolve_broker_url(broker.as_deref(), environment)?;
            let config = match config {
                Some(path) => RelayConfig::load(path)?,
                None => RelayConfig::default(),
            };
            let since = ReplayTime::parse("--since", &since)?;
            let until = until
                .map(|text| ReplayTime::parse("--until", &text))
                .transpose()?;
            run_replay(database_url, broker_url, config, &topic, since, until).await
        }
        Command::Dead { action } => dead(action).await,
    }
}

async fn run_replay(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    topic: &str,
    since: ReplayTime,
    until: Option<ReplayTime>,
) -> Result<(), Error> {
    let store = open_store(&database_url).await?;
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
        i64::from(config.batch_size),
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

async fn run(
    database_url: DatabaseUrl,
    broker_url: BrokerUrl,
    config: RelayConfig,
    skip_migrate: bool,
) -> Result<(), Error> {
    let relay_id = config.instance_id.clone().unwrap_or_else(default_relay_id);
    // Bind first: a taken port is a configuration error, reported before
    // anything connects or is claimed.
    let endpoint = HttpEndpoint::bind(config.http.listen).await?;
    let publisher: Arc<dyn Publisher> = build_publisher(&broker_url, &config).await?;
    let store = open_store(&database_url).await?;
    if !skip_migrate {
        store.migrate().await?;
    }
    let metrics = Arc::new(RelayMetrics::new());
    let health = Arc::new(PublishHealth::new(config.effective_handover_after()));
    let http_stop = CancellationToken::new();
    let http_task = endpoint.serve(
        HttpState {
            store: Arc::clone(&store),
            publisher: Arc::clone(&publisher),
            metrics: Arc::clone(&metrics),
            health: Arc::clone(&health),
        },
        http_stop.clone(),
    );
    tracing::info!(
        relay_id = %relay_id,
        database = %database_url,
        broker = %broker_url,
        "outbox relay ready"
    );

    let stop = CancellationToken::new();
    let wakeup = Wakeup::new();
    store.watch_commits(wakeup.clone(), stop.clone());
    let settings = relay_settings(relay_id, &config);
    let relay = Relay::new(Arc::clone(&store), publisher, settings)
        .with_wakeup(wakeup)
        .with_metrics(metrics)
        .with_publish_health(health);
    let mut relay_task = tokio::spawn(relay.run(stop.clone()));

    tokio::select! {
        signalled = wait_for_signal() => signalled?,
        // The relay ends on its own only when it cannot start.
        ended = &mut relay_task => {
            http_stop.cancel();
            stop_http_endpoint(http_task).await;
            return match ended {
                Ok(result) => result.map(|_| ()),
                Err(join_error) => Err(Error::Shutdown(format!("the relay task failed: {join_error}"))),
            };
        }
    }
    tracing::info!("stop requested; finishing the batch in flight");
    stop.cancel();
    let stopped = tokio::time::timeout(config.shutdown_timeout, relay_task).await;
    http_stop.cancel();
    stop_http_endpoint(http_task).await;
    match stopped {
        Ok(Ok(result)) => result.map(|_| ()),
        Ok(Err(join_error)) => Err(Error::Shutdown(format!(
            "the relay task failed: {join_error}"
        ))),
        Err(_) => {
            tracing::warn!(
                timeout_ms = config.shutdown_timeout.as_millis() as u64,
                "graceful stop timed out; leases expire on their own"
            );
            Err(Error::Shutdown(format!(
                "graceful stop did not finish within {} ms",
                config.shutdown_timeout.as_millis()
            )))
        }
    }
}

/// Wait briefly for the HTTP endpoint to close its connections, then drop
/// whatever a scraper still holds open.
async fn stop_http_endpoint(task: tokio::task::JoinHandle<()>) {
    let abort = task.abort_handle();
    match tokio::time::timeout(HTTP_STOP_TIMEOUT, task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "the http endpoint task failed"),
        Err(_) => abort.abort(),
    }
}

/// How long a stop waits for the HTTP endpoint's open connections.
const HTTP_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The relay's settings from its configuration.
pub fn relay_settings(relay_id: String, config: &RelayConfig) -> RelaySettings {
    RelaySettings {
        relay_id,
        lease_duration: config.lease_duration,
        dispatch: DispatchSettings {
            batch_size: i64::from(config.batch_size),
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
        },
        retention: config.retention.enabled.then(|| RetentionSettings {
            keep_published: config.retention.published,
            interval: config.retention.interval,
            batch_size: i64::from(config.retention.batch_size),
        }),
    }
}

/// `host-pid-random`: unique per process, readable in `outbox_partitions`.
fn default_relay_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "relay".to_owned());
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    format!(
        "{host}-{}-{}",
        std::process::id(),
        &suffix[suffix.len() - 6..]
    )
}

/// Wait for SIGTERM or SIGINT.
async fn wait_for_signal() -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!(signal = "SIGTERM", "signal received"),
        _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "signal received"),
    }
    Ok(())
}

fn print_status(status: &OutboxStatus, json: bool) -> Result<(), Error> {
    if json {
        let text = serde_json::to_string_pretty(status)?;
        println!("{text}");
        return Ok(());
    }
    let oldest = match (status.oldest_pending_at, status.oldest_pending_age_seconds) {
        (Some(time), Some(age)) => format!("{} ({age}s ago)", time.to_rfc3339()),
        (Some(time), None) => time.to_rfc3339(),
        _ => "-".to_owned(),
    };
    println!("pending:            {}", status.pending);
    println!("  waiting to retry: {}", status.retrying);
    println!(
        "  in flight:        {} (due now, in a partition with a live lease)",
        status.in_flight
    );
    println!("dead:               {}", status.dead);
    println!("published (kept):   {}", status.published);
    println!("oldest pending:     {oldest}");
    println!(
        "leased partitions:  {}/{}",
        status.leased_partitions, status.partitions
    );
    println!("live relays:        {}", status.live_relays);
    if !status.topics.is_empty() {
        let width = status
            .topics
            .iter()
            .map(|topic| topic.topic.len())
            .max()
            .unwrap_or(0)
            .max("topic".len());
        println!();
        println!(
            "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9}",
            "topic", "pending", "retrying", "dead", "published"
        );
        for topic in &status.topics {
            println!(
                "{:<width$}  {:>9}  {:>9}  {:>9}  {:>9}",
                topic.topic, topic.pending, topic.retrying, topic.dead, topic.published
            );
        }
    }
    println!();
    if status.leases.is_empty() {
        println!("live leases:        none");
    } else {
        println!("live leases:");
        for (owner, leases) in leases_by_owner(&status.leases) {
            let partitions: Vec<String> = leases
                .iter()
                .map(|lease| lease.partition_no.to_string())
                .collect();
            let first_expiry = leases
                .iter()
                .map(|lease| lease.expires_at)
                .min()
                .map(|time| time.to_rfc3339())
                .unwrap_or_default();
            println!(
                "  {owner}: {} partition(s) [{}], first expiry {first_expiry}",
                leases.len(),
                partitions.join(", ")
            );
        }
    }
    Ok(())
}

/// Leases grouped by owner, owners by name, each owner's by partition.
fn leases_by_owner(leases: &[LiveLease]) -> std::collections::BTreeMap<&str, Vec<&LiveLease>> {
    let mut grouped: std::collections::BTreeMap<&str, Vec<&LiveLease>> =
        std::collections::BTreeMap::new();
    for lease in leases {
        grouped.entry(lease.owner.as_str()).or_default().push(lease);
    }
    grouped
}

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

async fn dead(action: DeadAction) -> Result<(), Error> {
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
            let store = open_store(&database_url(&database)?).await?;
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
            let store = open_store(&database_url(&database)?).await?;
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
            let store = open_store(&database_url(&database)?).await?;
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
