//! What only the Redis Streams adapter has: a group it creates from the
//! start of the stream reads a backlog written before; entries pending on
//! a consumer that died are taken over after `claim_idle`; a dead letter
//! carries its reason, its source and every field of the original, which
//! stays pending until Redis added the dead letter; Redis out of reach and
//! back loses nothing, and a consumer started before Redis answers waits
//! for it; bad settings are refused naming the problem.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::redis::{
    DEAD_LETTER_REASON_FIELD, DEAD_LETTER_SOURCE_FIELD, RedisConsumerConfig, RedisInboxConsumer,
};
use outbox_inbox::{Error, InboxBackend};
use outbox_testkit::redis::{read_stream, redis_url};
use outbox_testkit::{TcpProxy, TestBackend, TestDatabase};
use redis::AsyncCommands;

use crate::broker::{BrokerSide, Settings};
use crate::fixture::{
    each_applied_once, effects, eventually, inbox, prepare, wait_for_effects,
    wait_until_all_acknowledged,
};
use crate::ledger::{Ledger, credit};
use crate::redis_side::{RedisSide, relay_entry};

/// Entries added before the group existed are read: the consumer creates
/// the group at the start of the stream.
async fn a_group_created_from_the_start_reads_the_backlog<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = RedisSide::create("backlog", 1).await;
    let backlog: Vec<_> = (0..12)
        .map(|seq| relay_entry(&credit(&format!("acct-{}", seq % 3), seq)))
        .collect();
    broker.add(&backlog).await;
    let groups: redis::Value = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(&broker.streams[0])
        .query_async(&mut broker.connection())
        .await
        .expect("XINFO GROUPS");
    assert_eq!(groups, redis::Value::Array(Vec::new()), "no group yet");

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    wait_for_effects(db, 12).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!((stats.processed, stats.duplicates), (12, 0), "{stats:?}");
    each_applied_once(db, 12).await;
}

/// A consumer killed with entries read and not acknowledged leaves them
/// pending under its name; another consumer of the group takes them over
/// once they were idle for `claim_idle`, and applies each once.
async fn entries_pending_on_a_dead_consumer_are_taken_over_after_claim_idle<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    const EVENTS: i64 = 24;
    prepare(db).await;
    let broker = RedisSide::create("takeover", 1).await;
    let messages: Vec<_> = (0..EVENTS)
        .map(|seq| credit(&format!("acct-{}", seq % 4), seq))
        .collect();
    broker.publish(&messages).await;
    let ledger = Arc::new(Ledger::default());
    let mut dead = broker.config(Settings::default());
    dead.consumer_name = "dead".to_owned();
    ledger.gate.close_after(4);
    let killed = broker.start_configured(inbox(db), ledger.handler(), dead);
    eventually("a handler run held", || async { ledger.gate.held() >= 1 }).await;
    killed.crash().await;
    ledger.gate.open();
    // A commit the killed consumer sent lands on the server still.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = pending_on(&broker, "dead").await;
    assert!(left > 0, "the dead consumer left entries pending");
    let applied_at_kill = effects(db).await;
    assert!(
        applied_at_kill < EVENTS,
        "{applied_at_kill} applied: not mid-stream"
    );

    let mut heir = broker.config(Settings::default());
    heir.consumer_name = "heir".to_owned();
    heir.claim_idle = Duration::from_millis(1500);
    let idle_at_start = least_idle_on(&broker, "dead").await;
    let started = tokio::time::Instant::now();
    let heir_claim_idle = heir.claim_idle;
    let running = broker.start_configured(inbox(db), ledger.handler(), heir);
    wait_for_effects(db, EVENTS).await;
    wait_until_all_acknowledged(&broker).await;
    let taken_over_after = started.elapsed();
    let stats = running.stop().await;
    assert_eq!(pending_on(&broker, "dead").await, 0, "all taken over");
    assert!(
        taken_over_after + idle_at_start >= heir_claim_idle,
        "the entries were taken over only once idle for claim_idle: after \
         {taken_over_after:?}, idle {idle_at_start:?} before"
    );
    assert_eq!(stats.dead_lettered, 0, "{stats:?}");
    assert_eq!(
        stats.processed,
        u64::try_from(EVENTS - applied_at_kill).expect("a count"),
        "the heir applied what the dead consumer had not: {stats:?}"
    );
    each_applied_once(db, EVENTS).await;
}

