//! The operators' page's JSON API (`/ui/api/`), served by
//! [`RelayAdmin::bind_page`] (what `outbox-relay ui` runs) over raw HTTP,
//! on each backend: its counts against what the table holds, dead events
//! grouped by the fingerprint of their error, the actions with and without
//! a token, cross-site requests refused with nothing changed, a published
//! event never retried, and a payload that looks like markup returned as
//! JSON data; then the page of a running relay, on its HTTP endpoint.

mod support;

use std::net::SocketAddr;

use outbox::OutboxMessage;
use outbox_relay::admin::{PageOptions, RelayAdmin};
use outbox_relay::config::{DatabaseUrl, UiTokens};
use outbox_testkit::{TestBackend, TestDatabase};
use serde_json::{Value, json};
use support::http::{Response, endpoint_address, get, listening_address, post};
use support::process::{FAST_CONFIG, RelayProcess, wait_until};
use tokio_util::sync::CancellationToken;

const ORDERS: &str = "ui-orders";
const PAYMENTS: &str = "ui-payments";
const SECRET: &str = "alice-secret-token";
const MARKUP: &str = "<script>alert('owned')</script>";

/// The page of `db`, served until the returned token is cancelled.
async fn serve_page<DB: TestBackend>(
    db: &TestDatabase<DB>,
    tokens: UiTokens,
) -> (String, CancellationToken) {
    let url: DatabaseUrl = db.url().parse().expect("the test database's URL");
    let admin = RelayAdmin::connect(url).await.expect("connect");
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let page = admin
        .bind_page(listen, PageOptions::new().tokens(tokens))
        .await
        .expect("bind the page");
    let address = page.local_addr().to_string();
    let stop = CancellationToken::new();
    tokio::spawn(page.serve(stop.clone()));
    (address, stop)
}

fn alice() -> UiTokens {
    let mut tokens = UiTokens::default();
    tokens.add(&format!("alice={SECRET}")).expect("a token");
    tokens
}

/// Enqueue `count` events of `topic`, aggregate `order:<n>`, in one
/// transaction; their event ids.
async fn enqueue<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
    topic: &str,
    count: usize,
) -> Vec<String> {
    let messages = (0..count)
        .map(|n| {
            OutboxMessage::new(
                "order.changed",
                "/orders",
                "order",
                n.to_string(),
                topic,
                serde_json::value::to_raw_value(&json!({ "n": n, "note": MARKUP }))
                    .expect("a JSON payload"),
            )
        })
        .collect();
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids.iter().map(ToString::to_string).collect()
}

async fn execute<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

/// Leave `event_id` dead with `error`, as the relay's last attempt does
/// (`record_failure.sql` with no retry: state, attempts, last error).
async fn kill<DB: TestBackend>(db: &TestDatabase<DB>, event_id: &str, error: &str) {
    execute(
        db,
        &format!(
            "UPDATE outbox_events SET state = 'dead', attempts = attempts + 5, \
             next_attempt_at = NULL, last_error = '{error}' WHERE event_id = '{event_id}'"
        ),
    )
    .await;
}

async fn publish<DB: TestBackend>(db: &TestDatabase<DB>, event_id: &str) {
    execute(
        db,
        &format!(
            "UPDATE outbox_events SET state = 'published', published_at = created_at \
             WHERE event_id = '{event_id}'"
        ),
    )
    .await;
}

async fn row_id<DB: TestBackend>(db: &TestDatabase<DB>, event_id: &str) -> i64 {
    db.count(&format!(
        "SELECT id FROM outbox_events WHERE event_id = '{event_id}'"
    ))
    .await
}

async fn count_where<DB: TestBackend>(db: &TestDatabase<DB>, condition: &str) -> i64 {
    db.count(&format!(
        "SELECT COUNT(*) FROM outbox_events WHERE {condition}"
    ))
    .await
}

