//! `KafkaInboxConsumer` against a real Kafka-API broker (tansu on
//! 127.0.0.1:9092; `OUTBOX_TEST_KAFKA_BROKERS` overrides) and real
//! databases. Start them with `scripts/test.sh --services-only`.
//!
//! Messages are produced with plain rdkafka exactly as the relay writes
//! them: CloudEvents binary mode, `ce_*` headers, key = aggregate id
//! (`outbox_testkit::kafka`).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox::Event;
use outbox_inbox::kafka::{
    DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER, KafkaConsumerConfig, KafkaInboxConsumer,
};
use outbox_inbox::{BoxError, ConsumerStats, Inbox, InboxBackend, TypedHandler};
use outbox_testkit::{TestBackend, TestDatabase, shuffled, unique_name};
use serde::{Deserialize, Serialize};
use sqlx::Transaction;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use outbox_testkit::kafka::{
    CATCH_UP, Outgoing, create_topic, group_progress, produce, read_topic, require_kafka,
    wait_until_committed,
};

use crate::support::kafka::cloud_event;

/// The event of these tests: a credit to an account, numbered per account.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(
    type = "account.credited",
    aggregate = "account",
    topic = "accounts",
    source = "/accounts"
)]
struct AccountCredited {
    #[event(aggregate_id)]
    account: String,
    seq: i64,
}

const CREATE_EFFECTS: &str = "CREATE TABLE effects (event_id VARCHAR(64) NOT NULL, \
     account VARCHAR(64) NOT NULL, seq BIGINT NOT NULL, applied BIGINT NOT NULL)";

// -------------------------------------------------------------- database --

async fn prepare<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) -> Inbox<DB> {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, CREATE_EFFECTS)
        .await
        .expect("create effects");
    Inbox::new(db.pool().clone(), "ledger").expect("inbox")
}

async fn wait_for_effects<DB: TestBackend>(db: &TestDatabase<DB>, expected: i64) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    loop {
        let applied = db.count("SELECT COUNT(*) FROM effects").await;
        if applied >= expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {applied} of {expected} effects applied in {CATCH_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `(account, seq)` of every effect, in the order they were applied.
async fn effects_in_application_order<DB: TestBackend>(
    db: &TestDatabase<DB>,
) -> Vec<(String, i64)> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_strings(
        &mut connection,
        "SELECT event_id FROM effects ORDER BY applied",
    )
    .await
    .expect("effects")
    .into_iter()
    .map(|row| {
        let (account, seq) = row.rsplit_once('/').expect("account/seq");
        (account.to_owned(), seq.parse().expect("seq"))
    })
    .collect()
}

/// Numbers every application, across the consumers of a test (and across
/// tests, which only need the order).
static APPLIED: AtomicI64 = AtomicI64::new(0);

/// The function of a [`Recorder`].
type RecordFn<DB> = Box<
    dyn for<'t> Fn(
            &'t mut Transaction<'static, DB>,
            &'t AccountCredited,
        ) -> futures::future::BoxFuture<'t, Result<(), BoxError>>
        + Send
        + Sync,
>;

/// The handler of these tests.
type Recorder<DB> = TypedHandler<AccountCredited, RecordFn<DB>>;

/// A handler that records each application as an `effects` row numbered
/// by [`APPLIED`], and fails the first `failures[(account, seq)]`
/// attempts of an event.
fn recorder<DB: InboxBackend + TestBackend>(
    failures: HashMap<(String, i64), u32>,
    attempts: Arc<Mutex<HashMap<(String, i64), u32>>>,
) -> Recorder<DB> {
    let function: RecordFn<DB> = Box::new(move |tx, event: &AccountCredited| {
        let key = (event.account.clone(), event.seq);
        let attempt = {
            let mut attempts = attempts.lock().expect("attempts");
            let attempt = attempts.entry(key.clone()).or_insert(0);
            *attempt += 1;
            *attempt
        };
        let fail = attempt <= failures.get(&key).copied().unwrap_or(0);
        let applied = APPLIED.fetch_add(1, Ordering::SeqCst);
        let sql = format!(
            "INSERT INTO effects (event_id, account, seq, applied) VALUES ('{}/{}', '{}', {}, {applied})",
            event.account, event.seq, event.account, event.seq
        );
        Box::pin(async move {
            DB::execute(&mut **tx, &sql).await?;
            if fail {
                return Err::<(), BoxError>(format!("attempt {attempt} fails on purpose").into());
            }
            Ok(())
        })
    });
    outbox_inbox::typed::<AccountCredited, _, DB>(function)
}