/// How long the entry pending on `consumer` that was delivered last has
/// been idle.
async fn least_idle_on(broker: &RedisSide, consumer: &str) -> Duration {
    let pending = pending_entries_of(broker, consumer).await;
    let idle = pending
        .iter()
        .map(|(_, _, idle, _)| *idle)
        .min()
        .expect("entries pending");
    Duration::from_millis(idle)
}

/// Entries pending on `consumer` in the side's group.
async fn pending_on(broker: &RedisSide, consumer: &str) -> usize {
    pending_entries_of(broker, consumer).await.len()
}

/// `(id, consumer, idle ms, deliveries)` of each entry pending on
/// `consumer` in the side's group (`XPENDING`).
async fn pending_entries_of(broker: &RedisSide, consumer: &str) -> Vec<(String, String, u64, u64)> {
    redis::cmd("XPENDING")
        .arg(&broker.streams[0])
        .arg(&broker.group)
        .arg("-")
        .arg("+")
        .arg(1000)
        .arg(consumer)
        .query_async(&mut broker.connection())
        .await
        .expect("XPENDING")
}

/// Poison whose dead-letter stream cannot take it (the key holds a
/// string) stays pending, unacknowledged; once the key is free, the dead
/// letter is added with every field of the original, its reason and its
/// source, and only then is the original acknowledged.
async fn a_dead_letter_carries_reason_and_source_and_is_added_before_the_ack<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let broker = RedisSide::create("dead-letter", 1).await;
    let dead_letter_stream = RedisSide::dead_letter_stream(&broker.streams[0]);
    let mut connection = broker.connection();
    let _: () = connection
        .set(&dead_letter_stream, "not a stream")
        .await
        .expect("SET");
    let mut poison = relay_entry(&credit("acct-poison", 0));
    poison.id = None;
    let ids = broker.add(&[poison.clone()]).await;

    let ledger = Arc::new(Ledger::default());
    let running = broker.start(inbox, ledger.handler(), Settings::default());
    eventually("the poison read", || async { broker.pending().await == 1 }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        broker.pending().await,
        1,
        "not acknowledged without a dead letter"
    );
    assert_eq!(broker.acknowledged().await, 0);

    let _: () = connection.del(&dead_letter_stream).await.expect("DEL");
    eventually("the dead letter", || async {
        broker.dead_letter_count().await == 1
    })
    .await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!((stats.dead_lettered, stats.processed), (1, 0), "{stats:?}");

    let letters = read_stream(
        &mut connection,
        &dead_letter_stream,
        1,
        Duration::from_secs(5),
    )
    .await;
    let fields: &HashMap<String, String> = &letters[0].1;
    assert!(
        fields[DEAD_LETTER_REASON_FIELD].contains("`id`"),
        "{fields:?}"
    );
    assert_eq!(
        fields[DEAD_LETTER_SOURCE_FIELD],
        format!("{}/{}", broker.streams[0], ids[0])
    );
    for (name, value) in poison.fields() {
        assert_eq!(
            fields.get(&name).map(String::as_bytes),
            Some(value.as_slice()),
            "{name} travels along"
        );
    }
}

/// Redis out of reach (a proxy cut between the consumer and the server):
/// the consumer retries the connection, and once Redis is back every
/// event is applied once and acknowledged.
async fn redis_out_of_reach_and_back_loses_nothing<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    const EVENTS: i64 = 40;
    let inbox = prepare(db).await;
    let broker = RedisSide::create("cut", 2).await;
    let proxy = TcpProxy::in_front_of(&redis_url()).await;
    let ledger = Arc::new(Ledger::default());
    let mut config = broker.config(Settings::default());
    config.url = proxy.route(&redis_url());
    config.command_timeout = Duration::from_secs(1);
    let running = broker.start_configured(inbox, ledger.handler(), config);
    let first: Vec<_> = (0..EVENTS / 2)
        .map(|seq| credit(&format!("acct-{}", seq % 5), seq))
        .collect();
    broker.publish(&first).await;
    wait_for_effects(db, EVENTS / 2).await;

    proxy.sever();
    let second: Vec<_> = (EVENTS / 2..EVENTS)
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
}