fn assert_json(response: &Response, status: u16) -> Value {
    assert_eq!(response.status, status, "{}", response.body);
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{}",
        response.body
    );
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(response.header("cache-control"), Some("no-store"));
    response.json()
}

/// The headers of a same-origin POST of the page, with `token`.
fn page_post(address: &str, token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".to_owned()),
        ("Origin", format!("http://{address}")),
        ("Sec-Fetch-Site", "same-origin".to_owned()),
        ("Authorization", format!("Bearer {token}")),
    ]
}

async fn post_with(
    address: &str,
    path: &str,
    headers: &[(&'static str, String)],
    body: &str,
) -> Response {
    let borrowed: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    post(address, path, &borrowed, body).await
}

async fn the_overview_counts_what_the_table_holds<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let orders = enqueue(db, ORDERS, 5).await;
    let payments = enqueue(db, PAYMENTS, 3).await;
    publish(db, &orders[0]).await;
    publish(db, &orders[1]).await;
    kill(db, &orders[2], "rejected").await;
    execute(
        db,
        &format!(
            "UPDATE outbox_events SET attempts = 2, last_error = 'timeout' \
             WHERE event_id = '{}'",
            payments[0]
        ),
    )
    .await;
    let (address, stop) = serve_page(db, UiTokens::default()).await;

    let page = get(&address, "/ui").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").unwrap_or_default();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    for asset in ["/ui/app.js", "/ui/app.css"] {
        assert_eq!(get(&address, asset).await.status, 200, "{asset}");
    }

    let overview = assert_json(&get(&address, "/ui/api/overview").await, 200);
    assert_eq!(overview["source"], "polling");
    assert_eq!(overview["broker"], Value::Null, "no relay in this process");
    assert_eq!(overview["actions"]["enabled"], false, "no token configured");
    for topic in [ORDERS, PAYMENTS] {
        let shown = overview["topics"]
            .as_array()
            .and_then(|topics| topics.iter().find(|shown| shown["topic"] == topic))
            .unwrap_or_else(|| panic!("{topic} in {overview}"))
            .clone();
        let of_topic = format!("topic = '{topic}'");
        let expected = [
            ("pending", format!("{of_topic} AND state = 'pending'")),
            (
                "retrying",
                format!("{of_topic} AND state = 'pending' AND attempts > 0"),
            ),
            ("dead", format!("{of_topic} AND state = 'dead'")),
            ("published", format!("{of_topic} AND state = 'published'")),
        ];
        for (field, condition) in expected {
            assert_eq!(
                shown[field].as_i64(),
                Some(count_where(db, &condition).await),
                "{topic} {field}: {overview}"
            );
        }
        // No relay holds a lease: nothing is in flight.
        assert_eq!(shown["in_flight"], 0, "{overview}");
    }
    assert_eq!(overview["totals"]["pending"], 5, "{overview}");
    assert_eq!(overview["totals"]["dead"], 1, "{overview}");
    assert_eq!(overview["totals"]["published"], 2, "{overview}");
    assert!(
        overview["oldest_pending_age_seconds"].as_f64().is_some(),
        "{overview}"
    );
    assert!(
        overview["publish_rate_per_second"].as_f64().is_some(),
        "read from the table without a relay: {overview}"
    );
    assert_eq!(overview["failure_rate_per_second"], Value::Null);
    assert_eq!(overview["relays"], json!([]), "no relay runs");

    // Read-only: every action is refused, and says why.
    let refused = post_with(
        &address,
        &format!("/ui/api/events/{}/retry", row_id(db, &orders[2]).await),
        &page_post(&address, SECRET),
        "{}",
    )
    .await;
    let error = assert_json(&refused, 401);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|text| text.contains("no UI token is configured")),
        "{error}"
    );
    assert_eq!(count_where(db, "state = 'dead'").await, 1);
    stop.cancel();
}

