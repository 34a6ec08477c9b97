//! [`RelayServiceBuilder`]: what a [`RelayService`] is built from.

use std::sync::Arc;

use crate::batch::RelayMetrics;
use crate::config::{BrokerUrl, EventSourceKind, RelayConfig};
use crate::error::Error;
use crate::http::ui::UiTokens;
use crate::publish::Publisher;
use crate::service::{RelayDatabase, RelayService};
use crate::source::SlotName;

/// The broker a [`RelayService`] publishes to: a URL, built with the
/// `[kafka]` and `[rabbitmq]` settings of its [`RelayConfig`], or a
/// publisher built beforehand.
#[derive(Clone)]
#[non_exhaustive]
pub enum RelayBroker {
    /// A checked broker URL.
    Url(BrokerUrl),
    /// A publisher of the service's own making.
    Publisher(Arc<dyn Publisher>),
}

impl std::fmt::Debug for RelayBroker {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayBroker::Url(url) => formatter.debug_tuple("Url").field(url).finish(),
            RelayBroker::Publisher(_) => formatter.write_str("Publisher(..)"),
        }
    }
}

impl From<BrokerUrl> for RelayBroker {
    fn from(url: BrokerUrl) -> Self {
        RelayBroker::Url(url)
    }
}

impl From<Arc<dyn Publisher>> for RelayBroker {
    fn from(publisher: Arc<dyn Publisher>) -> Self {
        RelayBroker::Publisher(publisher)
    }
}

/// Builds a [`RelayService`]: a database and a broker are required; the
/// settings default to [`RelayConfig::default`] (polling), the metrics to
/// a registry of the relay's own; the HTTP endpoint is off and migrations
/// on.
#[derive(Debug, Default)]
#[must_use]
pub struct RelayServiceBuilder {
    database: Option<RelayDatabase>,
    broker: Option<RelayBroker>,
    config: Option<RelayConfig>,
    source: Option<EventSourceKind>,
    slot: Option<SlotName>,
    metrics: Option<Arc<RelayMetrics>>,
    serve_http: bool,
    ui_tokens: UiTokens,
    skip_migrate: bool,
}

impl RelayServiceBuilder {
    /// The database: a [`DatabaseUrl`](crate::DatabaseUrl) or a pool.
    pub fn database(mut self, database: impl Into<RelayDatabase>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The broker: a [`BrokerUrl`] or an `Arc<dyn Publisher>`.
    pub fn broker(mut self, broker: impl Into<RelayBroker>) -> Self {
        self.broker = Some(broker.into());
        self
    }

    /// The settings, as `outbox-relay`'s TOML file gives them
    /// ([`RelayConfig::load`], [`RelayConfig::from_toml_str`]).
    pub fn config(mut self, config: RelayConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// Where events come from, over the config's `source`:
    /// [`EventSourceKind::Poll`] or [`EventSourceKind::Logical`].
    pub fn source(mut self, source: EventSourceKind) -> Self {
        self.source = Some(source);
        self
    }

    /// The replication slot of the logical source, over the config's
    /// `slot`.
    pub fn slot(mut self, slot: SlotName) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The metrics to record into, for a service that renders them on an
    /// endpoint of its own.
    pub fn metrics(mut self, metrics: Arc<RelayMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Serve `/healthz`, `/readyz` and `/metrics` on the config's
    /// `[http] listen` address, as `outbox-relay run` does. Off by default.
    pub fn serve_http(mut self, serve: bool) -> Self {
        self.serve_http = serve;
        self
    }

    /// The named tokens the operators' page (`/ui`, served with the HTTP
    /// endpoint) accepts for its actions; without any, the page is
    /// read-only.
    pub fn ui_tokens(mut self, tokens: UiTokens) -> Self {
        self.ui_tokens = tokens;
        self
    }

    /// Leave the schema as it is instead of applying the missing outbox
    /// migrations at start.
    pub fn skip_migrate(mut self, skip: bool) -> Self {
        self.skip_migrate = skip;
        self
    }

    /// The relay, checked.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a database or a broker, for the
    /// logical source on a pool (it needs a URL), or for a bad slot name;
    /// [`Error::Logical`] for the logical source on a database other than
    /// PostgreSQL; [`Error::FeatureNotBuilt`] for the logical source
    /// without the `logical` feature.
    pub fn build(self) -> Result<RelayService, Error> {
        let database = self.database.ok_or_else(|| {
            Error::InvalidArgument(
                "the relay needs a database: call .database(url or pool)".to_owned(),
            )
        })?;
        let broker = self.broker.ok_or_else(|| {
            Error::InvalidArgument(
                "the relay needs a broker: call .broker(url or publisher)".to_owned(),
            )
        })?;
        let mut config = self.config.unwrap_or_default();
        if let Some(source) = self.source {
            config.source = source;
        }
        if let Some(slot) = self.slot {
            config.slot = slot.as_str().to_owned();
        }
        if config.source == EventSourceKind::Logical {
            Error::require_feature("logical", cfg!(feature = "logical"), || {
                "the logical source".to_owned()
            })?;
            match &database {
                RelayDatabase::Url(url) => {
                    config.logical_slot(url)?;
                }
                #[allow(unreachable_patterns)]
                _ => {
                    return Err(Error::InvalidArgument(
                        "the logical source opens a replication connection of its own: give \
                         the database as a URL, not a pool"
                            .to_owned(),
                    ));
                }
            }
        }
        Ok(RelayService {
            database,
            broker,
            config,
            metrics: self
                .metrics
                .unwrap_or_else(|| Arc::new(RelayMetrics::new())),
            serve_http: self.serve_http,
            ui_tokens: self.ui_tokens,
            migrate: !self.skip_migrate,
        })
    }
}
