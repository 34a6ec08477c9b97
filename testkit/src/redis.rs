//! The Redis side of the tests: the real server (`OUTBOX_TEST_REDIS_URL`,
//! default `redis://127.0.0.1:6379`), the three-master cluster that
//! `scripts/test.sh` starts (`OUTBOX_TEST_REDIS_CLUSTER`, default
//! `127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`), streams of each test's
//! own, and a consumer that collects what arrived.
//!
//! A server that does not answer fails the test naming it and
//! `scripts/test.sh --services-only`; nothing is skipped. Nothing here
//! stops, flushes or restarts a shared server: a test deletes only the
//! streams it made.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamReadOptions, StreamReadReply};

use crate::received::{Collected, Received};
use crate::services::START_SERVICES;

/// Default server; `OUTBOX_TEST_REDIS_URL` overrides it.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// Default cluster nodes; `OUTBOX_TEST_REDIS_CLUSTER` overrides them.
pub const DEFAULT_REDIS_CLUSTER: &str = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002";

/// The Redis URL of the tests, unchecked.
pub fn redis_url() -> String {
    std::env::var("OUTBOX_TEST_REDIS_URL").unwrap_or_else(|_| DEFAULT_REDIS_URL.to_owned())
}

/// The cluster's nodes, each `host:port`, unchecked.
pub fn cluster_nodes() -> Vec<String> {
    std::env::var("OUTBOX_TEST_REDIS_CLUSTER")
        .unwrap_or_else(|_| DEFAULT_REDIS_CLUSTER.to_owned())
        .split(',')
        .map(|node| node.trim().to_owned())
        .filter(|node| !node.is_empty())
        .collect()
}

/// The relay's `--broker` URL for the cluster:
/// `redis+cluster://host:port,host:port,...`.
pub fn cluster_broker_url() -> String {
    format!("redis+cluster://{}", cluster_nodes().join(","))
}

/// A connection to the test server, for the test's own commands.
///
/// # Panics
/// When Redis does not answer a `PING` within 10 s; the message names it
/// and how to start it.
pub async fn require_redis() -> MultiplexedConnection {
    connect_to(&redis_url(), "OUTBOX_TEST_REDIS_URL").await
}

/// A connection to the server at `url` (such as a private one).
///
/// # Panics
/// When it does not answer a `PING` within 10 s.
pub async fn connect_to(url: &str, variable: &str) -> MultiplexedConnection {
    let connecting = async {
        let client = redis::Client::open(url)?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await?;
        Ok::<_, redis::RedisError>(connection)
    };
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => panic!(
            "Redis is not reachable at {url} ({error}); {START_SERVICES} or point {variable} at one"
        ),
        Err(_) => panic!(
            "Redis did not answer at {url} within 10 s; {START_SERVICES} or point {variable} at one"
        ),
    }
}

/// A connection to the test cluster.
///
/// # Panics
/// When the cluster does not answer within 10 s, or is not a healthy
/// cluster (`CLUSTER INFO` without `cluster_state:ok`).
pub async fn require_redis_cluster() -> redis::cluster_async::ClusterConnection {
    let nodes = cluster_nodes();
    let urls: Vec<String> = nodes.iter().map(|node| format!("redis://{node}")).collect();
    let connecting = async {
        let client = redis::cluster::ClusterClient::new(urls)?;
        let mut connection = client.get_async_connection().await?;
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut connection)
            .await?;
        Ok::<_, redis::RedisError>((connection, info))
    };
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(Ok((connection, info))) => {
            assert!(
                info.contains("cluster_state:ok"),
                "the Redis cluster at {} is not healthy: {info}; {START_SERVICES}",
                nodes.join(",")
            );
            connection
        }
        Ok(Err(error)) => panic!(
            "the Redis cluster is not reachable at {} ({error}); {START_SERVICES} or point \
             OUTBOX_TEST_REDIS_CLUSTER at one",
            nodes.join(",")
        ),
        Err(_) => panic!(
            "the Redis cluster did not answer at {} within 10 s; {START_SERVICES} or point \
             OUTBOX_TEST_REDIS_CLUSTER at one",
            nodes.join(",")
        ),
    }
}

/// The fields of one stream entry, as text (a field that is not UTF-8 is
/// replaced lossily).
pub fn entry_fields(map: &HashMap<String, redis::Value>) -> HashMap<String, String> {
    map.iter()
        .map(|(field, value)| (field.clone(), value_text(value)))
        .collect()
}

