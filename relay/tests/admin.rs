//! [`RelayAdmin`], the operator's commands as a library, through the
//! public API only: the counts it reports and the dead events it lists,
//! retries and discards are checked against what the table holds, and a
//! selector that matches nothing it names is an error. Once per backend.

use outbox::OutboxMessage;
use outbox_relay::admin::{DeadSelector, RelayAdmin};
use outbox_relay::{DatabaseUrl, Error, EventSourceKind};
use outbox_testkit::{TestBackend, TestDatabase};

const TOPIC: &str = "admin-orders";

/// Enqueue two events of `order:1`, then one each of `order:2` and
/// `order:3`, in one transaction; their event ids in that order.
async fn enqueue<DB: outbox::Backend + TestBackend>(db: &TestDatabase<DB>) -> Vec<String> {
    let message = |aggregate_id: &str, sequence: u32| {
        OutboxMessage::new(
            "order.changed",
            "/orders",
            "order",
            aggregate_id,
            TOPIC,
            serde_json::value::to_raw_value(&serde_json::json!({ "sequence": sequence }))
                .expect("a JSON payload"),
        )
    };
    let messages = vec![
        message("1", 1),
        message("1", 2),
        message("2", 3),
        message("3", 4),
    ];
    let mut tx = db.pool().begin().await.expect("begin");
    let ids = outbox::OutboxWriter::new()
        .enqueue_messages(&mut tx, messages)
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    ids.iter().map(ToString::to_string).collect()
}

/// Make the events of `event_ids` dead, as the relay leaves them after
/// their last attempt.
async fn kill<DB: TestBackend>(db: &TestDatabase<DB>, event_ids: &[&str]) {
    let quoted: Vec<String> = event_ids.iter().map(|id| format!("'{id}'")).collect();
    let sql = format!(
        "UPDATE outbox_events SET state = 'dead', attempts = 3, \
         last_error = 'rejected by the broker: too large' WHERE event_id IN ({})",
        quoted.join(", ")
    );
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, &sql)
        .await
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
}

async fn admin_reads_and_repairs_dead_events<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let ids = enqueue(db).await;
    kill(db, &[&ids[0], &ids[2]]).await;
    let url: DatabaseUrl = db.url().parse().expect("the test database's URL");
    let admin = RelayAdmin::connect(url).await.expect("connect");

    let status = admin.status(EventSourceKind::Poll).await.expect("status");
    assert_eq!((status.table.pending, status.table.dead), (2, 2));
    let topic = status
        .table
        .topics
        .iter()
        .find(|topic| topic.topic == TOPIC)
        .expect("the topic's counts");
    assert_eq!((topic.pending, topic.dead), (2, 2));

    let dead = admin
        .dead_events(&DeadSelector::All, 10)
        .await
        .expect("list the dead events");
    let listed: Vec<(&str, &str, i32)> = dead
        .iter()
        .map(|event| {
            (
                event.event_id.as_str(),
                event.aggregate_id.as_str(),
                event.attempts,
            )
        })
        .collect();
    assert_eq!(
        listed,
        [(ids[0].as_str(), "1", 3), (ids[2].as_str(), "2", 3)]
    );
    assert_eq!(
        dead[0].last_error.as_deref(),
        Some("rejected by the broker: too large")
    );
    let one = admin
        .dead_events(&DeadSelector::aggregate("order:2").expect("a selector"), 10)
        .await
        .expect("list one aggregate's dead events");
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].event_id, ids[2]);

    // Naming what is not dead is an error; `All` matching nothing is not.
    let missing = admin
        .retry_dead(&DeadSelector::EventId(ids[3].clone()))
        .await
        .expect_err("a pending event is not dead");
    assert!(
        matches!(&missing, Error::NotFound(message) if message.contains(&ids[3])),
        "{missing}"
    );
    let missing = admin
        .discard_dead(&DeadSelector::aggregate("order:3").expect("a selector"))
        .await
        .expect_err("order:3 has no dead event");
    assert!(
        matches!(&missing, Error::NotFound(message) if message.contains("order:3")),
        "{missing}"
    );

    let retried = admin
        .retry_dead(&DeadSelector::aggregate("order:1").expect("a selector"))
        .await
        .expect("retry order:1");
    assert_eq!(retried, 1);
    let discarded = admin
        .discard_dead(&DeadSelector::EventId(ids[2].clone()))
        .await
        .expect("discard order:2's event");
    assert_eq!(discarded, 1);
    assert_eq!(
        admin
            .discard_dead(&DeadSelector::All)
            .await
            .expect("discard nothing"),
        0
    );
    let status = admin.status(EventSourceKind::Poll).await.expect("status");
    assert_eq!((status.table.pending, status.table.dead), (3, 0));
    assert_eq!(
        db.count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{}' AND state = 'pending' \
             AND attempts = 0",
            ids[0]
        ))
        .await,
        1,
        "a retried event starts its attempts again"
    );
}

/// The WAL source's status, on a database that has no WAL to stream, is
/// refused with the reason, and so is a malformed aggregate selector.
async fn admin_refuses_what_cannot_be_done<DB: outbox::Backend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let url: DatabaseUrl = db.url().parse().expect("the test database's URL");
    let backend = url.backend();
    let admin = RelayAdmin::connect(url).await.expect("connect");
    let logical = admin.status(EventSourceKind::Logical).await;
    if backend == "postgres" {
        // PostgreSQL could stream, but this database never did.
        let refused = logical.expect_err("the logical source was never prepared here");
        assert!(
            matches!(&refused, Error::Logical(message) if message.contains("never prepared")),
            "{refused}"
        );
    } else {
        let refused = logical.expect_err("no logical source off PostgreSQL");
        assert!(
            matches!(&refused, Error::Logical(message) if message.contains("needs PostgreSQL")),
            "{refused}"
        );
    }
    for malformed in ["order", ":42", "order:", ""] {
        let refused = DeadSelector::aggregate(malformed).expect_err("a malformed aggregate");
        assert!(
            matches!(&refused, Error::InvalidArgument(message) if message.contains("TYPE:ID")),
            "{malformed}: {refused}"
        );
    }
}

outbox_testkit::test_on_every_backend!(
    admin_reads_and_repairs_dead_events,
    admin_refuses_what_cannot_be_done
);
