//! The write side against real PostgreSQL, MariaDB and SQLite: every
//! scenario runs once per backend, each on a fresh database.

use std::collections::HashSet;

use outbox::{EnqueueOptions, Error, Event, OutboxWriter};
use outbox_testkit::{TestBackend, TestDatabase};
use serde::Serialize;
use uuid::Uuid;

#[derive(Serialize, Event, Clone)]
#[event(
    type = "order.created",
    version = 1,
    aggregate = "order",
    topic = "orders",
    source = "/orders"
)]
struct OrderCreated {
    #[event(aggregate_id)]
    order_id: Uuid,
    total_cents: i64,
    note: String,
}

fn order(total_cents: i64) -> OrderCreated {
    OrderCreated {
        order_id: Uuid::now_v7(),
        total_cents,
        note: String::new(),
    }
}

/// SQL that differs between backends, used only to inspect the results.
struct Dialect {
    /// Rows written by the statement that wrote the first outbox row, read
    /// inside the writing transaction right after the enqueue.
    rows_of_last_statement: &'static str,
    /// Overwrite the checksum of applied migration 1.
    corrupt_migration_checksum: &'static str,
    /// Migration files of the backend (`migrations/<backend>/`).
    migrations: i64,
}

/// The [`Dialect`] of each backend.
trait EnqueueBackend: outbox::Backend + TestBackend {
    const DIALECT: Dialect;
}

impl EnqueueBackend for sqlx::Postgres {
    const DIALECT: Dialect = Dialect {
        // Rows written by one statement share its command id (cmin).
        rows_of_last_statement: "SELECT COUNT(*) FROM outbox_events \
             WHERE cmin = (SELECT cmin FROM outbox_events ORDER BY id LIMIT 1)",
        corrupt_migration_checksum: "UPDATE _outbox_migrations SET checksum = '\\x00'::bytea WHERE version = 1",
        migrations: 2,
    };
}

impl EnqueueBackend for sqlx::MySql {
    const DIALECT: Dialect = Dialect {
        rows_of_last_statement: "SELECT ROW_COUNT()",
        corrupt_migration_checksum: "UPDATE _outbox_migrations SET checksum = X'00' WHERE version = 1",
        migrations: 1,
    };
}

impl EnqueueBackend for sqlx::Sqlite {
    const DIALECT: Dialect = Dialect {
        rows_of_last_statement: "SELECT changes()",
        corrupt_migration_checksum: "UPDATE _outbox_migrations SET checksum = X'00' WHERE version = 1",
        migrations: 3,
    };
}

const CREATE_ORDERS: &str =
    "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, total_cents BIGINT NOT NULL)";

async fn prepare<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, CREATE_ORDERS)
        .await
        .expect("create orders");
}

async fn strings<DB: TestBackend>(db: &TestDatabase<DB>, sql: &str) -> Vec<String> {
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::fetch_strings(&mut connection, sql)
        .await
        .unwrap_or_else(|error| panic!("{}: {sql}: {error}", DB::LABEL))
}

fn insert_order_sql(event: &OrderCreated) -> String {
    format!(
        "INSERT INTO orders (id, total_cents) VALUES ('{}', {})",
        event.order_id, event.total_cents
    )
}

async fn rollback_leaves_no_rows_and_commit_leaves_both<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    prepare(db).await;

    let rolled_back = order(100);
    let mut tx = db.pool().begin().await.expect("begin");
    DB::execute(&mut tx, &insert_order_sql(&rolled_back))
        .await
        .expect("insert order");
    outbox::enqueue(&mut tx, &rolled_back)
        .await
        .expect("enqueue");
    tx.rollback().await.expect("rollback");
    assert_eq!(db.count("SELECT COUNT(*) FROM orders").await, 0);
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 0);

    let committed = order(250);
    let mut tx = db.pool().begin().await.expect("begin");
    DB::execute(&mut tx, &insert_order_sql(&committed))
        .await
        .expect("insert order");
    let event_id = outbox::enqueue(&mut tx, &committed).await.expect("enqueue");
    tx.commit().await.expect("commit");

    assert_eq!(db.count("SELECT COUNT(*) FROM orders").await, 1);
    let matching = db.count(&format!(
            "SELECT COUNT(*) FROM outbox_events WHERE event_id = '{event_id}' \
             AND event_type = 'order.created' AND event_version = 1 AND source = '/orders' \
             AND aggregate_type = 'order' AND aggregate_id = '{}' AND topic = 'orders' AND state = 'pending'",
            committed.order_id
        ),
    )
    .await;
    assert_eq!(
        matching, 1,
        "the committed row carries the returned event id and the event's columns"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 1);
    assert_eq!(event_id.get_version_num(), 7, "event ids are UUIDv7");
}