async fn dead_events_are_grouped_and_repaired_with_a_token<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let ids = enqueue(db, ORDERS, 8).await;
    // Four events rejected for one reason, differing only in their ids and
    // sizes; two for another.
    for (n, event_id) in ids[..4].iter().enumerate() {
        let error = format!(
            "broker rejected event {event_id}: message of {} bytes is too large",
            1_048_577 + n
        );
        kill(db, event_id, &error).await;
    }
    for event_id in &ids[4..6] {
        kill(
            db,
            event_id,
            &format!("no stream takes subject orders.{event_id}"),
        )
        .await;
    }
    publish(db, &ids[6]).await;
    let (address, stop) = serve_page(db, alice()).await;

    let dead = assert_json(&get(&address, "/ui/api/dead").await, 200);
    let groups = dead["groups"].as_array().expect("groups").clone();
    assert_eq!(groups.len(), 2, "{dead}");
    assert_eq!(dead["capped"], false);
    assert_eq!(
        (groups[0]["count"].as_i64(), groups[1]["count"].as_i64()),
        (Some(4), Some(2))
    );
    let too_large = groups[0]["fingerprint"]
        .as_str()
        .expect("a fingerprint")
        .to_owned();
    assert_eq!(too_large.len(), 16);
    assert!(too_large.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(
        groups[0]["pattern"],
        "broker rejected event <uuid>: message of <n> bytes is too large"
    );
    let listed: Vec<&str> = groups[0]["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|event| event["event_id"].as_str())
        .collect();
    assert_eq!(
        listed,
        ids[..4].iter().map(String::as_str).collect::<Vec<_>>()
    );

    // The filters narrow the groups.
    let one = assert_json(&get(&address, "/ui/api/dead?aggregate=order:1").await, 200);
    assert_eq!(one["groups"][0]["count"], 1, "{one}");
    let by_error = assert_json(&get(&address, "/ui/api/dead?error=no%20stream").await, 200);
    assert_eq!(
        by_error["groups"].as_array().map(Vec::len),
        Some(1),
        "{by_error}"
    );
    assert_eq!(by_error["groups"][0]["count"], 2, "{by_error}");
    let none = assert_json(&get(&address, "/ui/api/dead?topic=elsewhere").await, 200);
    assert_eq!(none["groups"], json!([]));
    let bad = get(&address, "/ui/api/dead?aggregate=order").await;
    assert_json(&bad, 400);

    let group_retry = format!("/ui/api/groups/{too_large}/retry");
    // No token, a wrong token: 401, nothing changed.
    let mut no_token = page_post(&address, SECRET);
    no_token.retain(|(name, _)| *name != "Authorization");
    assert_json(
        &post_with(&address, &group_retry, &no_token, "{}").await,
        401,
    );
    let wrong = page_post(&address, "not-the-secret");
    assert_json(&post_with(&address, &group_retry, &wrong, "{}").await, 401);
    assert_eq!(count_where(db, "state = 'dead'").await, 6);
    // Another site's page, a cross-site fetch, a form's content type: 403,
    // nothing changed, even with the right token.
    let mut other_origin = page_post(&address, SECRET);
    other_origin[1].1 = "https://evil.example".to_owned();
    assert_json(
        &post_with(&address, &group_retry, &other_origin, "{}").await,
        403,
    );
    let mut cross_site = page_post(&address, SECRET);
    cross_site[2].1 = "cross-site".to_owned();
    assert_json(
        &post_with(&address, &group_retry, &cross_site, "{}").await,
        403,
    );
    let mut form = page_post(&address, SECRET);
    form[0].1 = "application/x-www-form-urlencoded".to_owned();
    assert_json(&post_with(&address, &group_retry, &form, "a=b").await, 403);
    assert_eq!(count_where(db, "state = 'dead'").await, 6);

    // whoami names the token's holder.
    let whoami = support::http::request(
        &address,
        "GET",
        "/ui/api/whoami",
        &[("Authorization", &format!("Bearer {SECRET}"))],
        None,
    )
    .await;
    assert_eq!(assert_json(&whoami, 200)["name"], "alice");

    // The group's retry changes exactly its four events, back to pending
    // with their attempts reset.
    let retried = post_with(&address, &group_retry, &page_post(&address, SECRET), "{}").await;
    assert_eq!(assert_json(&retried, 200)["changed"], 4);
    for event_id in &ids[..4] {
        assert_eq!(
            count_where(
                db,
                &format!("event_id = '{event_id}' AND state = 'pending' AND attempts = 0")
            )
            .await,
            1,
            "{event_id} is pending again"
        );
    }
    assert_eq!(count_where(db, "state = 'dead'").await, 2);
    // Again: nothing of the group is dead any more.
    let again = post_with(&address, &group_retry, &page_post(&address, SECRET), "{}").await;
    assert_json(&again, 404);

    // A published event is never retried.
    let published = row_id(db, &ids[6]).await;
    let conflict = post_with(
        &address,
        &format!("/ui/api/events/{published}/retry"),
        &page_post(&address, SECRET),
        "{}",
    )
    .await;
    assert_json(&conflict, 409);
    assert_eq!(
        count_where(
            db,
            &format!("event_id = '{}' AND state = 'published'", ids[6])
        )
        .await,
        1
    );

    // One dead event discarded by id, under the other group's filters.
    let doomed = row_id(db, &ids[4]).await;
    let discarded = post_with(
        &address,
        &format!("/ui/api/events/{doomed}/discard"),
        &page_post(&address, SECRET),
        "{}",
    )
    .await;
    assert_eq!(assert_json(&discarded, 200)["changed"], 1);
    assert_eq!(
        count_where(db, &format!("event_id = '{}'", ids[4])).await,
        0
    );
    let rest = assert_json(&get(&address, "/ui/api/dead").await, 200);
    let fingerprint = rest["groups"][0]["fingerprint"]
        .as_str()
        .expect("a group")
        .to_owned();
    let discarded = post_with(
        &address,
        &format!("/ui/api/groups/{fingerprint}/discard"),
        &page_post(&address, SECRET),
        &json!({ "topic": ORDERS, "aggregate": "order:5" }).to_string(),
    )
    .await;
    assert_eq!(assert_json(&discarded, 200)["changed"], 1);
    assert_eq!(count_where(db, "state = 'dead'").await, 0);
    stop.cancel();
}

async fn an_event_comes_back_as_json_data<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let ids = enqueue(db, ORDERS, 2).await;
    kill(db, &ids[0], "rejected").await;
    let (address, stop) = serve_page(db, alice()).await;

    let id = row_id(db, &ids[0]).await;
    let response = get(&address, &format!("/ui/api/events/{id}")).await;
    let event = assert_json(&response, 200);
    assert_eq!(event["id"], id.to_string());
    assert_eq!(event["event_id"], ids[0].as_str());
    assert_eq!(event["state"], "dead");
    assert_eq!(event["retryable"], true);
    assert_eq!(event["payload"]["note"], MARKUP, "the payload is JSON data");
    assert_eq!(event["payload"]["n"], 0);
    assert!(event["headers"].is_object(), "{event}");

    let pending = row_id(db, &ids[1]).await;
    let pending = assert_json(
        &get(&address, &format!("/ui/api/events/{pending}")).await,
        200,
    );
    assert_eq!(
        (pending["state"].as_str(), pending["retryable"].as_bool()),
        (Some("pending"), Some(false))
    );
    assert_json(&get(&address, "/ui/api/events/999999999").await, 404);
    stop.cancel();
}