fn config(brokers: &str, group: &str, topic: &str) -> KafkaConsumerConfig {
    let mut config =
        KafkaConsumerConfig::new(vec![brokers.to_owned()], group, vec![topic.to_owned()]);
    config.max_in_flight = 16;
    config.retry_base_delay = Duration::from_millis(50);
    config.retry_max_delay = Duration::from_millis(200);
    config.commit_interval = Duration::from_millis(100);
    config.client_options = BTreeMap::from([
        // Groups on tansu form slowly with the default session timeout.
        ("session.timeout.ms".to_owned(), "6000".to_owned()),
        ("heartbeat.interval.ms".to_owned(), "500".to_owned()),
    ]);
    config
}

fn start<DB: InboxBackend + TestBackend>(
    inbox: Inbox<DB>,
    handler: Recorder<DB>,
    config: KafkaConsumerConfig,
) -> (
    CancellationToken,
    JoinHandle<Result<ConsumerStats, outbox_inbox::Error>>,
) {
    let consumer = KafkaInboxConsumer::new(inbox, handler, config).expect("consumer");
    let stop = CancellationToken::new();
    let running = tokio::spawn(consumer.run(stop.clone()));
    (stop, running)
}

async fn stop_and_collect(
    stop: CancellationToken,
    running: JoinHandle<Result<ConsumerStats, outbox_inbox::Error>>,
) -> ConsumerStats {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the consumer stops within 30 s")
        .expect("consumer task")
        .expect("consumer run")
}

fn credited(account: &str, seq: i64) -> AccountCredited {
    AccountCredited {
        account: account.to_owned(),
        seq,
    }
}

// ------------------------------------------------------------- scenarios --

/// Every event three times, shuffled, over several partitions and keys:
/// applied once each, and per account in the order of first production.
async fn triple_delivery_applies_each_event_once_in_key_order<DB: InboxBackend + TestBackend>(
    db: TestDatabase<DB>,
) {
    let brokers = require_kafka().await;
    let inbox = prepare(&db).await;
    let topic = unique_name("triple");
    let group = unique_name("group");
    create_topic(&brokers, &topic, 4).await;

    let events: Vec<(AccountCredited, String)> = (0..8)
        .flat_map(|account| (0..6).map(move |seq| (format!("acct-{account}"), seq)))
        .map(|(account, seq)| (credited(&account, seq), Uuid::now_v7().to_string()))
        .collect();
    let deliveries = shuffled(
        events
            .iter()
            .flat_map(|event| [event.clone(), event.clone(), event.clone()])
            .collect::<Vec<_>>(),
        0x5eed_u64,
    );
    // Per account, the order in which its events first appear.
    let mut expected: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (event, _) in &deliveries {
        let order = expected.entry(event.account.clone()).or_default();
        if !order.contains(&event.seq) {
            order.push(event.seq);
        }
    }
    let messages: Vec<Outgoing> = deliveries
        .iter()
        .map(|(event, id)| cloud_event(event, id))
        .collect();
    produce(&brokers, &topic, &messages).await;

    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let (stop, running) = start(
        inbox,
        recorder::<DB>(HashMap::new(), attempts),
        config(&brokers, &group, &topic),
    );
    wait_for_effects(&db, 48).await;
    wait_until_committed(&brokers, &group, &topic, 4).await;
    let stats = stop_and_collect(stop, running).await;

    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (48, 96, 0),
        "{stats:?}"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 48);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        48
    );
    let mut applied: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (account, seq) in effects_in_application_order(&db).await {
        applied.entry(account).or_default().push(seq);
    }
    assert_eq!(applied, expected, "per-account order of first application");
}

mod triple_delivery {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        super::triple_delivery_applies_each_event_once_in_key_order(
            outbox_testkit::postgres().await,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mariadb() {
        super::triple_delivery_applies_each_event_once_in_key_order(outbox_testkit::mysql().await)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        super::triple_delivery_applies_each_event_once_in_key_order(outbox_testkit::sqlite().await)
            .await;
    }
}

/// A handler failing twice for one event: retried in place, applied once,
/// and the other keys keep flowing meanwhile while the later events of its
/// own key wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_event_is_retried_in_place_without_blocking_other_keys() {
    let brokers = require_kafka().await;
    let db = outbox_testkit::postgres().await;
    let inbox = prepare(&db).await;
    let topic = unique_name("retry");
    let group = unique_name("group");
    create_topic(&brokers, &topic, 2).await;

    let messages: Vec<Outgoing> = (0..5)
        .flat_map(|seq| (0..4).map(move |account| credited(&format!("acct-{account}"), seq)))
        .map(|event| cloud_event(&event, &Uuid::now_v7().to_string()))
        .collect();
    produce(&brokers, &topic, &messages).await;

