//! `outbox-relay status --json` reports exactly what the tables hold: a
//! known mix of events, relays and leases is written with literal SQL, the
//! real binary reports on it, and every field is compared with a value the
//! test computes with its own SQL. Once per backend.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};

use chrono::{DateTime, Utc};
use outbox_testkit::{TestBackend, TestDatabase};
use serde_json::Value;
use support::dialect::Dialect;

/// The oldest pending event's creation time, fixed so it can be compared
/// exactly.
const OLDEST: &str = "2020-01-02 03:04:05.123000";

fn relay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .output()
        .expect("run outbox-relay")
}

async fn execute<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

async fn number<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) -> i64 {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_i64(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

async fn texts<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) -> Vec<String> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_strings(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"))
}

fn time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|error| panic!("not an RFC 3339 time `{text}`: {error}"))
        .with_timezone(&Utc)
}

async fn database_now<DB: TestBackend + Dialect>(db: &TestDatabase<DB>) -> DateTime<Utc> {
    let sql = format!("SELECT {}", DB::time_text(&DB::now()));
    time(&texts(db, &sql).await[0])
}

/// One event row: topic, aggregate id, state, attempts, next attempt time,
/// creation time, publication time (SQL expressions or NULL).
struct Row {
    topic: &'static str,
    aggregate_id: &'static str,
    state: &'static str,
    attempts: i32,
    next_attempt_at: String,
    created_at: String,
    published_at: String,
}

fn seed_rows<DB: Dialect>() -> Vec<Row> {
    let null = || "NULL".to_owned();
    let row = |topic, aggregate_id, state, attempts, next: String, created: String| Row {
        topic,
        aggregate_id,
        state,
        attempts,
        next_attempt_at: next,
        created_at: created,
        published_at: if state == "published" {
            DB::now_plus(-5)
        } else {
            "NULL".to_owned()
        },
    };
    vec![
        // orders: 3 pending (1 of them waiting to retry, 1 due again),
        // plus one more pending, 1 dead, 2 published.
        row(
            "orders",
            "o1",
            "pending",
            0,
            null(),
            DB::time_literal(OLDEST),
        ),
        row("orders", "o1", "pending", 0, null(), DB::now_plus(-60)),
        row(
            "orders",
            "o2",
            "pending",
            2,
            DB::now_plus(3600),
            DB::now_plus(-50),
        ),
        row(
            "orders",
            "o3",
            "pending",
            1,
            DB::now_plus(-10),
            DB::now_plus(-40),
        ),
        row("orders", "o4", "dead", 3, null(), DB::now_plus(-30)),
        row("orders", "o5", "published", 0, null(), DB::now_plus(-20)),
        row("orders", "o6", "published", 1, null(), DB::now_plus(-20)),
        // payments: 1 pending, 1 dead, 2 published.
        row("payments", "p1", "published", 0, null(), DB::now_plus(-20)),
        row("payments", "p1", "published", 0, null(), DB::now_plus(-19)),
        row("payments", "p2", "pending", 0, null(), DB::now_plus(-18)),
        row("payments", "p3", "dead", 5, null(), DB::now_plus(-17)),
        // mail: 1 waiting to retry, 1 published.
        row(
            "mail",
            "m1",
            "pending",
            1,
            DB::now_plus(600),
            DB::now_plus(-16),
        ),
        row("mail", "m2", "published", 0, null(), DB::now_plus(-15)),
    ]
}

async fn seed<DB: TestBackend + Dialect>(db: &TestDatabase<DB>) {
    let values: Vec<String> = seed_rows::<DB>()
        .iter()
        .map(|row| {
            format!(
                "('{}', 'thing.happened', '/things', 'thing', '{}', '{}', '{{}}', '{}', {}, {}, {}, {}, {})",
                uuid::Uuid::now_v7(),
                row.aggregate_id,
                row.topic,
                row.state,
                row.attempts,
                row.next_attempt_at,
                row.created_at,
                row.published_at,
                if row.attempts > 0 { "'rejected'" } else { "NULL" },
            )
        })
        .collect();
    execute(
        db,
        &format!(
            "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, \
             payload, state, attempts, next_attempt_at, created_at, published_at, last_error) VALUES {}",
            values.join(", ")
        ),
    )
    .await;
    execute(
        db,
        &format!(
            "INSERT INTO outbox_relays (relay_id, expires_at) VALUES ('relay-live', {}), ('relay-gone', {})",
            DB::now_plus(3600),
            DB::now_plus(-3600)
        ),
    )
    .await;
}