async fn a_running_relay_serves_its_page<DB: outbox::Backend + TestBackend>(db: &TestDatabase<DB>) {
    outbox::migrate(db.pool()).await.expect("migrate");
    enqueue(db, ORDERS, 3).await;
    let token = format!("alice={SECRET}");
    let relay = RelayProcess::spawn_with_args(
        db.url(),
        "stdout",
        FAST_CONFIG,
        &[],
        &["--ui-token", &token],
    );
    let address = endpoint_address(&relay).await;
    let overview = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let published = wait_until(std::time::Duration::from_secs(30), || {
        let address = address.clone();
        let overview = std::sync::Arc::clone(&overview);
        async move {
            let response = get(&address, "/ui/api/overview").await;
            let value = if response.status == 200 {
                response.json()
            } else {
                Value::Null
            };
            let done = value["totals"]["published"] == 3
                && value["relays"].as_array().is_some_and(|relays| {
                    relays.iter().any(|relay| relay["partitions"] != json!([]))
                });
            *overview.lock().expect("the last overview") = value;
            done
        }
    })
    .await;
    let overview = overview.lock().expect("the last overview").clone();
    assert!(published, "{overview}\n{}", relay.log());
    assert_eq!(overview["source"], "polling");
    assert_eq!(overview["actions"]["enabled"], true);
    assert_eq!(
        overview["broker"],
        json!({ "ready": true, "reason": null }),
        "the broker state /readyz decides"
    );
    let lease = &overview["relays"][0]["partitions"][0];
    assert!(
        lease["lease_token"].as_i64().is_some_and(|token| token > 0),
        "{overview}"
    );
    // The rates come from the relay's counters, once sampled twice.
    let rated = wait_until(std::time::Duration::from_secs(30), || {
        let address = address.clone();
        async move {
            let value = get(&address, "/ui/api/overview").await.json();
            value["publish_rate_per_second"].is_number()
                && value["failure_rate_per_second"].is_number()
        }
    })
    .await;
    assert!(rated, "no rates:\n{}", relay.log());
    let whoami = support::http::request(
        &address,
        "GET",
        "/ui/api/whoami",
        &[("Authorization", &format!("Bearer {SECRET}"))],
        None,
    )
    .await;
    assert_eq!(assert_json(&whoami, 200)["name"], "alice");
    assert!(
        !relay.log().contains(SECRET),
        "the relay logs no token's secret"
    );
}