    let failing = ("acct-0".to_owned(), 1);
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let mut settings = config(&brokers, &group, &topic);
    settings.retry_base_delay = Duration::from_secs(1);
    settings.retry_max_delay = Duration::from_secs(2);
    let (stop, running) = start(
        inbox,
        recorder::<sqlx::Postgres>(HashMap::from([(failing.clone(), 2)]), Arc::clone(&attempts)),
        settings,
    );
    wait_for_effects(&db, 20).await;
    wait_until_committed(&brokers, &group, &topic, 2).await;
    let stats = stop_and_collect(stop, running).await;

    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (20, 0, 0),
        "{stats:?}"
    );
    assert_eq!(stats.retried, 2, "{stats:?}");
    assert_eq!(attempts.lock().expect("attempts").get(&failing), Some(&3));
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE account = 'acct-0' AND seq = 1")
            .await,
        1
    );

    let order = effects_in_application_order(&db).await;
    let position = |account: &str, seq: i64| {
        order
            .iter()
            .position(|(a, s)| a == account && *s == seq)
            .expect("applied")
    };
    let failed_at = position("acct-0", 1);
    for seq in 2..5 {
        assert!(
            position("acct-0", seq) > failed_at,
            "acct-0#{seq} waited for acct-0#1: {order:?}"
        );
    }
    for account in ["acct-1", "acct-2", "acct-3"] {
        for seq in 0..5 {
            assert!(
                position(account, seq) < failed_at,
                "{account}#{seq} did not wait for the retries of acct-0#1: {order:?}"
            );
        }
    }
}

/// Poison messages go to `<topic>.dlq` with their reason at once, and the
/// partition keeps flowing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn poison_messages_are_dead_lettered_and_the_partition_keeps_flowing() {
    let brokers = require_kafka().await;
    let db = outbox_testkit::postgres().await;
    let inbox = prepare(&db).await;
    let topic = unique_name("poison");
    let group = unique_name("group");
    create_topic(&brokers, &topic, 1).await;

    let good = |seq: i64| cloud_event(&credited("acct-p", seq), &Uuid::now_v7().to_string());
    let mut no_id = good(100);
    no_id.headers.retain(|(name, _)| name != "ce_id");
    let mut not_json = good(101);
    not_json.value = b"this is not json".to_vec();
    let mut unknown_type = good(102);
    for (name, value) in &mut unknown_type.headers {
        if name == "ce_type" {
            *value = "account.debited".to_owned();
        }
    }
    let messages = vec![
        good(0),
        no_id,
        good(1),
        not_json,
        good(2),
        unknown_type,
        good(3),
    ];
    produce(&brokers, &topic, &messages).await;

    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let (stop, running) = start(
        inbox,
        recorder::<sqlx::Postgres>(HashMap::new(), Arc::clone(&attempts)),
        config(&brokers, &group, &topic),
    );
    wait_for_effects(&db, 4).await;
    wait_until_committed(&brokers, &group, &topic, 1).await;
    let stats = stop_and_collect(stop, running).await;
    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (4, 0, 3),
        "{stats:?}"
    );
    assert_eq!(
        effects_in_application_order(&db).await,
        (0..4)
            .map(|seq| ("acct-p".to_owned(), seq))
            .collect::<Vec<_>>()
    );
    assert!(
        attempts.lock().expect("attempts").len() == 4,
        "the handler never saw a poison message"
    );

    let dead = read_topic(&brokers, &format!("{topic}.dlq"), 3).await;
    let expectations = [
        (
            1,
            "`id`",
            b"{\"account\":\"acct-p\",\"seq\":100}".as_slice(),
        ),
        (3, "does not decode", b"this is not json".as_slice()),
        (5, "unexpected event type `account.debited`", b"".as_slice()),
    ];
    for ((key, headers, value), (offset, reason, body)) in dead.iter().zip(expectations) {
        assert_eq!(key.as_deref(), Some("acct-p"));
        let found = headers
            .get(DEAD_LETTER_REASON_HEADER)
            .unwrap_or_else(|| panic!("no reason header: {headers:?}"));
        assert!(found.contains(reason), "reason {found:?} lacks {reason:?}");
        assert_eq!(
            headers.get(DEAD_LETTER_SOURCE_HEADER),
            Some(&format!("{topic}/0/{offset}"))
        );
        assert_eq!(
            headers.get("ce_source").map(String::as_str),
            Some("/accounts")
        );
        if !body.is_empty() {
            assert_eq!(value.as_slice(), body);
        }
    }
}