/// Lease the partition of aggregate `o1` to `relay-live` (live) and, where
/// there is another partition, one to `relay-gone` (expired).
async fn seed_leases<DB: TestBackend + Dialect>(db: &TestDatabase<DB>) {
    let partitions = number(db, "SELECT COUNT(*) FROM outbox_partitions").await;
    let live = number(
        db,
        &format!(
            "SELECT {} FROM outbox_events WHERE aggregate_id = 'o1' ORDER BY id LIMIT 1",
            DB::bigint(&format!("partition_key % {partitions}"))
        ),
    )
    .await;
    execute(
        db,
        &format!(
            "UPDATE outbox_partitions SET lease_owner = 'relay-live', lease_token = 7, lease_expires_at = {} \
             WHERE partition_no = {live}",
            DB::now_plus(3600)
        ),
    )
    .await;
    // SQLite has one partition; its expired lease is checked after the
    // live one expires.
    if partitions > 1 {
        execute(
            db,
            &format!(
                "UPDATE outbox_partitions SET lease_owner = 'relay-gone', lease_token = 3, lease_expires_at = {} \
                 WHERE partition_no = {}",
                DB::now_plus(-60),
                (live + 1) % partitions
            ),
        )
        .await;
    }
}

/// Compare every field of `status --json` with the test's own SQL.
async fn assert_status_matches<DB: TestBackend + Dialect>(db: &TestDatabase<DB>) -> Value {
    let before = database_now(db).await;
    let output = relay(&["status", "--database-url", db.url(), "--json"]);
    let after = database_now(db).await;
    assert!(
        output.status.success(),
        "{}: status failed: {}",
        DB::LABEL,
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_slice(&output.stdout).expect("status --json prints JSON");
    let label = DB::LABEL;

    let fields: BTreeSet<&str> = json
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "pending",
            "retrying",
            "in_flight",
            "dead",
            "published",
            "oldest_pending_at",
            "oldest_pending_age_seconds",
            "leased_partitions",
            "partitions",
            "live_relays",
            "topics",
            "leases",
            "slots",
            "source",
            "stream_owned",
            "slot_backlogs",
        ]),
        "{label}: the documented fields, no more"
    );
    assert_eq!(
        json["slot_backlogs"],
        Value::Null,
        "{label}: no slot backlog when polling"
    );
    assert_eq!(json["source"], "poll", "{label}: counted as polling counts");
    assert_eq!(
        json["stream_owned"],
        Value::Null,
        "{label}: no stream-owned rows when polling"
    );
    assert_eq!(
        json["slots"],
        serde_json::json!([]),
        "{label}: no replication slot of the logical source"
    );

    let count = |condition: String| async move {
        number(
            db,
            &format!("SELECT COUNT(*) FROM outbox_events WHERE {condition}"),
        )
        .await
    };
    let now = DB::now();
    assert_eq!(
        json["pending"],
        count("state = 'pending'".into()).await,
        "{label}: pending"
    );
    assert_eq!(
        json["retrying"],
        count("state = 'pending' AND attempts > 0".into()).await,
        "{label}: retrying"
    );
    assert_eq!(
        json["dead"],
        count("state = 'dead'".into()).await,
        "{label}: dead"
    );
    assert_eq!(
        json["published"],
        count("state = 'published'".into()).await,
        "{label}: published"
    );

    let partitions = number(db, "SELECT COUNT(*) FROM outbox_partitions").await;
    assert_eq!(json["partitions"], partitions, "{label}: partitions");
    let live_partitions: Vec<String> = texts(
        db,
        &format!(
            "SELECT {} FROM outbox_partitions WHERE lease_owner IS NOT NULL AND lease_expires_at > {now} \
             ORDER BY partition_no",
            DB::integer_text("partition_no")
        ),
    )
    .await;
    assert_eq!(
        json["leased_partitions"],
        live_partitions.len(),
        "{label}: leased partitions"
    );
    let in_flight = if live_partitions.is_empty() {
        0
    } else {
        count(format!(
            "state = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= {now}) \
             AND partition_key % {partitions} IN ({})",
            live_partitions.join(", ")
        ))
        .await
    };
    assert_eq!(json["in_flight"], in_flight, "{label}: in flight");
    assert_eq!(
        json["live_relays"],
        number(
            db,
            &format!("SELECT COUNT(*) FROM outbox_relays WHERE expires_at > {now}")
        )
        .await,
        "{label}: live relays"
    );

    let oldest = texts(
        db,
        &format!(
            "SELECT {} FROM outbox_events WHERE state = 'pending' ORDER BY created_at LIMIT 1",
            DB::time_text("created_at")
        ),
    )
    .await;
    let oldest = time(&oldest[0]);
    let reported_oldest = time(json["oldest_pending_at"].as_str().expect("a time"));
    assert_eq!(reported_oldest, oldest, "{label}: oldest pending");
    let age = json["oldest_pending_age_seconds"].as_i64().expect("an age");
    let (youngest_age, oldest_age) = (
        (before - oldest).num_seconds(),
        (after - oldest).num_seconds(),
    );
    assert!(
        (youngest_age..=oldest_age).contains(&age),
        "{label}: age {age} s lies between {youngest_age} and {oldest_age} s, the ages on the database's clock before and after the command"
    );

    let topic_names = texts(db, "SELECT DISTINCT topic FROM outbox_events").await;
    let mut expected_topics = BTreeMap::new();
    for topic in topic_names {
        let in_topic = |condition: &str| format!("topic = '{topic}' AND {condition}");
        let counts = [
            count(in_topic("state = 'pending'")).await,
            count(in_topic("state = 'pending' AND attempts > 0")).await,
            count(in_topic("state = 'dead'")).await,
            count(in_topic("state = 'published'")).await,
        ];
        expected_topics.insert(topic, counts);
    }
    let reported_topics: Vec<(String, [i64; 4])> = json["topics"]
        .as_array()
        .expect("topics is an array")
        .iter()
        .map(|topic| {
            let number = |name: &str| topic[name].as_i64().expect("a count");
            (
                topic["topic"].as_str().expect("a name").to_owned(),
                [
                    number("pending"),
                    number("retrying"),
                    number("dead"),
                    number("published"),
                ],
            )
        })
        .collect();
    assert_eq!(
        reported_topics,
        expected_topics.into_iter().collect::<Vec<_>>(),
        "{label}: per-topic counts, by topic"
    );

    let live = |column: &str| {
        format!(
            "SELECT {column} FROM outbox_partitions WHERE lease_owner IS NOT NULL AND lease_expires_at > {now} \
             ORDER BY partition_no"
        )
    };
    let owners = texts(db, &live("lease_owner")).await;
    let tokens = texts(db, &live(&DB::integer_text("lease_token"))).await;
    let expiries = texts(db, &live(&DB::time_text("lease_expires_at"))).await;
    let expected_leases: Vec<(i64, String, i64, DateTime<Utc>)> = (0..owners.len())
        .map(|index| {
            (
                live_partitions[index].parse().expect("a number"),
                owners[index].clone(),
                tokens[index].parse().expect("a number"),
                time(&expiries[index]),
            )
        })
        .collect();
    let reported_leases: Vec<(i64, String, i64, DateTime<Utc>)> = json["leases"]
        .as_array()
        .expect("leases is an array")
        .iter()
        .map(|lease| {
            (
                lease["partition_no"].as_i64().expect("a partition"),
                lease["owner"].as_str().expect("an owner").to_owned(),
                lease["lease_token"].as_i64().expect("a token"),
                time(lease["expires_at"].as_str().expect("a time")),
            )
        })
        .collect();
    assert_eq!(reported_leases, expected_leases, "{label}: live leases");
    json
}