async fn plain_insert_of_contract_columns_is_a_complete_enqueue<DB: EnqueueBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(
        &mut connection,
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('0195f3a8-7d2c-7000-8000-00000000abcd', 'invoice.sent', '/billing', 'invoice', 'inv-1', \
         'invoices', '{\"amount\": 10}')",
    )
    .await
    .expect("an INSERT naming only the contract columns is valid");
    drop(connection);

    let with_defaults = db.count("SELECT COUNT(*) FROM outbox_events WHERE event_version = 1 AND state = 'pending' AND attempts = 0 \
         AND created_at IS NOT NULL AND published_at IS NULL AND next_attempt_at IS NULL \
         AND last_error IS NULL AND headers = '{}'",
    )
    .await;
    assert_eq!(
        with_defaults, 1,
        "every bookkeeping column took its default"
    );
}

async fn batch_of_1000_is_one_ordered_statement<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    let dialect = &DB::DIALECT;
    prepare(db).await;
    let events: Vec<OrderCreated> = (0..1000).map(order).collect();

    let mut tx = db.pool().begin().await.expect("begin");
    let event_ids = outbox::enqueue_batch(&mut tx, &events)
        .await
        .expect("enqueue batch");
    let rows_of_statement = DB::fetch_i64(&mut tx, dialect.rows_of_last_statement)
        .await
        .expect("rows of last statement");
    tx.commit().await.expect("commit");

    assert_eq!(
        rows_of_statement, 1000,
        "all 1,000 rows come from one INSERT"
    );
    assert_eq!(event_ids.len(), 1000);
    let stored_ids = strings(
        db,
        "SELECT CAST(event_id AS CHAR(36)) FROM outbox_events ORDER BY id",
    )
    .await;
    let returned_ids: Vec<String> = event_ids.iter().map(Uuid::to_string).collect();
    assert_eq!(
        stored_ids, returned_ids,
        "ids are handed out in batch order"
    );
    let stored_aggregates = strings(db, "SELECT aggregate_id FROM outbox_events ORDER BY id").await;
    let expected_aggregates: Vec<String> = events
        .iter()
        .map(|event| event.order_id.to_string())
        .collect();
    assert_eq!(stored_aggregates, expected_aggregates);
}

async fn oversized_payload_is_rejected_and_the_transaction_goes_on<DB: EnqueueBackend>(
    db: &TestDatabase<DB>,
) {
    prepare(db).await;
    let writer = OutboxWriter::new().with_max_payload_bytes(1024);
    let mut oversized = order(1);
    oversized.note = "x".repeat(2000);
    let accepted = order(2);

    let mut tx = db.pool().begin().await.expect("begin");
    DB::execute(&mut tx, &insert_order_sql(&accepted))
        .await
        .expect("insert order");
    let error = writer
        .enqueue(&mut tx, &oversized)
        .await
        .expect_err("a payload above the limit is rejected");
    match &error {
        Error::PayloadTooLarge {
            event_type,
            size,
            limit,
        } => {
            assert_eq!(event_type, "order.created");
            assert_eq!(*size, oversized.payload().expect("payload").get().len());
            assert_eq!(*limit, 1024);
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("order.created") && message.contains("1024") && message.contains("bytes"),
        "the message names the event type, the size and the limit: {message}"
    );
    assert!(error.is_rejected_event());

    let accepted_id = writer
        .enqueue(&mut tx, &accepted)
        .await
        .expect("enqueue after rejection");
    tx.commit().await.expect("the transaction still commits");

    assert_eq!(db.count("SELECT COUNT(*) FROM orders").await, 1);
    assert_eq!(
        strings(db, "SELECT CAST(event_id AS CHAR(36)) FROM outbox_events").await,
        vec![accepted_id.to_string()]
    );

    // The default limit is 1 MiB.
    let mut above_default = order(3);
    above_default.note = "y".repeat(OutboxWriter::DEFAULT_MAX_PAYLOAD_BYTES);
    let mut tx = db.pool().begin().await.expect("begin");
    let error = outbox::enqueue(&mut tx, &above_default)
        .await
        .expect_err("above 1 MiB");
    assert!(
        matches!(
            error,
            Error::PayloadTooLarge {
                limit: 1_048_576,
                ..
            }
        ),
        "{error:?}"
    );
    tx.rollback().await.expect("rollback");
}

async fn sixteen_concurrent_writers_get_unique_ids<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    prepare(db).await;
    let mut tasks = Vec::new();
    for task in 0..16 {
        let pool = db.pool().clone();
        tasks.push(tokio::spawn(async move {
            let mut event_ids = Vec::new();
            for round in 0..5 {
                let mut tx = pool.begin().await?;
                event_ids.push(outbox::enqueue(&mut tx, &order(task * 100 + round)).await?);
                let batch = [order(task), order(round)];
                event_ids.extend(outbox::enqueue_batch(&mut tx, &batch).await?);
                tx.commit().await?;
            }
            Ok::<_, Error>(event_ids)
        }));
    }
    let mut all_ids = HashSet::new();
    for task in tasks {
        let event_ids = task
            .await
            .expect("task")
            .expect("no enqueue fails under concurrency");
        all_ids.extend(event_ids);
    }
    assert_eq!(all_ids.len(), 16 * 5 * 3, "every returned id is unique");
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 240);
    assert_eq!(
        db.count("SELECT COUNT(DISTINCT event_id) FROM outbox_events")
            .await,
        240
    );
}

