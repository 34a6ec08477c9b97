//! The inbox core against real PostgreSQL, MariaDB and SQLite: every event's
//! effects are applied once however often and in whatever order it is
//! delivered, racing deliveries included.

use std::sync::Arc;
use std::time::Duration;

use outbox_inbox::{BoxError, Error, Inbox, InboxBackend, Outcome, PruneSettings};
use outbox_testkit::{TestBackend, TestDatabase, shuffled};

const CREATE_EFFECTS: &str = "CREATE TABLE effects (event_id VARCHAR(64) NOT NULL)";

async fn prepare<DB: InboxBackend + TestBackend>(db: &TestDatabase<DB>) -> Inbox<DB> {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, CREATE_EFFECTS)
        .await
        .expect("create effects");
    Inbox::new(db.pool().clone(), "billing").expect("inbox")
}

/// Apply the effect of `event_id`: one row in `effects`, so a second
/// application would show as a second row.
async fn apply<DB: InboxBackend + TestBackend>(
    inbox: &Inbox<DB>,
    event_id: &str,
    pause: Duration,
    fail: bool,
) -> Result<Outcome<()>, Error> {
    let sql = format!("INSERT INTO effects (event_id) VALUES ('{event_id}')");
    inbox
        .process(event_id, async |tx| {
            DB::execute(&mut *tx, &sql).await?;
            tokio::time::sleep(pause).await;
            if fail {
                return Err::<(), BoxError>("the handler failed on purpose".into());
            }
            Ok(())
        })
        .await
}

async fn triple_delivery_in_random_order_applies_each_event_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = Arc::new(prepare(db).await);
    let events: Vec<String> = (0..60).map(|n| format!("evt-{n}")).collect();
    let deliveries: Vec<String> = events
        .iter()
        .flat_map(|id| [id.clone(), id.clone(), id.clone()])
        .collect();
    let deliveries = shuffled(deliveries, 0x5eed);

    // Eight workers take deliveries concurrently, as a consumer with eight
    // messages in flight would.
    let queue = Arc::new(tokio::sync::Mutex::new(deliveries));
    let mut workers = Vec::new();
    for _ in 0..8 {
        let inbox = Arc::clone(&inbox);
        let queue = Arc::clone(&queue);
        workers.push(tokio::spawn(async move {
            let mut processed = 0;
            let mut duplicates = 0;
            loop {
                let Some(event_id) = queue.lock().await.pop() else {
                    break;
                };
                match apply(&inbox, &event_id, Duration::ZERO, false)
                    .await
                    .expect("process")
                {
                    Outcome::Processed(()) => processed += 1,
                    Outcome::Duplicate => duplicates += 1,
                }
            }
            (processed, duplicates)
        }));
    }
    let (mut processed, mut duplicates) = (0, 0);
    for worker in workers {
        let (worker_processed, worker_duplicates) = worker.await.expect("worker");
        processed += worker_processed;
        duplicates += worker_duplicates;
    }
    assert_eq!((processed, duplicates), (60, 120));
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 60);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM effects")
            .await,
        60
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM inbox_messages WHERE consumer = 'billing'")
            .await,
        60
    );
}

async fn racing_deliveries_apply_the_effects_once<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let (first, second) = tokio::join!(
        apply(&inbox, "raced", Duration::from_millis(300), false),
        apply(&inbox, "raced", Duration::from_millis(300), false),
    );
    let outcomes = [first.expect("first"), second.expect("second")];
    assert_eq!(
        outcomes
            .iter()
            .filter(|outcome| outcome.is_processed())
            .count(),
        1,
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&Outcome::Duplicate));
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'raced'")
            .await,
        1
    );
}

async fn a_racer_runs_when_the_first_delivery_rolls_back<DB: InboxBackend + TestBackend>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    // The second delivery starts only once the first one's handler runs, so
    // the first holds the inbox row when the second tries to take it.
    let (started, handler_running) = tokio::sync::oneshot::channel::<()>();
    let failing = inbox.process("retried", async move |tx| {
        DB::execute(
            &mut *tx,
            "INSERT INTO effects (event_id) VALUES ('retried')",
        )
        .await?;
        let _ = started.send(());
        tokio::time::sleep(Duration::from_millis(300)).await;
        Err::<(), BoxError>("the handler failed on purpose".into())
    });
    let succeeding = async {
        handler_running
            .await
            .expect("the first delivery's handler started");
        apply(&inbox, "retried", Duration::ZERO, false).await
    };
    let (failed, succeeded) = tokio::join!(failing, succeeding);
    assert!(matches!(failed, Err(Error::Handler { .. })), "{failed:?}");
    assert_eq!(succeeded.expect("second"), Outcome::Processed(()));
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects WHERE event_id = 'retried'")
            .await,
        1
    );
}

