//! What only the NATS JetStream adapter has: a durable consumer it
//! creates delivers all, so a backlog published before it existed is
//! read; a handler that runs longer than `ack_wait` is marked in progress
//! and not delivered again meanwhile; a dead letter carries its reason
//! and source, and the original is terminated only once a stream stored
//! the dead letter; NATS out of reach and back loses nothing; bad settings
//! are refused naming the problem.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::nats::{NatsConsumerConfig, NatsInboxConsumer};
use outbox_inbox::{Error, InboxBackend};
use outbox_testkit::nats::{TestStream, nats_url};
use outbox_testkit::{TcpProxy, TestBackend, TestDatabase, unique_name};

use crate::broker::{BrokerSide, Message, Settings};
use crate::fixture::{
    each_applied_once, effects, eventually, inbox, prepare, wait_for_effects,
    wait_until_all_acknowledged,
};
use crate::ledger::{Ledger, credit};
use crate::nats_side::{ACK_WAIT, NatsSide};

/// Messages published before the durable consumer existed are read: the
/// consumer creates it delivering all.
async fn a_durable_consumer_created_by_the_inbox_reads_the_backlog<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = NatsSide::create("backlog", 1).await;
    let backlog: Vec<Message> = (0..12)
        .map(|seq| credit(&format!("acct-{}", seq % 3), seq))
        .collect();
    broker.publish(&backlog).await;
    assert!(
        broker.consumer_info().await.is_none(),
        "no durable consumer yet"
    );

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    wait_for_effects(db, 12).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!((stats.processed, stats.duplicates), (12, 0), "{stats:?}");
    each_applied_once(db, 12).await;
    assert!(
        broker.consumer_info().await.is_some(),
        "the durable consumer stays"
    );
}

/// A handler held three times `ack_wait` inside its transaction: the
/// consumer marks the message in progress, so the server does not deliver
/// it again; the handler runs once and the message is delivered once.
async fn a_handler_slower_than_ack_wait_is_not_delivered_again<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = NatsSide::create("slow", 1).await;
    let ledger = Arc::new(Ledger::default());
    ledger.gate.close_after(0);
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    broker.publish(&[credit("acct-slow", 0)]).await;
    eventually("the handler holds its transaction", || async {
        ledger.gate.held() == 1
    })
    .await;
    tokio::time::sleep(ACK_WAIT * 3).await;
    let info = broker.consumer_info().await.expect("the durable consumer");
    assert_eq!(
        info.num_redelivered, 0,
        "delivered again while it ran: {info:?}"
    );
    assert_eq!(info.num_ack_pending, 1, "{info:?}");
    assert_eq!(ledger.runs("acct-slow", 0), 1);

    ledger.gate.open();
    wait_for_effects(db, 1).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!((stats.processed, stats.duplicates), (1, 0), "{stats:?}");
    assert_eq!(ledger.runs("acct-slow", 0), 1, "the handler ran once");
    assert_eq!(ledger.deliveries("acct-slow", 0), 1, "delivered once");
    let info = broker.consumer_info().await.expect("the durable consumer");
    assert_eq!(info.num_redelivered, 0, "{info:?}");
    each_applied_once(db, 1).await;
}

/// Poison whose dead-letter subject no stream takes stays unacknowledged
/// (never terminated without a stored dead letter), beyond `ack_wait`;
/// once a stream takes the subject the dead letter is stored, with its
/// reason and source, and only then is the original terminated.
async fn the_original_is_terminated_only_once_its_dead_letter_is_stored<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = NatsSide::create("dead", 1).await;
    let dead_letter_stream = broker.dead_letter_stream().name().to_owned();
    let dead_letter_subjects = vec![format!("{}.dlq", broker.subject)];
    broker.dead_letter_stream().delete().await;

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    let poison = Message {
        body: b"not json".to_vec(),
        ..credit("acct-poison", 0)
    };
    broker.publish(&[poison]).await;
    tokio::time::sleep(ACK_WAIT * 2).await;
    let info = broker.consumer_info().await.expect("the durable consumer");
    assert_eq!(info.num_ack_pending, 1, "not terminated: {info:?}");
    assert_eq!(
        info.num_redelivered, 0,
        "held and marked in progress: {info:?}"
    );

    let dead_letters = TestStream::create(
        &broker.jetstream,
        &dead_letter_stream,
        &dead_letter_subjects,
    )
    .await;
    eventually("the dead letter stored", || async {
        dead_letters.message_count().await == 1
    })
    .await;
    eventually("the original terminated", || async {
        broker.unacknowledged().await == 0
    })
    .await;
    let stats = running.stop().await;
    assert_eq!(stats.dead_lettered, 1, "{stats:?}");
    let dead_letter = broker.dead_letters(1).await.remove(0);
    assert!(dead_letter.reason.contains("poison"), "{dead_letter:?}");
    assert_eq!(dead_letter.origin, broker.origin_of(0));
    assert_eq!(dead_letter.key.as_deref(), Some("acct-poison"));
    assert_eq!(dead_letter.body, b"not json");
}

