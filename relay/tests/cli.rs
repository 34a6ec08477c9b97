//! `outbox-relay` on the command line: bad input is a one-line error and a
//! non-zero exit before anything is claimed; the operator commands work;
//! the synopsis in `docs/operations.md` lists exactly the commands and
//! flags the binary takes.

use std::process::{Command, Output};

use outbox_testkit::TestBackend;

fn relay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(args)
        .env_remove("OUTBOX_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("OUTBOX_BROKER")
        .output()
        .expect("run outbox-relay")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The command failed with exactly one line on stderr containing `needle`.
fn assert_one_line_error(output: &Output, needle: &str) {
    let text = stderr(output);
    assert!(
        !output.status.success(),
        "expected a failure, got success: {text}"
    );
    assert_eq!(text.trim_end().lines().count(), 1, "one line, got:\n{text}");
    assert!(
        text.contains(needle),
        "the error names the problem ({needle}):\n{text}"
    );
}

async fn table_exists(db: &outbox_testkit::TestDatabase<sqlx::Postgres>, table: &str) -> bool {
    let mut connection = db.pool().acquire().await.expect("acquire");
    let sql =
        format!("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{table}'");
    sqlx::Postgres::fetch_i64(&mut connection, &sql)
        .await
        .expect("query")
        > 0
}

#[tokio::test]
async fn bad_input_fails_in_one_line_before_touching_the_database() {
    let db = outbox_testkit::postgres().await;
    let url = db.url().to_owned();
    let dir = std::env::temp_dir().join(format!("outbox-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let unknown_field = dir.join("unknown.toml");
    std::fs::write(&unknown_field, "batchsize = 10\n").expect("write");
    let bad_duration = dir.join("duration.toml");
    std::fs::write(&bad_duration, "lease_duration = \"30 parsecs\"\n").expect("write");

    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "run".into(),
                "--database-url".into(),
                url.clone(),
                "--broker".into(),
                "kafka://".into(),
            ],
            "kafka://",
        ),
        (
            vec![
                "run".into(),
                "--database-url".into(),
                url.clone(),
                "--broker".into(),
                "nats://x:0".into(),
            ],
            "nats://x:0",
        ),
        (
            vec![
                "run".into(),
                "--database-url".into(),
                "oracle://db/x".into(),
                "--broker".into(),
                "stdout".into(),
            ],
            "oracle://",
        ),
        (
            vec![
                "run".into(),
                "--database-url".into(),
                url.clone(),
                "--config".into(),
                unknown_field.display().to_string(),
            ],
            "batchsize",
        ),
        (
            vec![
                "run".into(),
                "--database-url".into(),
                url.clone(),
                "--config".into(),
                bad_duration.display().to_string(),
            ],
            "lease_duration",
        ),
        (
            vec![
                "run".into(),
                "--database-url".into(),
                url.clone(),
                "--config".into(),
                dir.join("missing.toml").display().to_string(),
            ],
            "missing.toml",
        ),
        (
            vec!["run".into(), "--no-such-flag".into()],
            "--no-such-flag",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = relay(&args);
        assert_one_line_error(&output, needle);
    }
    assert!(
        !table_exists(&db, "_outbox_migrations").await,
        "nothing was migrated or claimed"
    );

    let masked = relay(&[
        "run",
        "--database-url",
        "postgres://user:hunter2@127.0.0.1:1/x",
        "--broker",
        "ftp://y",
    ]);
    assert!(
        !stderr(&masked).contains("hunter2"),
        "passwords are masked: {}",
        stderr(&masked)
    );
}

#[tokio::test]
async fn migrate_status_and_dead_commands_work_on_a_real_database() {
    let db = outbox_testkit::postgres().await;
    let url = db.url().to_owned();

    let migrated = relay(&["migrate", "--database-url", &url]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(table_exists(&db, "outbox_events").await);

    let mut connection = db.pool().acquire().await.expect("acquire");
    sqlx::Postgres::execute(
        &mut connection,
        "INSERT INTO outbox_events (event_id, event_type, source, aggregate_type, aggregate_id, topic, payload, state, attempts, last_error) \
         VALUES ('0195f3a8-7d2c-7000-8000-000000000001', 'order.created', '/orders', 'order', '1', 'orders', '{}', 'dead', 10, 'no such exchange'), \
                ('0195f3a8-7d2c-7000-8000-000000000002', 'order.created', '/orders', 'order', '2', 'orders', '{}', 'dead', 10, 'no such exchange'), \
                ('0195f3a8-7d2c-7000-8000-000000000003', 'order.created', '/orders', 'order', '3', 'orders', '{}', 'pending', 0, NULL)",
    )
    .await
    .expect("insert");
    drop(connection);

    let status = relay(&["status", "--database-url", &url, "--json"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let json: serde_json::Value =
        serde_json::from_slice(&status.stdout).expect("status --json is JSON");
    assert_eq!(json["pending"], 1);
    assert_eq!(json["dead"], 2);
    assert_eq!(json["partitions"], 32);

    let listed = relay(&["dead", "list", "--database-url", &url, "--json"]);
    let dead: serde_json::Value =
        serde_json::from_slice(&listed.stdout).expect("dead list --json is JSON");
    assert_eq!(dead.as_array().map(Vec::len), Some(2));
    assert_eq!(dead[0]["last_error"], "no such exchange");

    let retried = relay(&[
        "dead",
        "retry",
        "--database-url",
        &url,
        "--event-id",
        "0195f3a8-7d2c-7000-8000-000000000001",
    ]);
    assert!(retried.status.success(), "{}", stderr(&retried));
    let not_dead = relay(&[
        "dead",
        "retry",
        "--database-url",
        &url,
        "--event-id",
        "0195f3a8-7d2c-7000-8000-000000000003",
    ]);
    assert_one_line_error(&not_dead, "0195f3a8-7d2c-7000-8000-000000000003");
    let discarded = relay(&[
        "dead",
        "discard",
        "--database-url",
        &url,
        "--aggregate",
        "order:2",
    ]);
    assert!(discarded.status.success(), "{}", stderr(&discarded));
    let no_dead_event = relay(&[
        "dead",
        "discard",
        "--database-url",
        &url,
        "--aggregate",
        "order:3",
    ]);
    assert_one_line_error(&no_dead_event, "order:3");

    let status = relay(&["status", "--database-url", &url, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(
        (json["pending"].as_i64(), json["dead"].as_i64()),
        (Some(2), Some(0))
    );

    let no_selection = relay(&["dead", "retry", "--database-url", &url]);
    assert!(
        !no_selection.status.success(),
        "retry needs --event-id, --aggregate or --all"
    );
}
