//! Starting a [`RelayService`]: the HTTP endpoint bound first, the
//! publisher connecting while the store and the source open, then the
//! batch loop spawned.

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::batch::{DispatchTotals, PublishHealth};
use crate::config::{EventSourceKind, build_publisher, relay_settings};
use crate::error::Error;
use crate::event::Wakeup;
use crate::http::ui::PageSettings;
use crate::http::{HttpEndpoint, HttpState};
use crate::operator::{BacklogSource, TableBacklog};
use crate::publish::Publisher;
use crate::relay::Relay;
use crate::service::RelayBroker;
use crate::service::RelayService;
#[cfg(feature = "logical")]
use crate::service::logical;
#[cfg(feature = "logical")]
use crate::source::OutboxStore;
use crate::store::Connections;
use crate::tasks::Tasks;

/// A started relay: its batch loop's task and the tasks that stop it, the
/// HTTP endpoint's task and its tasks (when it serves one), and the slot's
/// watch (logical source).
pub(super) struct Running {
    pub(super) relay_task: JoinHandle<Result<DispatchTotals, Error>>,
    pub(super) relay: Tasks,
    pub(super) http: Option<(JoinHandle<()>, Tasks)>,
    pub(super) slot_watch: Option<JoinHandle<Result<(), Error>>>,
}

/// Everything before the relay runs: bind the endpoint, open the source,
/// the publisher and the store, and spawn the batch loop.
pub(super) async fn start(service: RelayService, tasks: &Tasks) -> Result<Running, Error> {
    let RelayService {
        database,
        broker,
        config,
        metrics,
        serve_http,
        ui_tokens,
        migrate,
    } = service;
    let relay_id = config.instance_id.clone().unwrap_or_else(default_relay_id);
    // The page's token file is read before anything connects: a bad line
    // is a configuration error.
    let mut ui_tokens = ui_tokens;
    if let Some(path) = config.ui.token_file.as_ref().filter(|_| config.ui.enabled) {
        ui_tokens.add_file(path)?;
    }
    // Bind first: a taken port is a configuration error, reported before
    // anything connects or is claimed.
    let endpoint = match serve_http {
        true => Some(HttpEndpoint::bind(config.http.listen).await?),
        false => None,
    };
    // The publisher connects in the background while the database is
    // opened and checked: start-up takes the longer of the two, not their
    // sum.
    let broker_name = match &broker {
        RelayBroker::Url(url) => url.to_string(),
        RelayBroker::Publisher(_) => "a publisher of the service's".to_owned(),
    };
    let publisher: Arc<dyn Publisher> = match broker {
        RelayBroker::Url(url) => build_publisher(&url, &config, tasks).await?,
        RelayBroker::Publisher(publisher) => publisher,
    };
    let database_name = database.label();
    #[cfg(feature = "logical")]
    let logical = match config.source {
        EventSourceKind::Logical => Some(logical::open(&database, &config, migrate).await?),
        EventSourceKind::Poll => None,
    };
    #[cfg(not(feature = "logical"))]
    if config.source == EventSourceKind::Logical {
        return Err(Error::FeatureNotBuilt {
            feature: "logical",
            needed_for: "the logical source".to_owned(),
        });
    }
    #[cfg(feature = "logical")]
    let store = match &logical {
        Some(opened) => Arc::clone(&opened.postgres) as Arc<dyn OutboxStore>,
        None => {
            database
                .open_polling_store(Connections::KeptOpen, migrate)
                .await?
        }
    };
    #[cfg(not(feature = "logical"))]
    let store = database
        .open_polling_store(Connections::KeptOpen, migrate)
        .await?;
    // On the logical source, streamed and published rows stay `pending`:
    // its gauges count only what it has not published.
    #[cfg(feature = "logical")]
    let backlog: Arc<dyn BacklogSource> = match &logical {
        Some(opened) => Arc::clone(&opened.source) as Arc<dyn BacklogSource>,
        None => Arc::new(TableBacklog(Arc::clone(&store))),
    };
    #[cfg(not(feature = "logical"))]
    let backlog: Arc<dyn BacklogSource> = Arc::new(TableBacklog(Arc::clone(&store)));
    let health = Arc::new(PublishHealth::new(config.effective_handover_after()));
    let page = PageSettings {
        tokens: ui_tokens,
        #[cfg(feature = "logical")]
        slot: match &logical {
            Some(opened) => config
                .logical_slot_on("postgres")?
                .map(|slot| (opened.postgres.pool().clone(), slot)),
            None => None,
        },
    };
    // The endpoint stops after the relay: `/metrics` and `/readyz` answer
    // while the batch in flight finishes.
    let http_tasks = tasks.child();
    let http = endpoint.map(|endpoint| {
        let task = endpoint.serve(
            HttpState {
                store: Arc::clone(&store),
                backlog,
                publisher: Arc::clone(&publisher),
                metrics: Arc::clone(&metrics),
                health: Arc::clone(&health),
                page: config.ui.enabled.then_some(page),
            },
            &http_tasks,
        );
        (task, http_tasks.clone())
    });
    tracing::info!(
        relay_id = %relay_id,
        database = %database_name,
        broker = %broker_name,
        "outbox relay ready"
    );

    let relay_tasks = tasks.child();
    let wakeup = Wakeup::new();
    #[cfg_attr(not(feature = "logical"), allow(unused_mut))]
    let mut settings = relay_settings(relay_id, &config);
    #[cfg(feature = "logical")]
    let logical_retention = match &logical {
        // Under the logical source, published events stay `pending`: its
        // own retention deletes them once the slot has confirmed them.
        Some(_) => settings.retention.take(),
        None => None,
    };
    let relay = Relay::new(Arc::clone(&store), publisher, settings)
        .with_wakeup(wakeup.clone())
        .with_metrics(Arc::clone(&metrics))
        .with_publish_health(health)
        .with_tasks(relay_tasks.clone());
    #[cfg(feature = "logical")]
    let (relay, slot_watch) = match logical {
        Some(opened) => {
            let beside = logical::Beside {
                metrics,
                retention: logical_retention,
                tasks: http_tasks.child(),
            };
            let (relay, slot_watch) =
                logical::attach(relay, opened, &store, beside, wakeup, &relay_tasks);
            (relay, Some(slot_watch))
        }
        None => {
            store.watch_commits(wakeup, &relay_tasks);
            (relay, None)
        }
    };
    #[cfg(not(feature = "logical"))]
    let (relay, slot_watch) = {
        let _ = metrics;
        store.watch_commits(wakeup, &relay_tasks);
        (relay, None)
    };
    let relay_task = relay_tasks.spawn(relay.run(relay_tasks.stop_token()));
    Ok(Running {
        relay_task,
        relay: relay_tasks,
        http,
        slot_watch,
    })
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