/// A consumer that dies after its database commits but before its offset
/// commits: the next one reads those messages again and the inbox reports
/// them as duplicates; no effect is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_database_and_offset_commit_yields_duplicates_only() {
    let brokers = require_kafka().await;
    let db = outbox_testkit::postgres().await;
    let inbox = prepare(&db).await;
    let topic = unique_name("crash");
    let group = unique_name("group");
    create_topic(&brokers, &topic, 2).await;

    let messages: Vec<Outgoing> = (0..10)
        .map(|n| {
            cloud_event(
                &credited(&format!("acct-{}", n % 3), n),
                &Uuid::now_v7().to_string(),
            )
        })
        .collect();
    produce(&brokers, &topic, &messages).await;

    // Consumer A never gets to commit an offset: its commit interval is an
    // hour, and it is aborted (as a crash) once the effects are in.
    let mut first = config(&brokers, &group, &topic);
    first.commit_interval = Duration::from_secs(3600);
    let (_stop_a, running_a) = start(
        Inbox::new(db.pool().clone(), "ledger").expect("inbox"),
        recorder::<sqlx::Postgres>(HashMap::new(), Arc::new(Mutex::new(HashMap::new()))),
        first,
    );
    wait_for_effects(&db, 10).await;
    running_a.abort();
    let aborted = running_a.await;
    assert!(
        aborted.as_ref().is_err_and(|error| error.is_cancelled()),
        "{aborted:?}"
    );
    let (brokers_owned, group_owned, topic_owned) = (brokers.clone(), group.clone(), topic.clone());
    let progress = tokio::task::spawn_blocking(move || {
        group_progress(&brokers_owned, &group_owned, &topic_owned, 2)
    })
    .await
    .expect("progress");
    assert!(
        progress.iter().all(|(committed, _)| committed.is_none()),
        "the crashed consumer committed nothing: {progress:?}"
    );

    // Consumer B, same group, reads everything again.
    let (stop_b, running_b) = start(
        inbox,
        recorder::<sqlx::Postgres>(HashMap::new(), Arc::new(Mutex::new(HashMap::new()))),
        config(&brokers, &group, &topic),
    );
    wait_until_committed(&brokers, &group, &topic, 2).await;
    let stats = stop_and_collect(stop_b, running_b).await;
    assert_eq!(
        (stats.processed, stats.duplicates, stats.dead_lettered),
        (0, 10, 0),
        "{stats:?}"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 10);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        10
    );
}

/// Two consumers of one group share the partitions; the second one's
/// arrival revokes and reassigns partitions mid-stream. Every event is
/// applied once, and the group commits to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebalance_mid_stream_applies_each_event_once() {
    let brokers = require_kafka().await;
    let db = outbox_testkit::postgres().await;
    let topic = unique_name("rebalance");
    let group = unique_name("group");
    create_topic(&brokers, &topic, 4).await;
    let inbox = prepare(&db).await;
    let batch = |range: std::ops::Range<i64>| -> Vec<Outgoing> {
        range
            .map(|n| {
                cloud_event(
                    &credited(&format!("acct-{}", n % 6), n),
                    &Uuid::now_v7().to_string(),
                )
            })
            .collect()
    };

    let (stop_a, running_a) = start(
        inbox,
        recorder::<sqlx::Postgres>(HashMap::new(), Arc::new(Mutex::new(HashMap::new()))),
        config(&brokers, &group, &topic),
    );
    produce(&brokers, &topic, &batch(0..30)).await;
    wait_for_effects(&db, 30).await;

    let (stop_b, running_b) = start(
        Inbox::new(db.pool().clone(), "ledger").expect("inbox"),
        recorder::<sqlx::Postgres>(HashMap::new(), Arc::new(Mutex::new(HashMap::new()))),
        config(&brokers, &group, &topic),
    );
    produce(&brokers, &topic, &batch(30..60)).await;
    wait_for_effects(&db, 60).await;
    wait_until_committed(&brokers, &group, &topic, 4).await;
    let (a, b) = (
        stop_and_collect(stop_a, running_a).await,
        stop_and_collect(stop_b, running_b).await,
    );
    assert_eq!(a.processed + b.processed, 60, "{a:?} {b:?}");
    assert_eq!(a.dead_lettered + b.dead_lettered, 0, "{a:?} {b:?}");
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 60);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        60
    );
    let mut applied: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (account, seq) in effects_in_application_order(&db).await {
        applied.entry(account).or_default().push(seq);
    }
    for (account, seqs) in &applied {
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]),
            "{account} applied out of order: {seqs:?}"
        );
    }
}
