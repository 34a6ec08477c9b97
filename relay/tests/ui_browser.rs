//! The operators' page in a real browser: headless Chromium, driven
//! through ChromeDriver (`outbox_testkit::browser`), against the
//! `outbox-relay` binary on PostgreSQL and NATS JetStream.
//!
//! Events are committed before the relay starts: some to a subject a
//! stream takes (published), some to a subject no stream takes (rejected
//! on each attempt, then dead). The page must show the counts the table
//! holds, list the failure group's events, refuse the group's retry without
//! a token and change nothing, retry the group with the token (the events
//! arrive on the stream once it exists, and the page shows the dead count
//! drop and "retried N events"), and show a payload holding a `<script>`
//! and a header and an error holding an `<img onerror>` as text, never as
//! elements.
//!
//! `outbox-relay ui` without tokens serves the page read-only: no action
//! button shows, and a dead event's detail offers no retry.
//!
//! A screenshot of each view (overview, dead groups, event detail) is
//! written to `target/ui-screenshots/` (`overview.png`, `dead.png`,
//! `event.png`); the test fails when the page logs a JavaScript error or
//! any other `SEVERE` console entry but the refused request it provokes.
//!
//! Needs Chromium and ChromeDriver (Debian's `chromium` and
//! `chromium-driver`, which `scripts/test.sh` installs).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outbox_testkit::browser::Browser;
use outbox_testkit::nats::{TestStream, nats_url, require_nats};
use outbox_testkit::unique_name;
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use support::http::endpoint_address;
use support::process::{FAST_CONFIG, RelayProcess, wait_until};

/// Events to the subject a stream takes.
const PUBLISHED: usize = 12;
/// Events to the subject no stream takes, dead after their attempts.
const REJECTED: usize = 3;
/// A payload a page that builds HTML from data would run.
const SCRIPT_PAYLOAD: &str = "<script>alert(1)</script>";
/// A header and an error a page that builds HTML from data would run.
const IMG_TAG: &str = "<img src=x onerror=alert(2)>";
/// How long the page may take to show what the server answers.
const PAGE_WAIT: Duration = Duration::from_secs(20);
/// The counts of the overview, in the page's order.
const STATES: [&str; 5] = ["pending", "in_flight", "retrying", "dead", "published"];

/// Where the screenshots go: `target/ui-screenshots/` of the build that
/// runs this test (the test binary is `target/<profile>/deps/...`).
fn screenshot_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .map(|target| target.join("ui-screenshots"))
        .expect("the test binary sits in target/<profile>/deps")
}

/// Enqueue `count` events to `topic`, committed in one transaction, each
/// of an aggregate of its own (numbered from `first_aggregate`, the type
/// being the event type's first word); their ids (`outbox_events.id`) in
/// order.
async fn enqueue(
    pool: &sqlx::PgPool,
    topic: &str,
    event_type: &str,
    count: usize,
    first_aggregate: usize,
    payload: impl Fn(usize) -> Value,
    header: Option<(&str, &str)>,
) -> Vec<i64> {
    let aggregate_type = event_type.split('.').next().unwrap_or(event_type);
    let messages: Vec<outbox::OutboxMessage> = (0..count)
        .map(|index| {
            let message = outbox::OutboxMessage::new(
                event_type,
                "/shop/checkout",
                aggregate_type,
                format!("{aggregate_type}-{}", first_aggregate + index),
                topic,
                serde_json::value::to_raw_value(&payload(index)).expect("payload"),
            );
            match header {
                Some((name, value)) => message.with_header(name, value),
                None => message,
            }
        })
        .collect();
    let mut tx = pool.begin().await.expect("begin");
    let event_ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    let mut ids = Vec::new();
    for event_id in event_ids {
        let id: i64 = sqlx::query_scalar("SELECT id FROM outbox_events WHERE event_id = $1")
            .bind(event_id)
            .fetch_one(pool)
            .await
            .expect("the enqueued event's id");
        ids.push(id);
    }
    ids
}

async fn scalar(pool: &sqlx::PgPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .expect("count query")
}

