//! [`AttemptResult`]: how one handler attempt ended, classified once for
//! every adapter: done, the database is out, or the message failed.

use std::any::Any;

use crate::error::Error;
use crate::inbox::Outcome;

/// How one run of [`Inbox::process`](crate::Inbox::process) for a message
/// ended.
#[derive(Debug)]
pub(crate) enum AttemptResult {
    /// Processed, or a duplicate: the message is finished.
    Done(Outcome<()>),
    /// The database could not be reached: not the message's fault, so the
    /// attempt does not count.
    DatabaseOutage(String),
    /// The handler failed or panicked: the attempt counts.
    Failed(String),
}

impl AttemptResult {
    /// Classify what `Inbox::process` returned, or the panic it raised.
    pub(crate) fn classify(
        result: Result<Result<Outcome<()>, Error>, Box<dyn Any + Send>>,
        event_id: &str,
    ) -> Self {
        match result {
            Ok(Ok(outcome)) => AttemptResult::Done(outcome),
            Ok(Err(error)) if is_database_outage(&error) => {
                AttemptResult::DatabaseOutage(error.to_string())
            }
            Ok(Err(error)) => AttemptResult::Failed(error.to_string()),
            Err(panic) => AttemptResult::Failed(format!(
                "handler panicked for event {event_id}: {}",
                panic_message(panic.as_ref())
            )),
        }
    }
}

/// Whether `error` means the database is unreachable rather than that the
/// message cannot be handled: any [`Error::Database`] (the inbox's own
/// statements failed: begin, the inbox row, commit, rollback), or a
/// handler error caused, anywhere in its chain of sources, by a `sqlx`
/// error of a lost or unobtainable connection.
pub(crate) fn is_database_outage(error: &Error) -> bool {
    match error {
        Error::Database(_) => true,
        Error::Handler { source, .. } => caused_by_lost_connection(source.as_ref()),
        _ => false,
    }
}

/// Whether `error` or one of its sources is a `sqlx` connection failure.
fn caused_by_lost_connection(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if current
            .downcast_ref::<sqlx::Error>()
            .is_some_and(is_connection_failure)
        {
            return true;
        }
        cause = current.source();
    }
    false
}

/// `sqlx` errors of a connection that broke, could not be opened or could
/// not be taken from the pool, and server errors of SQLSTATE class 08
/// (connection exception) or 57P (the server is shutting down or
/// starting).
fn is_connection_failure(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::BoxError;

    /// A handler's own error type wrapping what went wrong.
    #[derive(Debug, thiserror::Error)]
    #[error("cannot record the payment")]
    struct PaymentError(#[source] sqlx::Error);

    fn handler_error(source: BoxError) -> Error {
        Error::Handler {
            event_id: "e-1".to_owned(),
            source,
        }
    }

    fn lost_connection() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    }

    #[test]
    fn every_database_error_of_the_inbox_is_an_outage() {
        assert!(is_database_outage(&Error::Database(lost_connection())));
        assert!(is_database_outage(&Error::Database(
            sqlx::Error::RowNotFound
        )));
    }

    #[test]
    fn a_handler_error_caused_by_a_lost_connection_is_an_outage() {
        assert!(is_database_outage(&handler_error(Box::new(
            lost_connection()
        ))));
        assert!(is_database_outage(&handler_error(Box::new(
            sqlx::Error::PoolTimedOut
        ))));
        assert!(
            is_database_outage(&handler_error(Box::new(PaymentError(lost_connection())))),
            "found anywhere in the chain of sources"
        );
    }

    #[test]
    fn other_handler_errors_count_as_attempts() {
        assert!(!is_database_outage(&handler_error(
            "the card was declined".into()
        )));
        assert!(!is_database_outage(&handler_error(Box::new(PaymentError(
            sqlx::Error::RowNotFound
        )))));
        assert!(!is_database_outage(&Error::Config("bad".to_owned())));
    }

    #[test]
    fn classifies_outcomes_errors_and_panics() {
        assert!(matches!(
            AttemptResult::classify(Ok(Ok(Outcome::Duplicate)), "e-1"),
            AttemptResult::Done(Outcome::Duplicate)
        ));
        assert!(matches!(
            AttemptResult::classify(Ok(Err(Error::Database(lost_connection()))), "e-1"),
            AttemptResult::DatabaseOutage(_)
        ));
        assert!(matches!(
            AttemptResult::classify(Ok(Err(handler_error("declined".into()))), "e-1"),
            AttemptResult::Failed(reason) if reason.contains("declined")
        ));
        let panic: Box<dyn Any + Send> = Box::new("boom");
        assert!(matches!(
            AttemptResult::classify(Err(panic), "e-1"),
            AttemptResult::Failed(reason) if reason.contains("panicked for event e-1: boom")
        ));
    }
}