async fn status_json_matches_the_tables<DB: TestBackend + Dialect + outbox::Backend>(
    db: TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    seed(&db).await;
    seed_leases(&db).await;
    let label = DB::LABEL;

    let with_a_live_lease = assert_status_matches(&db).await;
    // The seed is such that no field can be right by accident.
    assert_eq!(with_a_live_lease["pending"], 6, "{label}");
    assert_eq!(with_a_live_lease["retrying"], 3, "{label}");
    assert!(
        with_a_live_lease["in_flight"].as_i64() >= Some(2),
        "{label}: o1's two due events are in the leased partition"
    );
    assert_eq!(with_a_live_lease["dead"], 2, "{label}");
    assert_eq!(with_a_live_lease["published"], 5, "{label}");
    assert_eq!(with_a_live_lease["live_relays"], 1, "{label}");
    assert_eq!(
        with_a_live_lease["topics"].as_array().map(Vec::len),
        Some(3)
    );
    assert_eq!(
        with_a_live_lease["leases"][0]["owner"], "relay-live",
        "{label}: only the live lease is listed"
    );
    assert_eq!(
        with_a_live_lease["leases"].as_array().map(Vec::len),
        Some(1)
    );
    assert!(
        with_a_live_lease["oldest_pending_at"]
            .as_str()
            .is_some_and(|text| text.starts_with("2020-01-02T03:04:05.123")),
        "{label}: {}",
        with_a_live_lease["oldest_pending_at"]
    );

    let text = relay(&["status", "--database-url", db.url()]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    for needle in ["in flight", "payments", "relay-live", "leased partitions"] {
        assert!(text.contains(needle), "{label}: `{needle}` in\n{text}");
    }
    assert!(
        !text.contains("relay-gone"),
        "{label}: expired leases are not live:\n{text}"
    );

    // Once the lease has expired nothing is in flight.
    execute(
        &db,
        &format!(
            "UPDATE outbox_partitions SET lease_expires_at = {} WHERE lease_owner = 'relay-live'",
            DB::now_plus(-1)
        ),
    )
    .await;
    let without_leases = assert_status_matches(&db).await;
    assert_eq!(without_leases["in_flight"], 0, "{label}");
    assert_eq!(without_leases["leased_partitions"], 0, "{label}");
    assert_eq!(without_leases["leases"], serde_json::json!([]), "{label}");
}

#[tokio::test]
async fn status_json_matches_the_tables_on_postgres() {
    status_json_matches_the_tables(outbox_testkit::postgres().await).await;
}

#[tokio::test]
async fn status_json_matches_the_tables_on_mariadb() {
    status_json_matches_the_tables(outbox_testkit::mysql().await).await;
}

#[tokio::test]
async fn status_json_matches_the_tables_on_sqlite() {
    status_json_matches_the_tables(outbox_testkit::sqlite().await).await;
}