/// The table's counts for `topic` (all topics when `None`), by the page's
/// names: `pending` is every event neither published nor dead, `retrying`
/// the pending ones that failed, `in_flight` the pending ones due now in a
/// leased partition (none here once the relay is idle: checked through
/// `pending`).
async fn table_counts(pool: &sqlx::PgPool, topic: Option<&str>) -> BTreeMap<String, i64> {
    let filter = topic.map_or(String::new(), |topic| format!("AND topic = '{topic}'"));
    let count =
        |condition: &str| format!("SELECT COUNT(*) FROM outbox_events WHERE {condition} {filter}");
    let pending = scalar(pool, count("state = 'pending'")).await;
    let retrying = scalar(pool, count("state = 'pending' AND attempts > 0")).await;
    let dead = scalar(pool, count("state = 'dead'")).await;
    let published = scalar(pool, count("state = 'published'")).await;
    assert_eq!(pending, 0, "the relay left nothing pending");
    BTreeMap::from([
        ("pending".to_owned(), pending),
        ("in_flight".to_owned(), 0),
        ("retrying".to_owned(), retrying),
        ("dead".to_owned(), dead),
        ("published".to_owned(), published),
    ])
}

/// The `[data-field]` cells under `selector`, as numbers (the page writes
/// `1,234`); a cell that is not a number is `-1`.
async fn page_counts(browser: &Browser, selector: &str) -> BTreeMap<String, i64> {
    let cells = browser
        .execute(
            "const found = {}; \
             const root = document.querySelector(arguments[0]); \
             if (root === null) return found; \
             root.querySelectorAll('[data-field]').forEach(function (cell) { \
               found[cell.getAttribute('data-field')] = cell.textContent; \
             }); \
             return found;",
            vec![json!(selector)],
        )
        .await;
    STATES
        .iter()
        .map(|name| {
            let text = cells[*name].as_str().unwrap_or_default().replace(',', "");
            ((*name).to_owned(), text.trim().parse().unwrap_or(-1))
        })
        .collect()
}

