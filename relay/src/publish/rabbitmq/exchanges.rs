//! Exchange lookup before the first publish to an exchange: publishing to
//! a missing one makes RabbitMQ close the channel (404) and fail every
//! message in flight on it, so a passive declare on a throwaway channel
//! checks it first.

use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;

use futures::future::join_all;
use lapin::ExchangeKind;
use lapin::options::ExchangeDeclareOptions;
use lapin::types::{FieldTable, ShortString};

use super::RabbitMqPublisher;
use super::connection::{Session, close_channel};
use super::failure::{REPLY_NOT_FOUND, reply_code};
use crate::publish::PublishFailure;

impl RabbitMqPublisher {
    /// Look up every exchange of `exchanges` not known to exist yet; returns
    /// the failure of each exchange that cannot be published to.
    pub(super) async fn resolve_exchanges(
        &self,
        session: &Session,
        exchanges: HashSet<&str>,
    ) -> HashMap<String, PublishFailure> {
        let mut failures = HashMap::new();
        let unknown: Vec<&str> = {
            let known = self
                .exchanges
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // The default exchange always exists and cannot be declared.
            exchanges
                .into_iter()
                .filter(|exchange| !exchange.is_empty() && !known.contains(*exchange))
                .collect()
        };
        let lookups = unknown
            .iter()
            .map(|exchange| self.exchange_exists(session, exchange));
        let results = join_all(lookups).await;
        let mut cache = self
            .exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (exchange, result) in unknown.into_iter().zip(results) {
            match result {
                Ok(true) => {
                    cache.insert(exchange.to_owned());
                }
                Ok(false) => {
                    tracing::warn!(
                        exchange,
                        "rabbitmq exchange does not exist; its events are rejected"
                    );
                    failures.insert(exchange.to_owned(), missing_exchange_failure(exchange));
                }
                Err(failure) => {
                    failures.insert(exchange.to_owned(), failure);
                }
            }
        }
        failures
    }

    /// A passive declare of `exchange` on a throwaway channel (RabbitMQ
    /// closes the channel when the exchange does not exist).
    async fn exchange_exists(
        &self,
        session: &Session,
        exchange: &str,
    ) -> Result<bool, PublishFailure> {
        let Ok(name) = ShortString::try_new(exchange) else {
            return Err(PublishFailure::Rejected(format!(
                "rabbitmq exchange name is longer than 255 bytes: {exchange:.40}..."
            )));
        };
        let lookup = tokio::time::timeout(self.config.connect_timeout, async {
            let probe = session.connection.create_channel().await?;
            let options = ExchangeDeclareOptions {
                passive: true,
                ..ExchangeDeclareOptions::default()
            };
            let declared = probe
                .exchange_declare(name, ExchangeKind::Direct, options, FieldTable::default())
                .await;
            if declared.is_ok() {
                close_channel(&probe).await;
            }
            Ok::<Result<(), lapin::Error>, lapin::Error>(declared)
        })
        .await;
        match lookup {
            Ok(Ok(Ok(()))) => Ok(true),
            Ok(Ok(Err(error))) if reply_code(&error) == Some(REPLY_NOT_FOUND) => Ok(false),
            Ok(Ok(Err(error))) | Ok(Err(error)) => Err(PublishFailure::Unavailable(format!(
                "cannot look up rabbitmq exchange {exchange}: {error}"
            ))),
            Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
                "cannot look up rabbitmq exchange {exchange}: no answer within {} ms",
                self.config.connect_timeout.as_millis()
            ))),
        }
    }

    /// Look `exchange` up again before the next publish to it.
    pub(super) fn forget_exchange(&self, exchange: &str) {
        self.exchanges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(exchange);
    }
}

/// The failure of an event whose exchange does not exist.
pub(super) fn missing_exchange_failure(exchange: &str) -> PublishFailure {
    PublishFailure::Rejected(format!("rabbitmq exchange {exchange} does not exist"))
}
