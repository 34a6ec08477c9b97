//! What only the Redis Streams publisher does, on the real server and the
//! cluster `scripts/test.sh` starts: partitioned stream keys, trimming,
//! an `XADD` Redis refuses inside a pipeline, a connection that goes
//! silent, and a batch over many streams of a cluster. The cases every
//! publisher shares are in `publishers/`.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use outbox_relay::OutboundEvent;
use outbox_relay::publish::redis::{
    RedisEndpoint, RedisPublisher, RedisPublisherConfig, RedisStream, StreamKey, StreamTrim,
};
use outbox_relay::publish::{PublishFailure, Publisher};
use outbox_testkit::{TcpProxy, redis as redis_kit, unique_name};
use redis::AsyncCommands;

fn publisher(endpoint: RedisEndpoint, streams: &[(&str, RedisStream)]) -> RedisPublisher {
    let mut config = RedisPublisherConfig::new(endpoint);
    config.response_timeout = Duration::from_secs(2);
    config.connect_timeout = Duration::from_secs(2);
    for (topic, stream) in streams {
        config.streams.insert((*topic).to_owned(), stream.clone());
    }
    RedisPublisher::new(config).expect("redis publisher")
}

fn server() -> RedisEndpoint {
    RedisEndpoint::Server(redis_kit::redis_url())
}

fn event(topic: &str, aggregate_id: &str, sequence: usize) -> OutboundEvent {
    support::outbound::outbound_event(topic, aggregate_id, sequence)
}

/// The `sequence` of each entry's payload, by aggregate, in stream order.
fn sequences_by_aggregate(
    entries: &[(String, HashMap<String, String>)],
) -> HashMap<String, Vec<u64>> {
    let mut by_aggregate: HashMap<String, Vec<u64>> = HashMap::new();
    for (_id, fields) in entries {
        let payload: serde_json::Value =
            serde_json::from_str(&fields["data"]).expect("data is JSON");
        by_aggregate
            .entry(fields["ce_partitionkey"].clone())
            .or_default()
            .push(payload["sequence"].as_u64().expect("sequence"));
    }
    by_aggregate
}

/// `{topic}:p:{partition}` spreads aggregates over the streams as Kafka's
/// partitioner would over partitions: each aggregate lands whole, in
/// order, in one stream, and every stream gets some.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_keys_keep_each_aggregate_whole_and_in_order_in_one_stream() {
    let mut connection = redis_kit::require_redis().await;
    let topic = unique_name("partitioned");
    let key = StreamKey::parse("{topic}:p:{partition}").expect("template");
    let publisher = publisher(server(), &[(&topic, RedisStream::new(key).partitions(4))]);
    let events: Vec<OutboundEvent> = (0..400)
        .map(|sequence| event(&topic, &format!("order-{}", sequence % 40), sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");

    let streams: Vec<String> = (0..4)
        .map(|partition| format!("{topic}:p:{partition}"))
        .collect();
    let mut home: HashMap<String, String> = HashMap::new();
    let mut total = 0;
    for stream in &streams {
        let length = redis_kit::stream_length(&mut connection, stream).await;
        assert!(length > 0, "{stream} got no aggregate");
        let entries =
            redis_kit::read_stream(&mut connection, stream, length, Duration::from_secs(10)).await;
        total += entries.len();
        for (aggregate, sequences) in sequences_by_aggregate(&entries) {
            assert!(
                sequences.windows(2).all(|pair| pair[0] < pair[1]),
                "{aggregate} out of order in {stream}: {sequences:?}"
            );
            assert_eq!(sequences.len(), 10, "{aggregate} whole in {stream}");
            let previous = home.insert(aggregate.clone(), stream.clone());
            assert!(
                previous.is_none(),
                "{aggregate} in {previous:?} and {stream}"
            );
        }
    }
    assert_eq!(total, events.len());
    assert_eq!(home.len(), 40);
    redis_kit::delete_keys(&mut connection, &streams).await;
}

/// `maxlen` keeps the stream near its bound (Redis trims whole nodes of
/// 100 entries, so some more stay); without it nothing is trimmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxlen_trims_the_stream_and_no_setting_trims_nothing() {
    let mut connection = redis_kit::require_redis().await;
    let trimmed = unique_name("maxlen");
    let untrimmed = unique_name("untrimmed");
    let publisher = publisher(
        server(),
        &[(
            &trimmed,
            RedisStream::default().trim(StreamTrim::MaxLen(200)),
        )],
    );
    for round in 0..5 {
        let events: Vec<OutboundEvent> = (0..400)
            .flat_map(|sequence| {
                let sequence = round * 400 + sequence;
                [
                    event(&trimmed, "order-1", sequence),
                    event(&untrimmed, "order-2", sequence),
                ]
            })
            .collect();
        let outcomes = publisher.publish(&events).await;
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    }
    let length = redis_kit::stream_length(&mut connection, &trimmed).await;
    assert!(
        (200..=400).contains(&length),
        "maxlen 200 (approximate) left {length} of 2000 entries"
    );
    assert_eq!(
        redis_kit::stream_length(&mut connection, &untrimmed).await,
        2000,
        "a stream without a setting is never trimmed"
    );
    redis_kit::delete_keys(&mut connection, &[trimmed, untrimmed]).await;
}