async fn a_failed_handler_records_nothing_and_the_redelivery_applies_once<
    DB: InboxBackend + TestBackend,
>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    let failed = apply(&inbox, "flaky", Duration::ZERO, true).await;
    match failed {
        Err(Error::Handler { event_id, source }) => {
            assert_eq!(event_id, "flaky");
            assert!(source.to_string().contains("on purpose"));
        }
        other => panic!("expected a handler error, got {other:?}"),
    }
    assert_eq!(
        db.count("SELECT COUNT(*) FROM effects").await,
        0,
        "the failed handler's writes rolled back"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM inbox_messages").await,
        0,
        "nothing recorded"
    );

    assert_eq!(
        apply(&inbox, "flaky", Duration::ZERO, false)
            .await
            .expect("redelivery"),
        Outcome::Processed(())
    );
    assert_eq!(
        apply(&inbox, "flaky", Duration::ZERO, false)
            .await
            .expect("third"),
        Outcome::Duplicate
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM effects").await, 1);

    // Another consumer has an inbox of its own.
    let other = Inbox::new(db.pool().clone(), "shipping").expect("inbox");
    assert_eq!(
        apply(&other, "flaky", Duration::ZERO, false)
            .await
            .expect("other"),
        Outcome::Processed(())
    );
}

async fn pruning_keeps_the_window_and_the_row_limit<DB: InboxBackend + TestBackend + AgeRows>(
    db: &TestDatabase<DB>,
) {
    let inbox = prepare(db).await;
    for n in 0..30 {
        apply(&inbox, &format!("p-{n:02}"), Duration::ZERO, false)
            .await
            .expect("process");
    }
    // Ten rows are eight days old.
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, DB::AGE_ROWS)
        .await
        .expect("age rows");
    drop(connection);

    let mut window = PruneSettings::default();
    window.window = Duration::from_secs(7 * 24 * 3600);
    window.max_rows = None;
    window.batch_size = 3;
    window.interval = Duration::from_secs(60);
    let deleted = outbox_inbox::prune_once(db.pool(), "billing", &window)
        .await
        .expect("prune");
    assert_eq!(
        deleted, 10,
        "only rows older than the window go, in bounded batches"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM inbox_messages WHERE event_id < 'p-10'")
            .await,
        0
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM inbox_messages").await, 20);

    let mut capped = window.clone();
    capped.max_rows = Some(15);
    assert_eq!(
        outbox_inbox::prune_once(db.pool(), "billing", &capped)
            .await
            .expect("prune"),
        5
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM inbox_messages").await, 15);

    // A pruned event is processed again: the documented cost of the window.
    assert_eq!(
        apply(&inbox, "p-00", Duration::ZERO, false)
            .await
            .expect("after window"),
        Outcome::Processed(())
    );
}

/// Ages the inbox rows `p-00` to `p-09` by eight days, in each backend's SQL.
trait AgeRows {
    const AGE_ROWS: &'static str;
}

impl AgeRows for sqlx::Postgres {
    const AGE_ROWS: &'static str =
        "UPDATE inbox_messages SET received_at = now() - interval '8 days' WHERE event_id < 'p-10'";
}

impl AgeRows for sqlx::MySql {
    const AGE_ROWS: &'static str = "UPDATE inbox_messages SET received_at = \
         DATE_SUB(UTC_TIMESTAMP(6), INTERVAL 8 DAY) WHERE event_id < 'p-10'";
}

impl AgeRows for sqlx::Sqlite {
    const AGE_ROWS: &'static str = "UPDATE inbox_messages SET received_at = \
         strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-8 days') WHERE event_id < 'p-10'";
}

outbox_testkit::test_on_every_backend!(
    triple_delivery_in_random_order_applies_each_event_once,
    racing_deliveries_apply_the_effects_once,
    a_racer_runs_when_the_first_delivery_rolls_back,
    a_failed_handler_records_nothing_and_the_redelivery_applies_once,
    pruning_keeps_the_window_and_the_row_limit,
);