/// Wait until the page's cells under `selector` show `expected`.
async fn wait_for_counts(browser: &Browser, selector: &str, expected: &BTreeMap<String, i64>) {
    let deadline = std::time::Instant::now() + PAGE_WAIT;
    loop {
        let shown = page_counts(browser, selector).await;
        if &shown == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{selector} shows {shown:?}, the table holds {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every row of the table: (id, state, attempts, last error).
async fn rows(pool: &sqlx::PgPool) -> Vec<(i64, String, i32, Option<String>)> {
    sqlx::query_as("SELECT id, state, attempts, last_error FROM outbox_events ORDER BY id")
        .fetch_all(pool)
        .await
        .expect("read the table")
}

/// The `data-event-id`s of the rows of the group `fingerprint`.
async fn group_event_ids(browser: &Browser, fingerprint: &str) -> BTreeSet<i64> {
    let ids = browser
        .execute(
            "return Array.from(document.querySelectorAll( \
               'section.group[data-fingerprint=\"' + arguments[0] + '\"] tr.dead-event')) \
               .map(function (row) { return row.getAttribute('data-event-id'); });",
            vec![json!(fingerprint)],
        )
        .await;
    ids.as_array()
        .expect("a list of ids")
        .iter()
        .map(|id| {
            id.as_str()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("a row's data-event-id is not an id: {id}"))
        })
        .collect()
}

/// The fingerprint of the group whose pattern contains `text`.
async fn fingerprint_of(browser: &Browser, text: &str) -> String {
    let found = browser
        .wait_until_script(
            "const text = arguments[0]; \
             const groups = Array.from(document.querySelectorAll('section.group')); \
             const group = groups.find(function (group) { \
               const pattern = group.querySelector('.group-pattern'); \
               return pattern !== null && pattern.textContent.includes(text); \
             }); \
             return group === undefined ? null : group.getAttribute('data-fingerprint');",
            vec![json!(text)],
            PAGE_WAIT,
            &format!("a failure group whose pattern contains {text:?}"),
        )
        .await;
    found.as_str().unwrap_or_default().to_owned()
}

/// No element but the page's own script and nothing a payload, header or
/// error could have injected; no dialog opened.
async fn assert_nothing_injected(browser: &Browser) {
    let injected = browser
        .execute(
            "return { \
               scripts: Array.from(document.querySelectorAll('script')) \
                 .map(function (script) { return script.getAttribute('src'); }), \
               images: document.querySelectorAll('img').length, \
               handlers: document.querySelectorAll('[onerror], [onload], [onclick]').length \
             };",
            Vec::new(),
        )
        .await;
    assert_eq!(
        injected,
        json!({ "scripts": ["/ui/app.js"], "images": 0, "handlers": 0 }),
        "the page holds elements made from data"
    );
    assert_eq!(browser.dialog_text().await, None, "a dialog opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_page_shows_the_table_and_retries_a_failure_group() {
    let jetstream = require_nats().await;
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let pool = db.pool();

    let orders = unique_name("ui-orders");
    let invoices = unique_name("ui-invoices");
    let orders_stream = TestStream::create(
        &jetstream,
        &orders.replace('-', "_"),
        std::slice::from_ref(&orders),
    )
    .await;
    let published = enqueue(
        pool,
        &orders,
        "order.placed",
        PUBLISHED,
        4100,
        |index| json!({ "order": index, "lines": [{ "sku": "A-1", "quantity": 2 }] }),
        None,
    )
    .await;
    let rejected = enqueue(
        pool,
        &invoices,
        "invoice.issued",
        REJECTED,
        7300,
        |index| json!({ "invoice": index, "total": "12.50" }),
        None,
    )
    .await;
    let hostile = enqueue(
        pool,
        &invoices,
        "invoice.voided",
        1,
        7900,
        |_| json!({ "note": SCRIPT_PAYLOAD }),
        Some(("note", IMG_TAG)),
    )
    .await[0];

    let token = format!("ui-test-{}", uuid::Uuid::now_v7().simple());
    let relay = RelayProcess::spawn_with_args(
        db.url(),
        &nats_url(),
        FAST_CONFIG,
        &[],
        &["--ui-token", &format!("alice={token}")],
    );
    let address = endpoint_address(&relay).await;
    let dead_now = || async {
        scalar(
            pool,
            "SELECT COUNT(*) FROM outbox_events WHERE state = 'dead'".to_owned(),
        )
        .await
    };
    assert!(
        wait_until(Duration::from_secs(60), || async {
            dead_now().await == (REJECTED + 1) as i64
                && scalar(
                    pool,
                    "SELECT COUNT(*) FROM outbox_events WHERE state = 'published'".to_owned(),
                )
                .await
                    == PUBLISHED as i64
        })
        .await,
        "the relay publishes the orders and dead-letters the invoices:\n{}",
        relay.log()
    );
    // The hostile event's last error as a broker could word it: its own
    // failure group, whose pattern holds the tag too.
    sqlx::query("UPDATE outbox_events SET last_error = $1 WHERE id = $2")
        .bind(format!("downstream refused the event: {IMG_TAG}"))
        .bind(hostile)
        .execute(pool)
        .await
        .expect("set the hostile event's last error");

    let screenshots = screenshot_dir();
    let browser = Browser::start().await;
    browser
        .navigate(&format!("http://{address}/ui#overview"))
        .await;

    // The overview: each topic's counts and the totals are the table's.
    browser
        .wait_for(&format!("#topics tr[data-topic=\"{orders}\"]"), PAGE_WAIT)
        .await;
    for topic in [&orders, &invoices] {
        let expected = table_counts(pool, Some(topic)).await;
        wait_for_counts(
            &browser,
            &format!("#topics tr[data-topic=\"{topic}\"]"),
            &expected,
        )
        .await;
    }
    let totals = table_counts(pool, None).await;
    assert_eq!(totals["dead"], (REJECTED + 1) as i64);
    assert_eq!(totals["published"], PUBLISHED as i64);
    wait_for_counts(&browser, "#totals", &totals).await;
    browser
        .wait_until(
            "/^\\d\\d:\\d\\d:\\d\\dZ$/.test(document.getElementById('last-refresh').textContent)",
            PAGE_WAIT,
        )
        .await;
    browser
        .wait_until(
            "document.getElementById('broker-state').textContent === 'ready'",
            PAGE_WAIT,
        )
        .await;
    browser.screenshot(&screenshots.join("overview.png")).await;

    // The dead events, grouped: the rejected invoices in one group, the
    // hostile one in its own.
    browser.click(&browser.find("#tab-dead").await).await;
    let rejected_group = fingerprint_of(&browser, "no JetStream stream takes subject").await;
    let hostile_group = fingerprint_of(&browser, "downstream refused the event").await;
    assert_ne!(rejected_group, hostile_group);
    assert_eq!(
        group_event_ids(&browser, &rejected_group).await,
        rejected.iter().copied().collect::<BTreeSet<_>>(),
        "the failure group lists exactly the rejected events"
    );
    assert_eq!(
        group_event_ids(&browser, &hostile_group).await,
        BTreeSet::from([hostile])
    );
    let group = format!("section.group[data-fingerprint=\"{rejected_group}\"]");
    assert_eq!(
        browser
            .text_of(&format!("{group} .group-count"))
            .await
            .as_deref(),
        Some(REJECTED.to_string().as_str())
    );
    let hostile_pattern = browser
        .text_of(&format!(
            "section.group[data-fingerprint=\"{hostile_group}\"] .group-pattern"
        ))
        .await
        .unwrap_or_default();
    assert!(
        hostile_pattern.contains("<img src=x onerror=alert("),
        "the error is shown as text: {hostile_pattern:?}"
    );
    browser.screenshot(&screenshots.join("dead.png")).await;

    // The group's retry without a token: the button is there (the relay
    // has tokens), the server refuses, nothing changes.
    let before = rows(pool).await;
    browser
        .click(&browser.find(&format!("{group} button.group-retry")).await)
        .await;
    let question = browser.accept_dialog(PAGE_WAIT).await;
    assert!(
        question.contains(&format!("{REJECTED} dead events")),
        "the confirmation names what it retries: {question:?}"
    );
    let refused = browser
        .wait_for_text("#action-result", "401", PAGE_WAIT)
        .await;
    assert!(refused.starts_with("401: "), "{refused:?}");
    assert_eq!(rows(pool).await, before, "a refused retry changes nothing");
    browser.assert_no_severe_logs(&["status of 401"]).await;

    // The hostile event's detail: its payload, header and error as text.
    browser
        .click(
            &browser
                .wait_for(
                    &format!("tr.dead-event[data-event-id=\"{hostile}\"]"),
                    PAGE_WAIT,
                )
                .await,
        )
        .await;
    browser.wait_for("#event-detail", PAGE_WAIT).await;
    let payload = browser
        .wait_for_text("#event-payload", SCRIPT_PAYLOAD, PAGE_WAIT)
        .await;
    let shown: Value = serde_json::from_str(&payload).expect("the payload is shown as JSON text");
    assert_eq!(shown, json!({ "note": SCRIPT_PAYLOAD }));
    browser
        .wait_for_text("#event-headers", IMG_TAG, PAGE_WAIT)
        .await;
    browser
        .wait_for_text("#event-last-error", IMG_TAG, PAGE_WAIT)
        .await;
    assert!(
        browser.try_find("#event-retry").await.is_some(),
        "a dead event can be retried"
    );
    assert_nothing_injected(&browser).await;
    browser.screenshot(&screenshots.join("event.png")).await;
    browser.click(&browser.find("#event-close").await).await;
    browser
        .wait_until("document.getElementById('event-detail').hidden", PAGE_WAIT)
        .await;

    // The filters: a substring of the error keeps the hostile group only;
    // cleared, both groups are back.
    let groups_shown = "document.querySelectorAll('section.group').length";
    browser
        .type_text(&browser.find("#filter-error").await, "downstream refused")
        .await;
    browser.click(&browser.find("#filter-apply").await).await;
    browser
        .wait_until(&format!("{groups_shown} === 1"), PAGE_WAIT)
        .await;
    assert_eq!(
        group_event_ids(&browser, &hostile_group).await,
        BTreeSet::from([hostile])
    );
    browser.click(&browser.find("#filter-clear").await).await;
    browser
        .wait_until(&format!("{groups_shown} === 2"), PAGE_WAIT)
        .await;

    // Signed in, with a stream for the subject now: the group's retry
    // publishes the events and the page shows it.
    browser
        .type_text(&browser.find("#token").await, &token)
        .await;
    browser.click(&browser.find("#token-save").await).await;
    browser
        .wait_for_text("#token-state", "signed in as alice", PAGE_WAIT)
        .await;
    let invoices_stream = TestStream::create(
        &jetstream,
        &invoices.replace('-', "_"),
        std::slice::from_ref(&invoices),
    )
    .await;
    browser
        .click(&browser.find(&format!("{group} button.group-retry")).await)
        .await;
    browser.accept_dialog(PAGE_WAIT).await;
    browser
        .wait_for_text(
            "#action-result",
            &format!("retried {REJECTED} events"),
            PAGE_WAIT,
        )
        .await;
    let rejected_list = rejected
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    assert!(
        wait_until(Duration::from_secs(30), || async {
            scalar(
                pool,
                format!(
                    "SELECT COUNT(*) FROM outbox_events WHERE state = 'published' \
                     AND id IN ({rejected_list})"
                ),
            )
            .await
                == REJECTED as i64
        })
        .await,
        "the retried events are published:\n{}",
        relay.log()
    );
    let arrived = invoices_stream
        .messages(REJECTED, Duration::from_secs(30))
        .await;
    let arrived_ids: BTreeSet<String> = arrived
        .iter()
        .map(|message| outbox_testkit::nats::received(message).ce_id)
        .collect();
    let mut expected_ids = BTreeSet::new();
    for id in &rejected {
        let event_id: uuid::Uuid =
            sqlx::query_scalar("SELECT event_id FROM outbox_events WHERE id = $1")
                .bind(id)
                .fetch_one(pool)
                .await
                .expect("a retried event's event id");
        expected_ids.insert(event_id.to_string());
    }
    assert_eq!(arrived_ids, expected_ids, "the retried events arrived");
    assert_eq!(
        rows(pool)
            .await
            .into_iter()
            .find(|row| row.0 == hostile)
            .map(|row| row.1),
        Some("dead".to_owned()),
        "the other group's event stays dead"
    );
    browser
        .wait_until(
            &format!(
                "document.querySelector('section.group[data-fingerprint=\"{rejected_group}\"]') === null"
            ),
            PAGE_WAIT,
        )
        .await;
    browser.click(&browser.find("#tab-overview").await).await;
    let totals = table_counts(pool, None).await;
    assert_eq!(totals["dead"], 1);
    wait_for_counts(&browser, "#totals", &totals).await;

    // A published event has no retry button.
    browser
        .navigate(&format!("http://{address}/ui#event/{}", published[0]))
        .await;
    browser
        .wait_for_text("#event-state", "published", PAGE_WAIT)
        .await;
    assert!(
        browser.try_find("#event-retry").await.is_none(),
        "a published event offers no retry"
    );

    browser.assert_no_severe_logs(&["status of 401"]).await;
    drop(browser);
    drop(relay);
    orders_stream.delete().await;
    invoices_stream.delete().await;
}

/// A running `outbox-relay ui`, killed and reaped when dropped; its log
/// goes to a file, shown when the test fails.
struct PageProcess {
    child: Child,
    dir: PathBuf,
}

impl PageProcess {
    fn spawn(database_url: &str) -> PageProcess {
        let dir = std::env::temp_dir().join(format!(
            "outbox-relay-ui-test-{}",
            uuid::Uuid::now_v7().simple()
        ));
        std::fs::create_dir_all(&dir).expect("create the page's temp dir");
        let log = std::fs::File::create(dir.join("ui.log")).expect("create the page's log");
        let child = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
            .args([
                "ui",
                "--database-url",
                database_url,
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("OUTBOX_UI_TOKEN")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn outbox-relay ui");
        PageProcess { child, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("ui.log")).unwrap_or_default()
    }

    /// The address it listens on, from its log.
    async fn address(&self) -> String {
        let find = |log: &str| {
            let line = log
                .lines()
                .find(|line| line.contains("http endpoint listening"))?;
            let rest = &line[line.find("address=")? + "address=".len()..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            Some(rest[..end].trim_matches('"').to_owned())
        };
        let mut address = None;
        let logged = wait_until(Duration::from_secs(30), || {
            address = find(&self.log());
            let found = address.is_some();
            async move { found }
        })
        .await;
        assert!(
            logged,
            "outbox-relay ui never logged its address:\n{}",
            self.log()
        );
        address.unwrap_or_default()
    }
}

impl Drop for PageProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- outbox-relay ui log ----\n{}", self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_without_tokens_offers_no_action() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let topic = unique_name("ui-read-only");
    // A dead event as a relay leaves it, written directly: no broker here.
    let dead: i64 = sqlx::query_scalar(
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, \
           aggregate_id, topic, payload, state, attempts, last_error) \
         VALUES ($1, 'invoice.issued', '/shop/checkout', 'invoice', 'invoice-1', $2, \
           '{\"total\": \"12.50\"}', 'dead', 3, 'no JetStream stream takes subject `x`') \
         RETURNING id",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(&topic)
    .fetch_one(db.pool())
    .await
    .expect("insert a dead event");

    let page = PageProcess::spawn(db.url());
    let address = page.address().await;
    let browser = Browser::start().await;
    browser
        .navigate(&format!("http://{address}/ui#overview"))
        .await;
    browser
        .wait_for(&format!("#topics tr[data-topic=\"{topic}\"]"), PAGE_WAIT)
        .await;
    wait_for_counts(
        &browser,
        "#totals",
        &BTreeMap::from([
            ("pending".to_owned(), 0),
            ("in_flight".to_owned(), 0),
            ("retrying".to_owned(), 0),
            ("dead".to_owned(), 1),
            ("published".to_owned(), 0),
        ]),
    )
    .await;
    browser
        .wait_for_text("#broker-state", "not in this process", PAGE_WAIT)
        .await;
    let shown = |selector: &str| {
        format!(
            "Array.from(document.querySelectorAll('{selector}')) \
               .some(function (found) {{ return found.getClientRects().length > 0; }})"
        )
    };
    assert_eq!(
        browser
            .execute(&format!("return {};", shown("#signin")), Vec::new())
            .await,
        json!(false),
        "a read-only page asks for no token"
    );

    browser.click(&browser.find("#tab-dead").await).await;
    browser
        .wait_for(
            &format!("tr.dead-event[data-event-id=\"{dead}\"]"),
            PAGE_WAIT,
        )
        .await;
    assert_eq!(
        browser
            .execute(
                &format!(
                    "return [{}, {}];",
                    shown("button.group-retry"),
                    shown("button.group-discard")
                ),
                Vec::new(),
            )
            .await,
        json!([false, false]),
        "a read-only page shows no group action"
    );
    browser
        .click(
            &browser
                .find(&format!("tr.dead-event[data-event-id=\"{dead}\"]"))
                .await,
        )
        .await;
    browser
        .wait_for_text("#event-state", "dead", PAGE_WAIT)
        .await;
    assert_eq!(
        browser
            .execute(
                &format!(
                    "return [{}, {}];",
                    shown("#event-retry"),
                    shown("#event-discard")
                ),
                Vec::new(),
            )
            .await,
        json!([false, false]),
        "a read-only page offers no action on an event"
    );
    assert_eq!(
        scalar(
            db.pool(),
            format!("SELECT COUNT(*) FROM outbox_events WHERE id = {dead} AND state = 'dead'")
        )
        .await,
        1
    );
    browser.assert_no_severe_logs(&[]).await;
}
