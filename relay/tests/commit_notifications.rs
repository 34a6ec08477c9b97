//! Producers notify relays of commits only while a relay waits for it: a
//! relay that polls on its own says so (`quiet_notifications`), and the
//! outbox trigger then skips the `NOTIFY`, whose lock would queue the
//! producers' commits one behind the other.
//!
//! Absence is checked without a sleep: notifications arrive in commit
//! order, so once a marker sent after an insert has arrived, a notification
//! of that insert would have arrived before it.

mod support;

use std::time::Duration;

use outbox_relay::leases::LeaseStore;
use outbox_relay::source::EventSource;
use outbox_relay::store::PostgresStore;
use sqlx::postgres::PgListener;
use support::workload::enqueue_events;

const CHANNEL: &str = "outbox_events";
const MARKER: &str = "marker";
/// Longest wait for one notification.
const ARRIVAL_LIMIT: Duration = Duration::from_secs(30);

/// Insert one event, then send the marker; returns whether the insert
/// notified before the marker arrived.
async fn insert_notifies(db: &sqlx::PgPool, listener: &mut PgListener) -> bool {
    enqueue_events(db, "notified", 1, 1, 1).await;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(MARKER)
        .execute(db)
        .await
        .expect("send the marker");
    let mut notified = false;
    loop {
        let notification = tokio::time::timeout(ARRIVAL_LIMIT, listener.recv())
            .await
            .expect("the marker arrives")
            .expect("receive a notification");
        if notification.payload() == MARKER {
            return notified;
        }
        notified = true;
    }
}

#[tokio::test]
async fn producers_notify_only_while_a_relay_waits_for_it() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let store = PostgresStore::connect(db.url()).await.expect("connect");
    let mut listener = PgListener::connect(db.url()).await.expect("listen");
    listener.listen(CHANNEL).await.expect("LISTEN");

    assert!(
        !insert_notifies(db.pool(), &mut listener).await,
        "with no relay registered nobody listens, so nothing is sent"
    );

    store
        .heartbeat("relay-a", Duration::from_secs(60))
        .await
        .expect("register relay-a");
    assert!(
        insert_notifies(db.pool(), &mut listener).await,
        "a registered relay waits for notifications until it says otherwise"
    );

    let supported = store
        .quiet_notifications("relay-a", Duration::from_secs(60))
        .await
        .expect("quiet relay-a");
    assert!(supported, "PostgreSQL has commit notifications");
    assert!(
        !insert_notifies(db.pool(), &mut listener).await,
        "the only relay polls on its own: producers do not notify"
    );

    store
        .heartbeat("relay-b", Duration::from_secs(60))
        .await
        .expect("register relay-b");
    assert!(
        insert_notifies(db.pool(), &mut listener).await,
        "relay-b waits for notifications, so producers notify again"
    );

    store
        .quiet_notifications("relay-b", Duration::from_millis(1))
        .await
        .expect("quiet relay-b briefly");
    // Let the 1 ms window pass.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        insert_notifies(db.pool(), &mut listener).await,
        "once relay-b's quiet window has passed, producers notify again"
    );
}

/// The trigger reads `outbox_relays` with its owner's rights: a producer
/// with nothing but `INSERT` on `outbox_events` enqueues, and the waiting
/// relay is notified.
#[tokio::test]
async fn a_producer_with_only_insert_rights_enqueues_and_notifies() {
    let db = outbox_testkit::postgres().await;
    outbox::migrate(db.pool()).await.expect("migrate");
    let store = PostgresStore::connect(db.url()).await.expect("connect");
    store
        .heartbeat("relay-a", Duration::from_secs(60))
        .await
        .expect("register relay-a");
    let role = format!(
        "outbox_producer_{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    );
    for statement in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT INSERT ON outbox_events TO {role}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(db.pool())
            .await
            .expect("create the producer role");
    }
    let mut producer_url = url::Url::parse(db.url()).expect("database URL");
    producer_url
        .set_username(&role)
        .expect("a URL with a user name");
    let producer = sqlx::PgPool::connect(producer_url.as_str())
        .await
        .expect("connect as the producer");
    let mut listener = PgListener::connect(db.url()).await.expect("listen");
    listener.listen(CHANNEL).await.expect("LISTEN");

    let notified = insert_notifies(&producer, &mut listener).await;

    producer.close().await;
    for statement in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(db.pool())
            .await
            .expect("drop the producer role");
    }
    assert!(notified, "the producer's insert notified the waiting relay");
}