/// A field value as text.
pub fn value_text(value: &redis::Value) -> String {
    match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        redis::Value::Int(number) => number.to_string(),
        other => format!("{other:?}"),
    }
}

/// An entry's fields as a [`Received`]: `ce_id`, `ce_partitionkey`, the
/// payload from `data`; the key is the `ce_id` too (a stream entry has no
/// key of its own).
pub fn received(fields: HashMap<String, String>) -> Received {
    let ce_id = fields.get("ce_id").cloned().unwrap_or_default();
    Received {
        key: ce_id.clone(),
        ce_id,
        aggregate_id: fields.get("ce_partitionkey").cloned().unwrap_or_default(),
        payload: fields
            .get("data")
            .and_then(|data| serde_json::from_str(data).ok())
            .unwrap_or(serde_json::Value::Null),
        headers: fields,
    }
}

/// Read `stream` from its start until `count` entries arrived or `within`
/// passed: each entry's id and fields, in stream order.
pub async fn read_stream(
    connection: &mut MultiplexedConnection,
    stream: &str,
    count: usize,
    within: Duration,
) -> Vec<(String, HashMap<String, String>)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut entries = Vec::with_capacity(count);
    let mut last_id = "0-0".to_owned();
    while entries.len() < count && tokio::time::Instant::now() < deadline {
        let options = StreamReadOptions::default().count(1000).block(200);
        let reply: StreamReadReply = connection
            .xread_options(&[stream], &[&last_id], &options)
            .await
            .unwrap_or_else(|error| panic!("XREAD {stream}: {error}"));
        for key in reply.keys {
            for entry in key.ids {
                last_id = entry.id.clone();
                entries.push((entry.id, entry_fields(&entry.map)));
            }
        }
    }
    entries
}