/// NATS cut off (through a proxy) while messages keep coming, then back:
/// the consumer reconnects with backoff, loses nothing, applies each event
/// once; one started while NATS is out of reach waits for it.
async fn nats_out_of_reach_and_back_loses_nothing<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    const EVENTS: i64 = 20;
    let inbox = prepare(db).await;
    let broker = NatsSide::create("cut", 1).await;
    let proxy = TcpProxy::in_front_of(&nats_url()).await;
    let ledger = Arc::new(Ledger::default());
    let mut config = broker.config(Settings::default());
    config.servers = vec![proxy.route(&nats_url())];
    config.request_timeout = Duration::from_secs(1);
    let running = broker.start_configured(inbox, ledger.handler(), config.clone());
    let first: Vec<Message> = (0..EVENTS / 2)
        .map(|seq| credit(&format!("acct-{}", seq % 5), seq))
        .collect();
    broker.publish(&first).await;
    wait_for_effects(db, EVENTS / 2).await;

    proxy.sever();
    let second: Vec<Message> = (EVENTS / 2..EVENTS)
        .map(|seq| credit(&format!("acct-{}", seq % 5), seq))
        .collect();
    broker.publish(&second).await;
    eventually("reconnection attempts", || async {
        proxy.refused_connections() >= 3
    })
    .await;
    assert!(effects(db).await < EVENTS, "nothing read while cut off");
    proxy.restore();
    wait_for_effects(db, EVENTS).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    each_applied_once(db, EVENTS).await;

    // A consumer started while NATS is out of reach waits for it.
    proxy.sever();
    let waiting = broker.start_configured(crate::fixture::inbox(db), ledger.handler(), config);
    broker.publish(&[credit("acct-late", 0)]).await;
    eventually("connection attempts", || async {
        proxy.refused_connections() >= 6
    })
    .await;
    proxy.restore();
    wait_for_effects(db, EVENTS + 1).await;
    wait_until_all_acknowledged(&broker).await;
    waiting.stop().await;
    each_applied_once(db, EVENTS + 1).await;
}

/// Settings that cannot work are refused before connecting, naming the
/// setting; a stream that does not exist ends the first session naming it.
async fn bad_settings_are_refused_naming_the_problem<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let ledger = Arc::new(Ledger::default());
    let refusal = |config: NatsConsumerConfig| match NatsInboxConsumer::new(
        inbox(db),
        ledger.handler(),
        config,
    ) {
        Err(Error::Config(message)) => message,
        other => panic!("not refused: {other:?}"),
    };
    let good = NatsConsumerConfig::new(&nats_url(), "ORDERS", "billing");
    let mut empty_stream = good.clone();
    empty_stream.stream = String::new();
    assert!(refusal(empty_stream).contains("stream is empty"));
    let mut zero_ack_wait = good.clone();
    zero_ack_wait.ack_wait = Duration::ZERO;
    assert!(refusal(zero_ack_wait).contains("ack_wait"));
    let bad_url = NatsConsumerConfig::new("http://127.0.0.1:4222", "ORDERS", "billing");
    assert!(refusal(bad_url).contains("nats:// or tls://"));

    prepare(db).await;
    let missing = NatsConsumerConfig::new(&nats_url(), unique_name("missing"), "billing");
    let consumer = NatsInboxConsumer::new(inbox(db), ledger.handler(), missing).expect("valid");
    let ended = tokio::time::timeout(
        Duration::from_secs(30),
        consumer.run(tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("the consumer ends");
    match ended {
        Err(Error::Config(message)) => {
            assert!(message.contains("does not exist"), "{message}");
        }
        other => panic!("not refused: {other:?}"),
    }
}

outbox_testkit::test_on_backends!(
    [postgres, mysql, sqlite]
    a_durable_consumer_created_by_the_inbox_reads_the_backlog,
    a_handler_slower_than_ack_wait_is_not_delivered_again,
    the_original_is_terminated_only_once_its_dead_letter_is_stored,
    nats_out_of_reach_and_back_loses_nothing,
    bad_settings_are_refused_naming_the_problem,
);
