//! [`Inbox`]: run a handler at most once per (consumer, event id).

use futures::future::BoxFuture;
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
/// let outcome = inbox
///     .process("01a229c9-3478-7564-b02c-66d8acd1975a", |tx| {
///         Box::pin(async move {
///             sqlx::query("UPDATE accounts SET balance = balance + 10 WHERE id = 1")
///                 .execute(&mut **tx)
///                 .await?;
///             Ok(())
///         })
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
    /// # Errors
    /// [`Error::Handler`] when the handler fails (everything rolled back,
    /// nothing recorded); [`Error::Database`] when the database fails.
    pub async fn process<T, F>(&self, event_id: &str, handler: F) -> Result<Outcome<T>, Error>
    where
        F: for<'t> FnOnce(&'t mut Transaction<'static, DB>) -> BoxFuture<'t, Result<T, BoxError>>,
    {
        let mut tx = outbox::begin_transaction(&self.pool).await?;
        let first_delivery = DB::record_message(&mut *tx, &self.consumer, event_id).await?;
        if !first_delivery {
            tx.rollback().await?;
            tracing::debug!(consumer = %self.consumer, event_id, "duplicate delivery; handler skipped");
            return Ok(Outcome::Duplicate);
        }
        match handler(&mut tx).await {
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
