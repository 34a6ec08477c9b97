//! Build the publisher a `--broker` URL names, configured from the TOML.

use std::sync::Arc;

use crate::config::RelayConfig;
use crate::config::broker_url::BrokerUrl;
use crate::error::Error;
use crate::publish::Publisher;
#[cfg(feature = "kafka")]
use crate::publish::kafka::{KafkaPublisher, KafkaPublisherConfig};
#[cfg(feature = "rabbitmq")]
use crate::publish::rabbitmq::{RabbitMqPublisher, RabbitMqPublisherConfig};
use crate::publish::stdout::StdoutPublisher;
use crate::tasks::Tasks;

/// The publisher for `broker`. Client options are checked here, before the
/// relay claims anything.
///
/// # Errors
/// A client option the broker client rejects, or a broker it cannot reach;
/// [`Error::FeatureNotBuilt`] for a broker this build was compiled without.
///
/// The publisher's background work runs on `tasks`.
#[cfg_attr(
    not(any(feature = "kafka", feature = "rabbitmq")),
    allow(unused_variables)
)]
pub async fn build_publisher(
    broker: &BrokerUrl,
    config: &RelayConfig,
    tasks: &Tasks,
) -> Result<Arc<dyn Publisher>, Error> {
    broker.check_built()?;
    match broker {
        BrokerUrl::Stdout => Ok(Arc::new(StdoutPublisher::new())),
        #[cfg(feature = "kafka")]
        BrokerUrl::Kafka { brokers } => {
            let mut kafka = KafkaPublisherConfig::new(brokers.clone());
            kafka.message_timeout = config.kafka.message_timeout;
            kafka.create_missing_topics = config.kafka.create_missing_topics;
            kafka.new_topic_partitions = config.kafka.new_topic_partitions;
            kafka.new_topic_replication_factor = config.kafka.new_topic_replication_factor;
            kafka.client_options = config.kafka.options.clone();
            Ok(Arc::new(
                KafkaPublisher::new(kafka)?.with_tasks(tasks.clone()),
            ))
        }
        #[cfg(feature = "rabbitmq")]
        BrokerUrl::Amqp { url } => {
            let mut amqp = RabbitMqPublisherConfig::new(url.clone());
            amqp.confirm_timeout = config.amqp.confirm_timeout;
            amqp.connect_timeout = config.amqp.connect_timeout;
            amqp.default_routing_key = config.amqp.default_routing_key.clone();
            amqp.routing_keys = config
                .amqp
                .routing
                .iter()
                .map(|(topic, route)| (topic.clone(), route.routing_key.clone()))
                .collect();
            let publisher = Arc::new(RabbitMqPublisher::new(amqp)?.with_tasks(tasks.clone()));
            // Connect in the background: a broker that is down at start
            // only delays the first publish, which connects again.
            let connecting = Arc::clone(&publisher);
            let stop = tasks.stop_token();
            tasks.spawn(async move {
                let connected = tokio::select! {
                    () = stop.cancelled() => return,
                    connected = connecting.connect() => connected,
                };
                if let Err(error) = connected {
                    tracing::warn!(
                        %error,
                        "rabbitmq is not reachable yet; the first publish connects again"
                    );
                }
            });
            Ok(publisher)
        }
        // A broker this build lacks; `check_built` refused it above.
        #[allow(unreachable_patterns)]
        _ => Err(Error::FeatureNotBuilt {
            feature: broker.feature(),
            needed_for: format!("--broker {broker}"),
        }),
    }
}