/// A file of the page's tokens in a directory of its own.
fn token_file(text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "outbox-ui-tokens-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).expect("create a directory");
    let path = dir.join("ui-tokens");
    std::fs::write(&path, text).expect("write the token file");
    path
}

async fn the_config_file_names_tokens_or_turns_the_page_off<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let tokens = token_file("# operators\nbob=bob-secret-from-a-file\n");
    let config = format!(
        "{FAST_CONFIG}\n[ui]\ntoken_file = {:?}\n",
        tokens.display().to_string()
    );
    let relay = RelayProcess::spawn(db.url(), "stdout", &config);
    let address = endpoint_address(&relay).await;
    let whoami = support::http::request(
        &address,
        "GET",
        "/ui/api/whoami",
        &[("Authorization", "Bearer bob-secret-from-a-file")],
        None,
    )
    .await;
    assert_eq!(assert_json(&whoami, 200)["name"], "bob", "{}", relay.log());
    drop(relay);

    let config = format!("{FAST_CONFIG}\n[ui]\nenabled = false\n");
    let relay = RelayProcess::spawn(db.url(), "stdout", &config);
    let address = endpoint_address(&relay).await;
    assert_eq!(get(&address, "/healthz").await.status, 200);
    assert_eq!(get(&address, "/ui").await.status, 404, "the page is off");
    assert_eq!(get(&address, "/ui/api/overview").await.status, 404);
}

