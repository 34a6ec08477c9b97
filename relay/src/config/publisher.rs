//! Build the publisher a `--broker` URL names, configured from the TOML.

use std::sync::Arc;

use crate::config::RelayConfig;
use crate::config::broker_url::BrokerUrl;
use crate::error::Error;
use crate::publish::Publisher;
#[cfg(feature = "kafka")]
use crate::publish::kafka::{KafkaPublisher, KafkaPublisherConfig};
#[cfg(feature = "nats")]
use crate::publish::nats::{NatsCredentials, NatsPublisher, NatsPublisherConfig};
#[cfg(feature = "rabbitmq")]
use crate::publish::rabbitmq::{RabbitMqPublisher, RabbitMqPublisherConfig};
#[cfg(feature = "redis")]
use crate::publish::redis::{
    RedisEndpoint, RedisPublisher, RedisPublisherConfig, RedisStream, StreamTrim,
};
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
    not(any(
        feature = "kafka",
        feature = "rabbitmq",
        feature = "redis",
        feature = "nats"
    )),
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
            let connecting = Arc::clone(&publisher);
            connect_in_background(tasks, "rabbitmq", async move { connecting.connect().await });
            Ok(publisher)
        }
        #[cfg(feature = "redis")]
        BrokerUrl::Redis { url } => build_redis(RedisEndpoint::Server(url.clone()), config, tasks),
        #[cfg(feature = "redis")]
        BrokerUrl::RedisCluster { nodes } => {
            build_redis(RedisEndpoint::Cluster(nodes.clone()), config, tasks)
        }
        #[cfg(feature = "nats")]
        BrokerUrl::Nats { servers } => build_nats(servers.clone(), config, tasks),
        // A broker this build lacks; `check_built` refused it above.
        #[allow(unreachable_patterns)]
        _ => Err(Error::FeatureNotBuilt {
            feature: broker.feature(),
            needed_for: format!("--broker {broker}"),
        }),
    }
}

/// The Redis Streams publisher of `endpoint`, configured from `[redis]`.
#[cfg(feature = "redis")]
fn build_redis(
    endpoint: RedisEndpoint,
    config: &RelayConfig,
    tasks: &Tasks,
) -> Result<Arc<dyn Publisher>, Error> {
    let mut redis = RedisPublisherConfig::new(endpoint);
    redis.response_timeout = config.redis.response_timeout;
    redis.connect_timeout = config.redis.connect_timeout;
    for (topic, stream) in &config.redis.streams {
        let key = stream.stream_key().map_err(|reason| Error::Config {
            path: "--config".to_owned(),
            reason: format!("redis.streams.{topic:?}.key: {reason}"),
        })?;
        let mut settings = RedisStream::new(key).partitions(stream.partitions.unwrap_or(1));
        if let Some(length) = stream.maxlen {
            settings = settings.trim(StreamTrim::MaxLen(length));
        }
        if let Some(age) = stream.max_age {
            settings = settings.trim(StreamTrim::MaxAge(age));
        }
        redis.streams.insert(topic.clone(), settings);
    }
    let publisher = Arc::new(RedisPublisher::new(redis)?);
    let connecting = Arc::clone(&publisher);
    connect_in_background(tasks, "redis", async move { connecting.connect().await });
    Ok(publisher)
}

/// The NATS JetStream publisher of `servers`, configured from `[nats]`.
#[cfg(feature = "nats")]
fn build_nats(
    servers: Vec<String>,
    config: &RelayConfig,
    tasks: &Tasks,
) -> Result<Arc<dyn Publisher>, Error> {
    let settings = &config.nats;
    let mut nats = NatsPublisherConfig::new(servers);
    nats.ack_timeout = settings.ack_timeout;
    nats.connect_timeout = settings.connect_timeout;
    nats.tls_ca_file.clone_from(&settings.tls_ca_file);
    nats.credentials = match (
        &settings.user,
        &settings.password,
        &settings.token,
        &settings.creds_file,
    ) {
        (Some(user), Some(password), _, _) => NatsCredentials::UserPassword {
            user: user.clone(),
            password: password.clone(),
        },
        (_, _, Some(token), _) => NatsCredentials::Token(token.clone()),
        (_, _, _, Some(path)) => NatsCredentials::CredsFile(path.clone()),
        _ => NatsCredentials::None,
    };
    for (topic, subject) in &settings.subjects {
        let template = subject.subject_template().map_err(|reason| Error::Config {
            path: "--config".to_owned(),
            reason: format!("nats.subjects.{topic:?}.subject: {reason}"),
        })?;
        nats.subjects.insert(topic.clone(), template);
    }
    let publisher = Arc::new(NatsPublisher::new(nats)?);
    let connecting = Arc::clone(&publisher);
    connect_in_background(tasks, "nats", async move { connecting.connect().await });
    Ok(publisher)
}

/// Connect in the background: a broker that is down at start only delays
/// the first publish, which connects again.
#[cfg(any(feature = "rabbitmq", feature = "redis", feature = "nats"))]
fn connect_in_background(
    tasks: &Tasks,
    broker: &'static str,
    connect: impl std::future::Future<Output = Result<(), crate::publish::PublishFailure>>
    + Send
    + 'static,
) {
    let stop = tasks.stop_token();
    tasks.spawn(async move {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            connected = connect => connected,
        };
        if let Err(error) = connected {
            tracing::warn!(
                %error,
                broker,
                "the broker is not reachable yet; the first publish connects again"
            );
        }
    });
}
