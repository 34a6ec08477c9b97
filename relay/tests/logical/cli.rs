//! `--source logical` on the command line: the start-up refusals, each one
//! line and a non-zero exit before anything is read, and `migrate --source
//! logical` creating the slot and its publication, and saying nothing of
//! them the second time.

use std::process::{Command, Output};

use outbox_testkit::{ReplicationSlotGuard, unique_slot_name};
use sqlx::{AssertSqlSafe, Connection};

/// Variables set for one command.
type Environment<'a> = Vec<(&'a str, &'a str)>;

/// `outbox-relay ARGS` with `[http] listen` on a free port, and none of
/// the variables that would change its inputs.
fn relay(args: &[&str], environment: &[(&str, &str)]) -> Output {
    let dir = std::env::temp_dir().join(format!(
        "outbox-logical-cli-{}",
        uuid::Uuid::now_v7().simple()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("relay.toml");
    std::fs::write(&config, "[http]\nlisten = \"127.0.0.1:0\"\n").expect("write config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-relay"));
    command.args(args);
    if args.first() == Some(&"run") {
        command.arg("--config").arg(&config);
    }
    for variable in [
        "OUTBOX_DATABASE_URL",
        "DATABASE_URL",
        "OUTBOX_BROKER",
        "OUTBOX_SOURCE",
        "OUTBOX_SLOT",
    ] {
        command.env_remove(variable);
    }
    command.envs(environment.iter().copied());
    let output = command.output().expect("run outbox-relay");
    let _ = std::fs::remove_dir_all(&dir);
    output
}

/// The command failed with exactly one line on stderr containing each of
/// `needles`.
fn assert_one_line_error(output: &Output, needles: &[&str]) {
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "expected a failure: {text}");
    assert_eq!(text.trim_end().lines().count(), 1, "one line, got:\n{text}");
    for needle in needles {
        assert!(text.contains(needle), "the error names {needle}:\n{text}");
    }
}

async fn slot_plugin(
    db: &outbox_testkit::TestDatabase<sqlx::Postgres>,
    slot: &str,
) -> Option<String> {
    sqlx::query_scalar("SELECT plugin::text FROM pg_replication_slots WHERE slot_name = $1")
        .bind(slot)
        .fetch_optional(db.pool())
        .await
        .expect("read slots")
}

#[tokio::test]
async fn the_logical_source_is_refused_on_mysql_and_sqlite() {
    let sqlite = std::env::temp_dir().join(format!(
        "outbox-logical-{}.db",
        uuid::Uuid::now_v7().simple()
    ));
    let sqlite_url = format!("sqlite://{}", sqlite.display());
    let cases: Vec<(Vec<&str>, Environment)> = vec![
        (
            vec!["run", "--database-url", &sqlite_url, "--source", "logical"],
            vec![],
        ),
        (
            vec!["run", "--database-url", "mysql://root@127.0.0.1:3306/test"],
            vec![("OUTBOX_SOURCE", "logical")],
        ),
        (vec!["leave-logical", "--database-url", &sqlite_url], vec![]),
        (
            vec![
                "migrate",
                "--database-url",
                &sqlite_url,
                "--source",
                "logical",
            ],
            vec![],
        ),
    ];
    for (args, environment) in cases {
        let output = relay(&args, &environment);
        assert_one_line_error(&output, &["(--source logical) needs PostgreSQL"]);
    }
    assert!(!sqlite.exists(), "nothing was opened");
}

#[tokio::test]
async fn a_role_without_the_replication_attribute_is_refused() {
    let db = outbox_testkit::postgres().await;
    let role = unique_slot_name("outbox_role");
    let _role = RoleGuard::create(db.url(), &role).await;
    let url = db.url().replacen("postgres@", &format!("{role}@"), 1);
    assert_ne!(url, db.url(), "the test URL names the postgres role");
    let slot = unique_slot_name("outbox_test");
    let _slot = ReplicationSlotGuard::new(db.url(), &slot);
    let output = relay(
        &[
            "run",
            "--database-url",
            &url,
            "--source",
            "logical",
            "--slot",
            &slot,
        ],
        &[],
    );
    assert_one_line_error(&output, &["REPLICATION", &role]);
    assert_eq!(slot_plugin(&db, &slot).await, None, "no slot was made");
}

#[tokio::test]
async fn a_slot_of_another_output_plugin_is_refused() {
    let db = outbox_testkit::postgres().await;
    let slot = unique_slot_name("outbox_test");
    let _slot = ReplicationSlotGuard::new(db.url(), &slot);
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'test_decoding')")
        .bind(&slot)
        .execute(db.pool())
        .await
        .expect("create a test_decoding slot");
    let output = relay(
        &[
            "run",
            "--database-url",
            db.url(),
            "--source",
            "logical",
            "--slot",
            &slot,
        ],
        &[],
    );
    assert_one_line_error(&output, &[&slot, "test_decoding"]);
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'outbox_events'",
    )
    .fetch_one(db.pool())
    .await
    .expect("count tables");
    assert_eq!(tables, 0, "refused before migrating");
}