/// `outbox-relay ui`, the page alone, as a process: tokens from a file and
/// from `OUTBOX_UI_TOKEN`, no broker state.
async fn the_ui_command_serves_the_page_alone<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let ids = enqueue(db, ORDERS, 1).await;
    kill(db, &ids[0], "rejected").await;
    let tokens = token_file("carol=carol-secret-from-a-file\n");
    let log_path = tokens.with_file_name("ui.log");
    let log = std::fs::File::create(&log_path).expect("create the log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["ui", "--database-url", db.url(), "--listen", "127.0.0.1:0"])
        .arg("--ui-token-file")
        .arg(&tokens)
        .env("OUTBOX_UI_TOKEN", "dave=dave-secret-from-env")
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn outbox-relay ui");
    let read_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut address = None;
    wait_until(std::time::Duration::from_secs(30), || {
        address = listening_address(&read_log());
        let found = address.is_some();
        async move { found }
    })
    .await;
    let Some(address) = address else {
        let _ = child.kill();
        panic!("outbox-relay ui never listened:\n{}", read_log());
    };
    let overview = assert_json(&get(&address, "/ui/api/overview").await, 200);
    assert_eq!(overview["broker"], Value::Null);
    assert_eq!(overview["totals"]["dead"], 1, "{overview}");
    assert_eq!(overview["actions"]["enabled"], true);
    for (secret, name) in [
        ("carol-secret-from-a-file", "carol"),
        ("dave-secret-from-env", "dave"),
    ] {
        let whoami = support::http::request(
            &address,
            "GET",
            "/ui/api/whoami",
            &[("Authorization", &format!("Bearer {secret}"))],
            None,
        )
        .await;
        assert_eq!(assert_json(&whoami, 200)["name"], name);
    }
    let id = row_id(db, &ids[0]).await;
    let retried = post_with(
        &address,
        &format!("/ui/api/events/{id}/retry"),
        &page_post(&address, "carol-secret-from-a-file"),
        "{}",
    )
    .await;
    assert_eq!(assert_json(&retried, 200)["changed"], 1);
    assert_eq!(count_where(db, "state = 'pending'").await, 1);
    let _ = child.kill();
    let _ = child.wait();
    let log = read_log();
    assert!(
        log.contains("operators' page action") && log.contains("who=carol"),
        "the action is logged with who did it:\n{log}"
    );
    assert!(
        !log.contains("carol-secret-from-a-file"),
        "no secret in the log:\n{log}"
    );
}

outbox_testkit::test_on_every_backend!(
    the_overview_counts_what_the_table_holds,
    dead_events_are_grouped_and_repaired_with_a_token,
    an_event_comes_back_as_json_data,
    a_running_relay_serves_its_page,
    the_config_file_names_tokens_or_turns_the_page_off,
    the_ui_command_serves_the_page_alone
);

/// Under the logical source, the overview shows the slot as `status
/// --source logical` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_logical_source_shows_its_slot() {
    let db = outbox_testkit::postgres().await;
    let slot_name = outbox_testkit::unique_slot_name("outbox_ui");
    // Declared after the database: the slot is dropped first.
    let _slot_guard = outbox_testkit::ReplicationSlotGuard::new(db.url(), &slot_name);
    let url: DatabaseUrl = db.url().parse().expect("the test database's URL");
    let admin = RelayAdmin::connect(url).await.expect("connect");
    let slot = outbox_relay::config::SlotName::parse(&slot_name).expect("a slot name");
    admin
        .prepare_logical(&slot)
        .await
        .expect("prepare the slot");
    enqueue(&db, ORDERS, 2).await;
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let page = admin
        .bind_page(listen, PageOptions::new().logical(slot))
        .await
        .expect("bind the page");
    let address = page.local_addr().to_string();
    let stop = CancellationToken::new();
    tokio::spawn(page.serve(stop.clone()));

    let overview = assert_json(&get(&address, "/ui/api/overview").await, 200);
    assert_eq!(overview["source"], "logical");
    let logical = &overview["logical"];
    assert_eq!(logical["slot"], slot_name.as_str(), "{overview}");
    assert!(
        logical["lag_bytes"].as_i64().is_some_and(|lag| lag > 0),
        "two events written after the slot: {overview}"
    );
    assert!(
        logical["retained_wal_bytes"].as_i64().is_some(),
        "{overview}"
    );
    assert_eq!(logical["active"], false, "no relay streams: {overview}");
    assert_eq!(
        overview["publish_rate_per_second"],
        Value::Null,
        "the logical source marks nothing published"
    );
    stop.cancel();
}
