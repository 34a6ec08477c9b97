//! The relay reaches PostgreSQL over TLS (`sslmode=require`), as managed
//! databases demand, and a server certificate it cannot verify is a
//! one-line error before anything is claimed.
//!
//! Needs a PostgreSQL server with `ssl = on`, as Debian's package sets up
//! with its snakeoil certificate.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use outbox_testkit::TestBackend;
use support::process::{FAST_CONFIG, RelayProcess};

const APPLICATION_NAME: &str = "outbox-relay-tls-test";

fn with_parameters(url: &str, parameters: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{parameters}")
}

async fn require_server_tls(db: &outbox_testkit::TestDatabase<sqlx::Postgres>) {
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(db.pool())
        .await
        .expect("SHOW ssl");
    assert_eq!(
        ssl, "on",
        "the PostgreSQL server at OUTBOX_TEST_POSTGRES_URL has ssl = {ssl}; this test needs a server that accepts TLS (ssl = on)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_over_a_tls_connection_to_postgresql() {
    let db = outbox_testkit::postgres().await;
    require_server_tls(&db).await;
    let url = with_parameters(
        db.url(),
        &format!("sslmode=require&application_name={APPLICATION_NAME}"),
    );

    let migrated = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["migrate", "--database-url", &url])
        .output()
        .expect("run outbox-relay migrate");
    assert!(
        migrated.status.success(),
        "migrate over TLS: {}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let mut connection = db.pool().acquire().await.expect("acquire");
    sqlx::Postgres::execute(
        &mut connection,
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload) \
         SELECT gen_random_uuid(), 'order.created', '/orders', 'order', (g % 7)::text, 'orders', jsonb_build_object('n', g) \
         FROM generate_series(1, 200) AS g",
    )
    .await
    .expect("enqueue");
    drop(connection);

    let mut relay = RelayProcess::spawn(&url, "stdout", FAST_CONFIG);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tls_connections_seen = 0;
    loop {
        // The relay's own sessions, named by application_name, and whether
        // each of them runs over TLS.
        let sessions = db
            .count(&format!(
                "SELECT COUNT(*) FROM pg_stat_activity AS a JOIN pg_stat_ssl AS s USING (pid) \
                 WHERE a.application_name = '{APPLICATION_NAME}'"
            ))
            .await;
        let plaintext = db
            .count(&format!(
                "SELECT COUNT(*) FROM pg_stat_activity AS a JOIN pg_stat_ssl AS s USING (pid) \
                 WHERE a.application_name = '{APPLICATION_NAME}' AND NOT s.ssl"
            ))
            .await;
        assert_eq!(
            plaintext,
            0,
            "every relay session uses TLS:\n{}",
            relay.log()
        );
        tls_connections_seen = tls_connections_seen.max(sessions);
        let published = db
            .count("SELECT COUNT(*) FROM outbox_events WHERE state = 'published'")
            .await;
        if published == 200 && tls_connections_seen > 0 {
            break;
        }
        assert!(
            relay.is_running(),
            "the relay exited early:\n{}",
            relay.log()
        );
        assert!(
            Instant::now() < deadline,
            "{published} of 200 events published over TLS, {tls_connections_seen} TLS sessions seen:\n{}",
            relay.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    relay.signal("TERM");
    let status = relay
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the relay did not stop:\n{}", relay.log()));
    assert!(status.success(), "exit status {status}:\n{}", relay.log());
}

#[tokio::test]
async fn a_server_certificate_that_cannot_be_verified_is_a_one_line_error() {
    let db = outbox_testkit::postgres().await;
    require_server_tls(&db).await;
    // The server's certificate is self-signed: `verify-full` refuses it.
    let url = with_parameters(db.url(), "sslmode=verify-full");
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["status", "--database-url", &url])
        .output()
        .expect("run outbox-relay status");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "status against an unverifiable certificate succeeded: {stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line:\n{stderr}");
    assert!(
        stderr.to_lowercase().contains("certificate"),
        "the error names the certificate:\n{stderr}"
    );
}
