//! `outbox::begin_transaction` on PostgreSQL: a caller cancelled while the
//! server's answer to `BEGIN` is on its way leaves its pooled connection
//! outside any transaction. With sqlx's own `Pool::begin` the next borrower
//! would run its statements inside a transaction nobody commits.

use std::time::Duration;

use outbox_testkit::TcpProxy;
use sqlx::postgres::PgPoolOptions;

/// Long enough for `BEGIN` to reach the server and wait for its held answer.
const CANCEL_AFTER: Duration = Duration::from_millis(200);

/// The SQLSTATE of `SAVEPOINT` run outside a transaction block.
const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";

#[tokio::test]
async fn a_caller_cancelled_during_begin_leaves_its_connection_outside_any_transaction() {
    let db = outbox_testkit::postgres().await;
    let proxy = TcpProxy::in_front_of(db.url()).await;
    // One connection, so the next borrower gets the one the cancelled
    // caller used; no test on acquire, whose round trip the hold would
    // catch before `BEGIN` is sent.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&proxy.route(db.url()))
        .await
        .expect("connect through the proxy");
    sqlx::query("SELECT 1")
        .execute(&pool)
        .await
        .expect("open the pool's connection");
    // Back in the pool, past the test of the connection on release, whose
    // round trip the hold would catch too.
    while pool.num_idle() < 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    proxy.hold_to_client();
    let begun = tokio::time::timeout(CANCEL_AFTER, outbox::begin_transaction(&pool)).await;
    assert!(
        begun.is_err(),
        "BEGIN was answered while the proxy held every answer"
    );
    proxy.release_held();

    let mut connection = pool.acquire().await.expect("the pool's one connection");
    let savepoint = sqlx::query("SAVEPOINT probe")
        .execute(&mut *connection)
        .await;
    let error = savepoint.expect_err(
        "SAVEPOINT succeeded: the connection came back inside the cancelled caller's transaction",
    );
    let code = error
        .as_database_error()
        .and_then(|database_error| database_error.code().map(|code| code.into_owned()));
    assert_eq!(
        code.as_deref(),
        Some(NO_ACTIVE_SQL_TRANSACTION),
        "SAVEPOINT failed for another reason: {error}"
    );
}