#[tokio::test]
async fn migrate_with_the_logical_source_creates_the_slot_and_its_publication() {
    let db = outbox_testkit::postgres().await;
    let slot = unique_slot_name("outbox_test");
    let _slot = ReplicationSlotGuard::new(db.url(), &slot);
    for run in 1..=2 {
        let output = relay(
            &["migrate", "--database-url", db.url(), "--source", "logical"],
            &[("OUTBOX_SLOT", slot.as_str())],
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "migrate: {stderr}");
        // Every start prepares the same tables: PostgreSQL's "already
        // exists, skipping" notices are not news.
        if run == 2 {
            assert!(
                !stderr.contains("sqlx::postgres::notice"),
                "the second migrate logged PostgreSQL notices:\n{stderr}"
            );
        }
    }
    assert_eq!(slot_plugin(&db, &slot).await.as_deref(), Some("pgoutput"));
    let published: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_publication_tables WHERE pubname = $1")
            .bind(&slot)
            .fetch_all(db.pool())
            .await
            .expect("publication tables");
    assert_eq!(published, vec!["outbox_events".to_owned()]);
    let inserts_only: bool = sqlx::query_scalar(
        "SELECT pubinsert AND NOT pubupdate AND NOT pubdelete FROM pg_publication WHERE pubname = $1",
    )
    .bind(&slot)
    .fetch_one(db.pool())
    .await
    .expect("publication");
    assert!(inserts_only);
}

/// A login role without the REPLICATION attribute, dropped on drop (roles
/// belong to the whole server, not to the test database).
struct RoleGuard {
    admin_url: String,
    role: String,
}

impl RoleGuard {
    async fn create(admin_url: &str, role: &str) -> Self {
        let mut admin = sqlx::PgConnection::connect(admin_url)
            .await
            .expect("connect");
        sqlx::query(AssertSqlSafe(format!(
            "CREATE ROLE \"{role}\" LOGIN NOSUPERUSER NOREPLICATION"
        )))
        .execute(&mut admin)
        .await
        .expect("create role");
        RoleGuard {
            admin_url: admin_url.to_owned(),
            role: role.to_owned(),
        }
    }
}

impl Drop for RoleGuard {
    fn drop(&mut self) {
        let (url, role) = (self.admin_url.clone(), self.role.clone());
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut admin = sqlx::PgConnection::connect(&url).await?;
                sqlx::query(AssertSqlSafe(format!("DROP ROLE IF EXISTS \"{role}\"")))
                    .execute(&mut admin)
                    .await
                    .map(|_| ())
            })
        });
        match dropper.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => eprintln!("could not drop role {}: {error}", self.role),
            Err(panic) => eprintln!("could not drop role {}: {panic:?}", self.role),
        }
    }
}

/// A slot dropped by hand is not silently created again at the end of the
/// WAL (which would skip what was committed meanwhile): `run` and
/// `migrate` refuse and name `recover-slot`, which recreates it.
#[tokio::test]
async fn a_dropped_slot_is_refused_until_recover_slot_recreates_it() {
    let db = outbox_testkit::postgres().await;
    let slot = unique_slot_name("outbox_test");
    let _slot = ReplicationSlotGuard::new(db.url(), &slot);
    let environment = [("OUTBOX_SLOT", slot.as_str())];
    let migrated = relay(
        &["migrate", "--database-url", db.url(), "--source", "logical"],
        &environment,
    );
    assert!(
        migrated.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(db.pool())
        .await
        .expect("drop the slot by hand");

    let commands: [&[&str]; 2] = [
        &["migrate", "--database-url", db.url(), "--source", "logical"],
        &[
            "run",
            "--database-url",
            db.url(),
            "--source",
            "logical",
            "--broker",
            "stdout",
        ],
    ];
    for args in commands {
        assert_one_line_error(
            &relay(args, &environment),
            &[&slot, "dropped", "recover-slot"],
        );
        assert_eq!(
            slot_plugin(&db, &slot).await,
            None,
            "`{}` created the dropped slot again",
            args[0]
        );
    }

    let recovered = relay(
        &[
            "recover-slot",
            "--database-url",
            db.url(),
            "--since",
            "2026-01-01T00:00:00Z",
        ],
        &environment,
    );
    assert!(
        recovered.status.success(),
        "recover-slot: {}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    assert_eq!(slot_plugin(&db, &slot).await.as_deref(), Some("pgoutput"));
}