async fn explicit_event_id_and_headers_are_stored<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    prepare(db).await;
    let event_id = Uuid::now_v7();
    let options = EnqueueOptions::new().event_id(event_id).header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    );
    let mut tx = db.pool().begin().await.expect("begin");
    let returned = OutboxWriter::new()
        .enqueue_with(&mut tx, &order(5), options.clone())
        .await
        .expect("enqueue with options");
    tx.commit().await.expect("commit");
    assert_eq!(returned, event_id);
    assert_eq!(
        db.count("SELECT COUNT(*) FROM outbox_events WHERE CAST(headers AS CHAR(2000)) LIKE '%traceparent%00f067aa0ba902b7%'")
            .await,
        1,
        "the header is stored in the headers column"
    );

    // The same explicit id again is refused by the unique event_id.
    let mut tx = db.pool().begin().await.expect("begin");
    let duplicate = OutboxWriter::new()
        .enqueue_with(&mut tx, &order(6), options)
        .await;
    assert!(
        matches!(duplicate, Err(Error::Database(_))),
        "{duplicate:?}"
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 1);
}

async fn migrate_is_repeatable_and_refuses_a_changed_migration<DB: EnqueueBackend>(
    db: &TestDatabase<DB>,
) {
    let dialect = &DB::DIALECT;
    outbox::migrate(db.pool()).await.expect("first migrate");
    outbox::migrate(db.pool())
        .await
        .expect("second migrate is a no-op");
    assert_eq!(
        db.count("SELECT COUNT(*) FROM _outbox_migrations").await,
        dialect.migrations,
        "every migration recorded once"
    );

    let mut connection = db.pool().acquire().await.expect("acquire");
    DB::execute(&mut connection, dialect.corrupt_migration_checksum)
        .await
        .expect("corrupt checksum");
    drop(connection);

    let error = outbox::migrate(db.pool())
        .await
        .expect_err("a changed migration is refused");
    assert!(
        matches!(error, Error::MigrationModified { version: 1 }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("migration 1") && message.contains("differs"),
        "{message}"
    );
}

async fn migrate_names_the_table_of_a_partially_applied_migration<DB: EnqueueBackend>(
    db: &TestDatabase<DB>,
) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    // What an interrupted migration leaves on MariaDB, where DDL commits.
    DB::execute(
        &mut connection,
        "UPDATE _outbox_migrations SET success = FALSE WHERE version = 1",
    )
    .await
    .expect("mark migration 1 as failed");
    drop(connection);

    let error = outbox::migrate(db.pool())
        .await
        .expect_err("a partially applied migration is refused");
    assert!(
        matches!(error, Error::MigrationPartiallyApplied { version: 1 }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains("migration 1") && message.contains("_outbox_migrations"),
        "the message names the migration and the outbox's table: {message}"
    );
}

async fn a_malformed_event_id_is_refused_at_insert<DB: EnqueueBackend>(db: &TestDatabase<DB>) {
    outbox::migrate(db.pool()).await.expect("migrate");
    let mut connection = db.pool().acquire().await.expect("acquire");
    // 36 characters, lowercase, not a UUID: a row the relay could not read.
    let refused = DB::execute(
        &mut connection,
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
         VALUES ('0195f3a8-7d2c-7000-8000-00000000abcz', 'invoice.sent', '/billing', 'invoice', 'inv-1', \
         'invoices', '{}')",
    )
    .await;
    let error = refused
        .expect_err("a malformed event id is refused")
        .to_string()
        .to_lowercase();
    assert!(
        error.contains("event_id") || error.contains("uuid"),
        "the error names the event id: {error}"
    );
    drop(connection);
    assert_eq!(db.count("SELECT COUNT(*) FROM outbox_events").await, 0);
}

outbox_testkit::test_on_every_backend!(
    rollback_leaves_no_rows_and_commit_leaves_both,
    plain_insert_of_contract_columns_is_a_complete_enqueue,
    batch_of_1000_is_one_ordered_statement,
    oversized_payload_is_rejected_and_the_transaction_goes_on,
    sixteen_concurrent_writers_get_unique_ids,
    explicit_event_id_and_headers_are_stored,
    migrate_is_repeatable_and_refuses_a_changed_migration,
    migrate_names_the_table_of_a_partially_applied_migration,
    a_malformed_event_id_is_refused_at_insert,
);
