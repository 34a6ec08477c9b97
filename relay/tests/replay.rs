//! `outbox-relay replay` end to end: the relay publishes two topics in two
//! groups of events, an operator replays one topic since a time between the
//! groups beside the running relay, and a real RabbitMQ consumer gets
//! exactly that topic's published events since then, again, with their
//! original ids, in id order per aggregate, each marked as a replay.
//! Pending and dead events are not replayed and the database is unchanged.
//! Bad input is a one-line error before anything is published.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Output};
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_testkit::{Collected, Received, TestBackend, TestDatabase, rabbitmq, unique_name};
use support::dialect::Dialect;
use support::process::{FAST_CONFIG, RelayProcess, wait_until};

const REPLAY_HEADER: &str = "cloudEvents:outboxreplay";

fn relay_command(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("OUTBOX_BROKER")
        .output()
        .expect("run outbox-relay")
}

async fn texts<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) -> Vec<String> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_strings(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

async fn execute<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// Enqueue `per_aggregate` events for each of `aggregates` on `topic`,
/// interleaved; returns (aggregate id, event id) in id order.
async fn enqueue<DB: outbox::Backend>(
    db: &TestDatabase<DB>,
    topic: &str,
    aggregates: &[&str],
    per_aggregate: usize,
) -> Vec<(String, String)> {
    let mut messages = Vec::new();
    let mut aggregate_ids = Vec::new();
    for sequence in 0..per_aggregate {
        for aggregate in aggregates {
            aggregate_ids.push((*aggregate).to_owned());
            messages.push(outbox::OutboxMessage::new(
                "shipment.moved",
                "/shipments",
                "shipment",
                *aggregate,
                topic,
                serde_json::value::to_raw_value(&serde_json::json!({ "sequence": sequence }))
                    .expect("payload"),
            ));
        }
    }
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    aggregate_ids
        .into_iter()
        .zip(ids.iter().map(ToString::to_string))
        .collect()
}

async fn wait_published<DB: TestBackend>(db: &TestDatabase<DB>, expected: i64) {
    assert!(
        wait_until(Duration::from_secs(60), || async {
            db.count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
                .await
                == expected
        })
        .await,
        "{}: the relay publishes all {expected} events",
        DB::LABEL
    );
}

fn is_replay(message: &Received) -> bool {
    message.headers.get(REPLAY_HEADER).map(String::as_str) == Some("true")
}

fn replays(collected: &Collected) -> Vec<Received> {
    collected.snapshot().into_iter().filter(is_replay).collect()
}

/// How `--since` is written.
#[derive(Clone, Copy)]
enum Since {
    /// `30m`: a duration ago.
    Ago,
    /// An RFC 3339 time half an hour before the second group.
    Rfc3339,
}

async fn replay_one_topic_since_a_time<DB: TestBackend + Dialect + outbox::Backend>(
    db: TestDatabase<DB>,
    since_form: Since,
) {
    let label = DB::LABEL;
    let topic_a = unique_name("replay-a");
    let topic_b = unique_name("replay-b");
    let consumer_a = rabbitmq::exchange_consumer(&topic_a).await;
    let consumer_b = rabbitmq::exchange_consumer(&topic_b).await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut relay = RelayProcess::spawn(db.url(), &rabbitmq::amqp_url(), FAST_CONFIG);

    // Group 1, then made an hour old.
    let old_a = enqueue(&db, &topic_a, &["a1", "a2"], 2).await;
    let old_b = enqueue(&db, &topic_b, &["b1"], 2).await;
    wait_published(&db, 6).await;
    execute(
        &db,
        &format!(
            "UPDATE outbox_events SET created_at = {}",
            DB::shift_time("created_at", -3600)
        ),
    )
    .await;

    // Group 2, now.
    let new_a = enqueue(&db, &topic_a, &["a1", "a2", "a3"], 3).await;
    let new_b = enqueue(&db, &topic_b, &["b1", "b2"], 2).await;
    wait_published(&db, 19).await;

    // A dead event of topic A and the later event it holds (pending): one
    // statement, so the relay never sees the pending one alone.
    let dead_id = uuid::Uuid::now_v7().to_string();
    let held_id = uuid::Uuid::now_v7().to_string();
    execute(
        &db,
        &format!(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, \
             payload, state, attempts, last_error) VALUES \
             ('{dead_id}', 'shipment.moved', '/shipments', 'shipment', 'stuck', '{topic_a}', '{{}}', 'dead', 3, 'rejected'), \
             ('{held_id}', 'shipment.moved', '/shipments', 'shipment', 'stuck', '{topic_a}', '{{}}', 'pending', 0, NULL)"
        ),
    )
    .await;

    let all_a: usize = old_a.len() + new_a.len();
    let all_b: usize = old_b.len() + new_b.len();
    assert!(
        wait_until(Duration::from_secs(30), || async {
            consumer_a.len() >= all_a && consumer_b.len() >= all_b
        })
        .await,
        "{label}: the original publications arrive"
    );
    assert!(
        replays(&consumer_a).is_empty() && replays(&consumer_b).is_empty(),
        "{label}: the relay's own publications are not marked as replays"
    );
    let before = texts(&db, &DB::outbox_rows()).await;

    let since = match since_form {
        Since::Ago => "30m".to_owned(),
        Since::Rfc3339 => {
            let now = texts(&db, &format!("SELECT {}", DB::time_text(&DB::now()))).await;
            let now: DateTime<Utc> = DateTime::parse_from_rfc3339(&now[0])
                .expect("a time")
                .with_timezone(&Utc);
            (now - chrono::Duration::minutes(30)).to_rfc3339()
        }
    };
    let dir = std::env::temp_dir().join(unique_name("replay-config"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("relay.toml");
    // Pages of two: the replay pages through the table.
    std::fs::write(
        &config,
        FAST_CONFIG.replace("batch_size = 500", "batch_size = 2"),
    )
    .expect("write config");
    let output = relay_command(&[
        "replay",
        "--database-url",
        db.url(),
        "--broker",
        &rabbitmq::amqp_url(),
        "--config",
        &config.display().to_string(),
        "--topic",
        &topic_a,
        "--since",
        &since,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{label}: replay failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "{} event(s) of topic `{topic_a}` replayed",
            new_a.len()
        )),
        "{label}: the summary counts the events: {stdout}"
    );

    assert!(
        wait_until(Duration::from_secs(30), || async {
            replays(&consumer_a).len() >= new_a.len()
        })
        .await,
        "{label}: the replays arrive"
    );
    // Anything more than expected would arrive in this while.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let replayed = replays(&consumer_a);
    let replayed_ids: Vec<String> = replayed.iter().map(|m| m.ce_id.clone()).collect();
    let mut expected_ids: Vec<String> = new_a.iter().map(|(_, id)| id.clone()).collect();
    let mut sorted_replayed = replayed_ids.clone();
    sorted_replayed.sort();
    expected_ids.sort();
    assert_eq!(
        sorted_replayed, expected_ids,
        "{label}: exactly topic A's published events since --since, once each, with their original ids"
    );
    let position: HashMap<&str, usize> = new_a
        .iter()
        .enumerate()
        .map(|(index, (_, id))| (id.as_str(), index))
        .collect();
    let mut last_per_aggregate: HashMap<String, usize> = HashMap::new();
    for message in &replayed {
        let index = position[message.ce_id.as_str()];
        let aggregate = &new_a[index].0;
        assert_eq!(&message.aggregate_id, aggregate, "{label}: partition key");
        if let Some(previous) = last_per_aggregate.insert(aggregate.clone(), index) {
            assert!(
                previous < index,
                "{label}: aggregate {aggregate} replayed out of id order"
            );
        }
        assert_eq!(
            message.key, message.ce_id,
            "{label}: message_id is the event id"
        );
    }
    let never: HashSet<&str> = [dead_id.as_str(), held_id.as_str()].into_iter().collect();
    assert!(
        !consumer_a
            .snapshot()
            .iter()
            .any(|message| never.contains(message.ce_id.as_str())),
        "{label}: dead and pending events are not replayed"
    );
    assert!(
        replays(&consumer_b).is_empty(),
        "{label}: the other topic is not replayed"
    );
    assert_eq!(
        texts(&db, &DB::outbox_rows()).await,
        before,
        "{label}: the replay changed nothing in outbox_events"
    );
    assert!(
        relay.is_running(),
        "{label}: the relay ran beside the replay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_republishes_one_topic_since_a_duration_ago_on_postgres() {
    replay_one_topic_since_a_time(outbox_testkit::postgres().await, Since::Ago).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_republishes_one_topic_since_an_rfc3339_time_on_mariadb() {
    replay_one_topic_since_a_time(outbox_testkit::mysql().await, Since::Rfc3339).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_republishes_one_topic_since_a_duration_ago_on_sqlite() {
    replay_one_topic_since_a_time(outbox_testkit::sqlite().await, Since::Ago).await;
}

/// The command failed with exactly one line on stderr containing `needle`.
fn assert_one_line_error(output: &Output, needle: &str) {
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "expected a failure, got success: {text}"
    );
    assert_eq!(text.trim_end().lines().count(), 1, "one line, got:\n{text}");
    assert!(
        text.contains(needle),
        "the error names the problem ({needle}):\n{text}"
    );
}

#[tokio::test]
async fn bad_replay_input_is_a_one_line_error_and_publishes_nothing() {
    let db = outbox_testkit::sqlite().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let topic = "orders";
    execute(
        &db,
        &format!(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, \
             payload, state, published_at) VALUES \
             ('{}', 'order.created', '/orders', 'order', '1', '{topic}', '{{}}', 'published', {})",
            uuid::Uuid::now_v7(),
            <sqlx::Sqlite as Dialect>::now()
        ),
    )
    .await;
    let url = db.url().to_owned();
    let replay = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            "--database-url",
            url.as_str(),
            "--broker",
            "stdout",
        ];
        args.extend_from_slice(extra);
        relay_command(&args)
    };
    let cases: [(&[&str], &str); 7] = [
        (
            &["--topic", topic, "--since", "yesterday"],
            "--since `yesterday`",
        ),
        (
            &["--topic", topic, "--since", "2026-13-01T00:00:00Z"],
            "RFC 3339",
        ),
        (&["--topic", topic, "--since=-2h"], "negative"),
        (
            &["--topic", topic, "--since", "2h", "--until", "soon"],
            "--until `soon`",
        ),
        (
            &["--topic", topic, "--since", "1h", "--until", "2h"],
            "is not before --until",
        ),
        (
            &["--topic", "no-such-topic", "--since", "2h"],
            "no-such-topic",
        ),
        (&["--topic", topic], "--since"),
    ];
    for (extra, needle) in cases {
        let output = replay(extra);
        assert_one_line_error(&output, needle);
        assert!(
            output.stdout.is_empty(),
            "nothing is published on bad input ({extra:?})"
        );
    }

    // With the delete mark, nothing is left to replay: one line says so.
    let deleting = std::env::temp_dir().join(format!("{}.toml", unique_name("deleting")));
    std::fs::write(&deleting, "[retention]\npublished = \"0s\"\n").expect("write the config");
    let deleting = deleting.to_string_lossy().into_owned();
    let output = replay(&["--topic", topic, "--since", "1h", "--config", &deleting]);
    let _ = std::fs::remove_file(&deleting);
    assert_one_line_error(&output, "nothing to replay");
    assert!(output.stdout.is_empty());

    let output = replay(&["--topic", topic, "--since", "1h"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = String::from_utf8_lossy(&output.stdout).into_owned();
    let event: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON event");
    assert_eq!(event["outboxreplay"], "true", "{line}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("1 event(s) of topic `orders` replayed")
    );
}