/// A consumer started while Redis is out of reach waits for it, retrying
/// with backoff, and consumes once it answers; one whose stream key holds
/// something else than a stream fails at once, naming Redis's refusal.
async fn a_consumer_waits_for_redis_but_not_for_a_key_that_is_no_stream<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let first = prepare(db).await;
    let broker = RedisSide::create("late", 1).await;
    let proxy = TcpProxy::in_front_of(&redis_url()).await;
    proxy.sever();
    let ledger = Arc::new(Ledger::default());
    let mut config = broker.config(Settings::default());
    config.url = proxy.route(&redis_url());
    config.command_timeout = Duration::from_secs(1);
    let running = broker.start_configured(first, ledger.handler(), config);
    broker
        .publish(&[credit("acct-late", 0), credit("acct-late", 1)])
        .await;
    eventually("connection attempts", || async {
        proxy.refused_connections() >= 3
    })
    .await;
    assert_eq!(effects(db).await, 0, "nothing read while out of reach");
    proxy.restore();
    wait_for_effects(db, 2).await;
    wait_until_all_acknowledged(&broker).await;
    let stats = running.stop().await;
    assert_eq!(stats.processed, 2, "{stats:?}");

    let not_a_stream = RedisSide::create("not-a-stream", 1).await;
    let _: () = not_a_stream
        .connection()
        .set(&not_a_stream.streams[0], "a string")
        .await
        .expect("SET");
    let consumer = RedisInboxConsumer::new(
        inbox(db),
        ledger.handler(),
        not_a_stream.config(Settings::default()),
    )
    .expect("valid settings");
    let ran = tokio::time::timeout(
        Duration::from_secs(30),
        consumer.run(tokio_util::sync::CancellationToken::new()),
    )
    .await
    .expect("the consumer gives up at once");
    match ran {
        Err(Error::Redis(error)) => {
            assert!(error.to_string().contains("WRONGTYPE"), "{error}");
        }
        other => panic!("not refused: {other:?}"),
    }
}

/// Settings that cannot work are refused when the consumer is made,
/// naming the setting.
async fn bad_settings_are_refused_naming_the_problem<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    let mut no_claim_idle = RedisConsumerConfig::new(redis_url(), "group", ["orders"]);
    no_claim_idle.claim_idle = Duration::ZERO;
    let cases = [
        (
            RedisConsumerConfig::new(redis_url(), "group", [""]),
            "streams must name at least one stream",
        ),
        (
            RedisConsumerConfig::new(redis_url(), "group", Vec::<String>::new()),
            "streams must name at least one stream",
        ),
        (no_claim_idle, "claim_idle must be at least"),
        (
            RedisConsumerConfig::new("http://127.0.0.1:6379", "group", ["orders"]),
            "must be redis://",
        ),
        (
            RedisConsumerConfig::new("redis://127.0.0.1:notaport", "group", ["orders"]),
            "does not parse",
        ),
        (
            RedisConsumerConfig::new("rediss://127.0.0.1:6379", "group", ["orders"]),
            "does not support: its redis client is built without TLS",
        ),
        (
            RedisConsumerConfig::new("redis://127.0.0.1:6379", " ", ["orders"]),
            "group is empty",
        ),
    ];
    for (config, named) in cases {
        let ledger = Arc::new(Ledger::default());
        let refused = RedisInboxConsumer::new(inbox(db), ledger.handler(), config);
        match refused {
            Err(Error::Config(message)) => {
                assert!(message.contains(named), "{message} does not say {named:?}");
                assert!(message.starts_with("redis consumer: "), "{message}");
            }
            other => panic!("not refused ({named}): {other:?}"),
        }
    }
}

outbox_testkit::test_on_backends!(
    [postgres, mysql, sqlite]
    a_group_created_from_the_start_reads_the_backlog,
    entries_pending_on_a_dead_consumer_are_taken_over_after_claim_idle,
    a_dead_letter_carries_reason_and_source_and_is_added_before_the_ack,
    redis_out_of_reach_and_back_loses_nothing,
    a_consumer_waits_for_redis_but_not_for_a_key_that_is_no_stream,
    bad_settings_are_refused_naming_the_problem,
);
