//! [`Inbox`]: run a handler at most once per (consumer, event id).

use sqlx::{Pool, Transaction};

use crate::backend::InboxBackend;
use crate::error::{BoxError, Error};

/// Longest consumer name, the width of `inbox_messages.consumer` on MySQL.
const MAX_CONSUMER_CHARS: usize = 255;

/// What happened to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T> {
    /// The handler ran and its effects committed with the inbox row.
    Processed(T),
    /// The event was processed before (or by a racing delivery that
    /// committed first); the handler did not run.
    Duplicate,
}

impl<T> Outcome<T> {
    /// Whether the handler ran.
    pub fn is_processed(&self) -> bool {
        matches!(self, Outcome::Processed(_))
    }
}

/// The inbox of one consumer on one database.
///
/// [`Inbox::process`] begins a transaction, inserts `(consumer, event_id)`
/// into `inbox_messages` unless it is there (never raising a unique
/// violation, which would abort a PostgreSQL transaction), and only for a
/// new row runs the handler in the same transaction and commits. The
/// handler's effects and the inbox row commit together or not at all, so a
/// consumer fed at-least-once applies each event's effects once. Two
/// deliveries racing on two connections serialize on the row: the second
/// waits, then sees a duplicate if the first committed, or runs if it
/// rolled back.
///
/// ```no_run
/// # async fn example(pool: sqlx::PgPool) -> Result<(), outbox_inbox::Error> {
/// use outbox_inbox::{Inbox, Outcome};
///
/// let inbox = Inbox::new(pool, "billing")?;
/// let credit = 10_i64;
/// let outcome = inbox
///     .process("01a229c9-3478-7564-b02c-66d8acd1975a", async |tx| {
///         sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = 1")
///             .bind(credit)
///             .execute(&mut *tx)
///             .await?;
///         Ok(())
///     })
///     .await?;
/// assert!(matches!(outcome, Outcome::Processed(()) | Outcome::Duplicate));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Inbox<DB: InboxBackend> {
    pool: Pool<DB>,
    consumer: String,
}

// Not derived: a derive would require `DB: Clone`, which sqlx's database
// types are not.
impl<DB: InboxBackend> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Inbox {
            pool: self.pool.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

impl<DB: InboxBackend> Inbox<DB> {
    /// The inbox of `consumer` (the consuming service or handler name).
    ///
    /// # Errors
    /// [`Error::Config`] for an empty name or one over 255 characters.
    pub fn new(pool: Pool<DB>, consumer: impl Into<String>) -> Result<Self, Error> {
        let consumer = consumer.into();
        if consumer.trim().is_empty() {
            return Err(Error::Config("the consumer name is empty".to_owned()));
        }
        if consumer.chars().count() > MAX_CONSUMER_CHARS {
            return Err(Error::Config(format!(
                "the consumer name is longer than {MAX_CONSUMER_CHARS} characters"
            )));
        }
        Ok(Inbox { pool, consumer })
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Run `handler` in a new transaction unless `event_id` was processed
    /// before; see the type's documentation.
    ///
    /// `handler` is an async closure (or an `async fn`) given the
    /// connection of the inbox transaction (`&mut PgConnection` on
    /// PostgreSQL); it may borrow what the caller holds, such as the
    /// decoded event. The future `process` returns is `Send` when the
    /// closure's is, so it can be spawned.
    ///
    /// # Errors
    /// [`Error::Handler`] when the handler fails (everything rolled back,
    /// nothing recorded); [`Error::Database`] when the database fails.
    pub async fn process<T, F>(&self, event_id: &str, handler: F) -> Result<Outcome<T>, Error>
    where
        F: AsyncFnOnce(&mut DB::Connection) -> Result<T, BoxError>,
    {
        let Some(mut tx) = self.begin(event_id).await? else {
            return Ok(Outcome::Duplicate);
        };
        let result = handler(&mut *tx).await;
        self.settle(tx, event_id, result).await
    }

    /// The inbox transaction of `event_id`, without a closure: a
    /// transaction that has recorded `event_id`, for the handler's writes
    /// and then `commit`; `None` when the event was processed before.
    ///
    /// [`Inbox::process`] is this, the handler and the commit in one call.
    /// Code generic over the database may need this form: stable Rust
    /// cannot always prove there that an async closure's future is `Send`.
    /// A transaction dropped without `commit` rolls back and records
    /// nothing, so the event is processed again when redelivered.
    ///
    /// ```no_run
    /// # async fn example(inbox: outbox_inbox::Inbox<sqlx::Postgres>) -> Result<(), outbox_inbox::Error> {
    /// if let Some(mut tx) = inbox.begin("01a229c9-3478-7564-b02c-66d8acd1975a").await? {
    ///     sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 1")
    ///         .execute(&mut *tx)
    ///         .await?;
    ///     tx.commit().await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Database`] when the database fails.
    pub async fn begin(&self, event_id: &str) -> Result<Option<Transaction<'static, DB>>, Error> {
        let mut tx = outbox::begin_transaction(&self.pool).await?;
        let first_delivery = DB::record_message(&mut *tx, &self.consumer, event_id).await?;
        if first_delivery {
            return Ok(Some(tx));
        }
        tx.rollback().await?;
        tracing::debug!(consumer = %self.consumer, event_id, "duplicate delivery; handler skipped");
        Ok(None)
    }

    /// Commit `tx` when the handler succeeded, roll it back when it failed.
    pub(crate) async fn settle<T>(
        &self,
        tx: Transaction<'static, DB>,
        event_id: &str,
        result: Result<T, BoxError>,
    ) -> Result<Outcome<T>, Error> {
        match result {
            Ok(value) => {
                tx.commit().await?;
                Ok(Outcome::Processed(value))
            }
            Err(source) => {
                tx.rollback().await?;
                Err(Error::Handler {
                    event_id: event_id.to_owned(),
                    source,
                })
            }
        }
    }
}
