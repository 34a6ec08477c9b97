//! Migrating a database already up to date, as every start does, logs no
//! PostgreSQL notice: the migrations table's `CREATE TABLE IF NOT EXISTS`
//! said "relation ... already exists, skipping" at INFO on every start.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// The target sqlx logs PostgreSQL's notices under.
const NOTICE_TARGET: &str = "sqlx::postgres::notice";

/// Collects the message of every notice at INFO or above.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<String>>>);

impl<S: Subscriber> Layer<S> for Notices {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let metadata = event.metadata();
        if metadata.target() != NOTICE_TARGET || *metadata.level() > Level::INFO {
            return;
        }
        let mut message = Message::default();
        event.record(&mut message);
        self.0.lock().expect("notices").push(message.0);
    }
}

#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_owned();
        }
    }
}

#[tokio::test]
async fn migrating_an_up_to_date_postgres_database_logs_no_notice() {
    let notices = Notices::default();
    let subscriber = tracing_subscriber::registry().with(notices.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let database = outbox_testkit::postgres().await;
    outbox::migrate(database.pool())
        .await
        .expect("the first migration");
    outbox::migrate(database.pool())
        .await
        .expect("the migration of an up-to-date database");
    let logged = notices.0.lock().expect("notices").clone();
    assert!(
        logged.is_empty(),
        "PostgreSQL notices logged at INFO or above while migrating: {logged:?}"
    );
}