/// `max_age` drops entries older than the age, by the time in their id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_age_drops_old_entries() {
    let mut connection = redis_kit::require_redis().await;
    let stream = unique_name("max-age");
    let plain = publisher(server(), &[]);
    let old: Vec<OutboundEvent> = (0..500)
        .map(|sequence| event(&stream, "order-1", sequence))
        .collect();
    assert!(plain.publish(&old).await.iter().all(Result::is_ok));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let aging = publisher(
        server(),
        &[(
            &stream,
            RedisStream::default().trim(StreamTrim::MaxAge(Duration::from_millis(100))),
        )],
    );
    let new = vec![event(&stream, "order-1", 500)];
    assert_eq!(aging.publish(&new).await, vec![Ok(())]);
    let length = redis_kit::stream_length(&mut connection, &stream).await;
    assert!(
        length <= 100,
        "entries older than max_age stay: {length} of 501"
    );
    redis_kit::delete_keys(&mut connection, &[stream]).await;
}

/// An `XADD` Redis refuses (the key holds a string) rejects its events,
/// naming the stream and Redis's error; the other streams of the same
/// pipeline are published, and the publisher stays connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xadd_redis_refuses_is_rejected_and_the_rest_of_the_pipeline_published() {
    let mut connection = redis_kit::require_redis().await;
    let good = unique_name("good");
    let wrong = unique_name("wrong-type");
    let _: () = connection.set(&wrong, "not a stream").await.expect("SET");
    let publisher = publisher(server(), &[]);
    let events = vec![
        event(&good, "order-a", 0),
        event(&wrong, "order-b", 1),
        event(&good, "order-a", 2),
        event(&wrong, "order-b", 3),
    ];
    let outcomes = publisher.publish(&events).await;
    assert_eq!((&outcomes[0], &outcomes[2]), (&Ok(()), &Ok(())));
    for index in [1, 3] {
        match &outcomes[index] {
            Err(PublishFailure::Rejected(message)) => {
                assert!(
                    message.contains(&wrong) && message.contains("WRONGTYPE"),
                    "{message}"
                );
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert!(Publisher::is_connected(&publisher));
    assert_eq!(redis_kit::stream_length(&mut connection, &good).await, 2);
    redis_kit::delete_keys(&mut connection, &[good, wrong]).await;
}

/// A connection that stops answering fails the batch as unavailable after
/// `response_timeout`, never as rejected; the next publish opens a new
/// connection and succeeds, counted as a rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_goes_silent_is_replaced_after_the_response_timeout() {
    let mut connection = redis_kit::require_redis().await;
    let stream = unique_name("silent");
    let proxy = TcpProxy::in_front_of(&redis_kit::redis_url()).await;
    let publisher = publisher(
        RedisEndpoint::Server(proxy.route(&redis_kit::redis_url())),
        &[],
    );
    assert_eq!(
        publisher.publish(&[event(&stream, "order-1", 0)]).await,
        vec![Ok(())]
    );
    proxy.stall_connections();
    let outcomes = publisher
        .publish(&[event(&stream, "order-1", 1), event(&stream, "order-2", 2)])
        .await;
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, Err(PublishFailure::Unavailable(_)))),
        "{outcomes:?}"
    );
    assert!(
        !Publisher::is_connected(&publisher),
        "the silent connection is dropped"
    );
    let outcomes = publisher
        .publish(&[event(&stream, "order-1", 1), event(&stream, "order-2", 2)])
        .await;
    assert_eq!(outcomes, vec![Ok(()), Ok(())]);
    assert_eq!(Publisher::client_rebuilds(&publisher), 1);
    redis_kit::delete_keys(&mut connection, &[stream]).await;
}

/// On the cluster, one batch over 16 streams (spread over the masters'
/// slots) is published whole, each aggregate in order in its stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_many_streams_of_a_cluster_is_published_in_order() {
    let mut cluster = redis_kit::require_redis_cluster().await;
    let topic = unique_name("cluster");
    let key = StreamKey::parse("{topic}:p:{partition}").expect("template");
    let nodes = redis_kit::cluster_nodes()
        .iter()
        .map(|node| format!("redis://{node}"))
        .collect();
    let publisher = publisher(
        RedisEndpoint::Cluster(nodes),
        &[(&topic, RedisStream::new(key).partitions(16))],
    );
    let events: Vec<OutboundEvent> = (0..640)
        .map(|sequence| event(&topic, &format!("order-{}", sequence % 64), sequence))
        .collect();
    let outcomes = publisher.publish(&events).await;
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert!(Publisher::is_connected(&publisher));

    let mut total = 0;
    for partition in 0..16 {
        let stream = format!("{topic}:p:{partition}");
        let entries: Vec<redis::streams::StreamId> = {
            let reply: redis::streams::StreamRangeReply = cluster
                .xrange_all(&stream)
                .await
                .unwrap_or_else(|error| panic!("XRANGE {stream}: {error}"));
            reply.ids
        };
        let entries: Vec<(String, HashMap<String, String>)> = entries
            .into_iter()
            .map(|entry| (entry.id.clone(), redis_kit::entry_fields(&entry.map)))
            .collect();
        total += entries.len();
        for (aggregate, sequences) in sequences_by_aggregate(&entries) {
            assert!(
                sequences.windows(2).all(|pair| pair[0] < pair[1]),
                "{aggregate} out of order in {stream}: {sequences:?}"
            );
        }
        let _: () = cluster.del(&stream).await.expect("DEL");
    }
    assert_eq!(total, events.len(), "every event arrived once");
}

/// `rediss://` against the plain port: the TLS handshake fails, and the
/// events are unavailable (no attempt spent, no panic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_failure_is_unavailable() {
    redis_kit::require_redis().await;
    let url = redis_kit::redis_url().replacen("redis://", "rediss://", 1);
    let publisher = publisher(RedisEndpoint::Server(url), &[]);
    let outcomes = publisher.publish(&[event("orders", "order-1", 0)]).await;
    assert!(
        matches!(&outcomes[0], Err(PublishFailure::Unavailable(_))),
        "{outcomes:?}"
    );
    assert!(!Publisher::is_connected(&publisher));
}