/// Follow `stream` from its start in the background on the server at
/// `url`, collecting every entry; reconnects when the connection is lost.
pub fn stream_consumer_at(url: String, stream: String) -> Collected {
    let collected = Collected::default();
    let sink = collected.clone();
    tokio::spawn(async move {
        let mut last_id = "0-0".to_owned();
        loop {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                return;
            };
            let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            loop {
                let options = StreamReadOptions::default().count(1000).block(500);
                let reply: Result<StreamReadReply, _> = connection
                    .xread_options(&[stream.as_str()], &[last_id.as_str()], &options)
                    .await;
                let Ok(reply) = reply else { break };
                for key in reply.keys {
                    for entry in key.ids {
                        last_id = entry.id.clone();
                        sink.push(received(entry_fields(&entry.map)));
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    collected
}

/// [`stream_consumer_at`] on the test server.
pub fn stream_consumer(stream: &str) -> Collected {
    stream_consumer_at(redis_url(), stream.to_owned())
}

/// Follow `streams` on the cluster in the background, collecting every
/// entry of each (in order within a stream, interleaved across them).
pub fn cluster_stream_consumer(streams: Vec<String>) -> Collected {
    let collected = Collected::default();
    let sink = collected.clone();
    let urls: Vec<String> = cluster_nodes()
        .iter()
        .map(|node| format!("redis://{node}"))
        .collect();
    tokio::spawn(async move {
        let mut last_ids: Vec<String> = vec!["0-0".to_owned(); streams.len()];
        loop {
            let Ok(client) = redis::cluster::ClusterClient::new(urls.clone()) else {
                return;
            };
            let Ok(mut connection) = client.get_async_connection().await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            'reading: loop {
                let mut read_any = false;
                // One stream per XREAD: a cluster refuses keys of several
                // slots in one command.
                for (stream, last_id) in streams.iter().zip(last_ids.iter_mut()) {
                    let options = StreamReadOptions::default().count(1000);
                    let reply: Result<StreamReadReply, _> = connection
                        .xread_options(&[stream.as_str()], &[last_id.as_str()], &options)
                        .await;
                    let Ok(reply) = reply else { break 'reading };
                    for key in reply.keys {
                        for entry in key.ids {
                            read_any = true;
                            *last_id = entry.id.clone();
                            sink.push(received(entry_fields(&entry.map)));
                        }
                    }
                }
                if !read_any {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    collected
}

/// The number of entries of `stream` (`XLEN`; 0 when it does not exist).
pub async fn stream_length(connection: &mut MultiplexedConnection, stream: &str) -> usize {
    connection
        .xlen(stream)
        .await
        .unwrap_or_else(|error| panic!("XLEN {stream}: {error}"))
}

/// The entries of `stream` that consumer group `group` has still to
/// finish: pending (read, not acknowledged) plus those after its last
/// delivered entry. A group that does not exist has the whole stream left.
pub async fn group_backlog(
    connection: &mut MultiplexedConnection,
    stream: &str,
    group: &str,
) -> u64 {
    let groups: redis::streams::StreamInfoGroupsReply = connection
        .xinfo_groups(stream)
        .await
        .unwrap_or_else(|error| panic!("XINFO GROUPS {stream}: {error}"));
    let length = stream_length(connection, stream).await as u64;
    let Some(info) = groups.groups.into_iter().find(|info| info.name == group) else {
        return length;
    };
    let unread: redis::streams::StreamRangeReply = connection
        .xrange(stream, format!("({}", info.last_delivered_id), "+")
        .await
        .unwrap_or_else(|error| panic!("XRANGE {stream}: {error}"));
    info.pending as u64 + unread.ids.len() as u64
}

/// Delete `keys` on the test server.
pub async fn delete_keys(connection: &mut MultiplexedConnection, keys: &[String]) {
    if keys.is_empty() {
        return;
    }
    let _: () = connection
        .del(keys)
        .await
        .unwrap_or_else(|error| panic!("DEL {keys:?}: {error}"));
}

/// An event's stream entry exactly as the relay writes it
/// (`docs/wire-format.md`): `ce_id`, `ce_type`, `ce_source`,
/// `ce_specversion`, `ce_time`, `ce_aggregatetype`, `ce_eventversion`,
/// `ce_partitionkey` (the aggregate id), `ce_<name>` per extra header,
/// `content-type` = `application/json`, the trace context as
/// `ce_traceparent` / `ce_tracestate` and as plain fields, and `data`, the
/// payload bytes. A test spoils a part (no id, a body that is not JSON) to
/// make poison.
#[derive(Debug, Clone)]
pub struct RelayEntry {
    /// The event id (`ce_id`); `None` leaves the field out.
    pub id: Option<String>,
    /// `ce_type`.
    pub event_type: String,
    /// `ce_source`.
    pub source: String,
    /// `ce_aggregatetype`.
    pub aggregate_type: String,
    /// `ce_partitionkey`.
    pub aggregate_id: String,
    /// `ce_eventversion`.
    pub event_version: String,
    /// Extra headers, each written as `ce_<name>`.
    pub headers: Vec<(String, String)>,
    /// W3C `traceparent`, if any.
    pub traceparent: Option<String>,
    /// W3C `tracestate`, if any.
    pub tracestate: Option<String>,
    /// `data`: the payload bytes.
    pub data: Vec<u8>,
}

impl RelayEntry {
    /// The entry's fields, in the order the relay writes them.
    pub fn fields(&self) -> Vec<(String, Vec<u8>)> {
        let mut fields: Vec<(String, Vec<u8>)> = Vec::new();
        let mut field = |name: &str, value: &[u8]| fields.push((name.to_owned(), value.to_vec()));
        if let Some(id) = &self.id {
            field("ce_id", id.as_bytes());
        }
        field("ce_type", self.event_type.as_bytes());
        field("ce_source", self.source.as_bytes());
        field("ce_specversion", b"1.0");
        field("ce_time", b"2026-01-01T00:00:00Z");
        field("ce_aggregatetype", self.aggregate_type.as_bytes());
        field("ce_eventversion", self.event_version.as_bytes());
        field("ce_partitionkey", self.aggregate_id.as_bytes());
        for (name, value) in &self.headers {
            field(&format!("ce_{name}"), value.as_bytes());
        }
        field("content-type", b"application/json");
        for (name, value) in [
            ("traceparent", &self.traceparent),
            ("tracestate", &self.tracestate),
        ] {
            if let Some(value) = value {
                field(&format!("ce_{name}"), value.as_bytes());
                field(name, value.as_bytes());
            }
        }
        field("data", &self.data);
        fields
    }
}

/// `XADD` each of `entries` to `stream` as the relay does, in order, in
/// one pipeline; their entry ids.
///
/// # Panics
/// When Redis refuses one.
pub async fn add_entries(
    connection: &mut MultiplexedConnection,
    stream: &str,
    entries: &[RelayEntry],
) -> Vec<String> {
    if entries.is_empty() {
        return Vec::new();
    }
    let mut pipeline = redis::pipe();
    for entry in entries {
        let command = pipeline.cmd("XADD").arg(stream).arg("*");
        for (name, value) in entry.fields() {
            command.arg(name).arg(value);
        }
    }
    pipeline
        .query_async(connection)
        .await
        .unwrap_or_else(|error| panic!("XADD to {stream}: {error}"))
}
