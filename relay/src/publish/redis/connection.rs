//! The publisher's connection: one multiplexed connection to a server, or
//! the cluster client's connection, numbered by generation so that a send
//! on a replacement waits for the sends of the one it replaced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, RedisError};

use super::config::{RedisEndpoint, RedisPublisherConfig};
use crate::publish::PublishFailure;
use crate::publish::client_slot::SlotClient;

/// Requests a connection may hold before they are written: far more than
/// the sends the relay keeps in flight, so that handing a pipeline over
/// never waits for room.
const PIPELINE_BUFFER: usize = 4096;

/// A live link to Redis.
#[derive(Clone)]
pub(super) enum Link {
    /// One server, over one multiplexed connection: pipelines are written
    /// in the order they are handed over, and answered in that order.
    Server(MultiplexedConnection),
    /// A cluster: one pipeline per slot, routed by the client.
    Cluster(ClusterConnection),
}

/// One connection and its generation.
pub(super) struct Session {
    pub(super) link: Link,
    /// Grows with every connection the publisher opens.
    pub(super) generation: u64,
    /// Set once a send on it failed for want of the connection: the next
    /// send opens a new one.
    broken: AtomicBool,
}

impl SlotClient for Session {
    fn is_live(&self) -> bool {
        !self.is_broken()
    }
}

impl Session {
    pub(super) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    pub(super) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Relaxed);
    }

    /// Whether this is a cluster's connection.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }
}

/// Open a connection for `config` and check that Redis answers a `PING`,
/// all within `connect_timeout` plus `response_timeout`.
pub(super) async fn open(
    config: &RedisPublisherConfig,
    generation: u64,
) -> Result<Session, PublishFailure> {
    let bound = config.connect_timeout + config.response_timeout;
    #[cfg(feature = "tls")]
    crate::publish::tls_provider::use_ring_for_tls();
    let opening = async {
        let mut link = match &config.endpoint {
            RedisEndpoint::Server(url) => {
                let client = redis::Client::open(url.as_str())?;
                let settings = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(Some(config.response_timeout))
                    .set_pipeline_buffer_size(PIPELINE_BUFFER);
                Link::Server(
                    client
                        .get_multiplexed_async_connection_with_config(&settings)
                        .await?,
                )
            }
            RedisEndpoint::Cluster(nodes) => {
                let client = redis::cluster::ClusterClientBuilder::new(nodes.clone())
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.response_timeout)
                    .retries(2)
                    .build()?;
                Link::Cluster(client.get_async_connection().await?)
            }
        };
        ping(&mut link).await?;
        Ok::<_, RedisError>(link)
    };
    match tokio::time::timeout(bound, opening).await {
        Ok(Ok(link)) => Ok(Session {
            link,
            generation,
            broken: AtomicBool::new(false),
        }),
        Ok(Err(error)) => Err(PublishFailure::Unavailable(format!(
            "cannot connect to redis at {}: {error}",
            config.endpoint.masked()
        ))),
        Err(_elapsed) => Err(PublishFailure::Unavailable(format!(
            "redis at {} did not answer within {}",
            config.endpoint.masked(),
            humanize(bound)
        ))),
    }
}

async fn ping(link: &mut Link) -> Result<(), RedisError> {
    let ping = redis::cmd("PING");
    match link {
        Link::Server(connection) => ping.query_async::<String>(connection).await.map(drop),
        Link::Cluster(connection) => ping.query_async::<String>(connection).await.map(drop),
    }
}

fn humanize(duration: Duration) -> String {
    format!("{} ms", duration.as_millis())
}
