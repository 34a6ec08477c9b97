//! A quiet outbox on a busy database: the relay streams and has nothing of
//! its own to publish while other tables are written. The slot's confirmed
//! position must still move past that WAL, or the slot keeps it forever.

use std::time::Duration;

use outbox_testkit::{rabbitmq, unique_name};
use sqlx::Acquire;

use crate::harness::{LogicalDatabase, insert_event};
use crate::support::process::wait_until;

const WAIT: Duration = Duration::from_secs(60);

/// Rows written to the other table, one transaction each.
const OTHER_WRITES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_other_tables_advance_the_slot_of_an_idle_outbox() {
    let database = LogicalDatabase::new().await;
    let exchange = unique_name("logical_heartbeat");
    let collected = rabbitmq::exchange_consumer(&exchange).await;
    let relay = database.spawn_relay(&rabbitmq::amqp_url());
    // One event, so the relay is known to stream before the outbox goes
    // quiet.
    let mut transaction = database.db.pool().begin().await.expect("begin");
    let connection = transaction.acquire().await.expect("connection");
    insert_event(connection, &exchange, "a-1", 0).await;
    transaction.commit().await.expect("commit");
    assert!(
        wait_until(WAIT, || async { !collected.distinct_ids().is_empty() }).await,
        "the relay streams and publishes:\n{}",
        relay.log()
    );

    sqlx::query("CREATE TABLE shipments_audit (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)")
        .execute(database.db.pool())
        .await
        .expect("create the other table");
    let before_writes = database.confirmed_flush().await;
    for index in 0..OTHER_WRITES {
        sqlx::query("INSERT INTO shipments_audit (note) VALUES ($1)")
            .bind(format!("{index:>200}"))
            .execute(database.db.pool())
            .await
            .expect("write the other table");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after_writes = database.current_wal_position().await;
    assert!(after_writes > before_writes);

    let advanced = wait_until(WAIT, || async {
        database.confirmed_flush().await >= after_writes
    })
    .await;
    assert!(
        advanced,
        "the slot's confirmed position stayed at {} below {after_writes}, the WAL position after \
         the other table's writes:\n{}",
        database.confirmed_flush().await,
        relay.log()
    );
    assert_eq!(
        collected.distinct_ids().len(),
        1,
        "nothing else was published"
    );
}
