//! What Redis's answer to one `XADD` means for its event.

use redis::{RedisError, ServerError, Value};

use crate::publish::PublishFailure;

/// Error codes that say Redis cannot take writes for now, nothing about the
/// event: loading, out of memory, a script running, a failover, a slot
/// moving.
const UNAVAILABLE_CODES: &[&str] = &[
    "LOADING",
    "OOM",
    "BUSY",
    "MASTERDOWN",
    "READONLY",
    "MISCONF",
    "NOREPLICAS",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
];

/// The outcome of the reply to an event's `XADD` to `stream`: an entry id
/// is published; an error is a rejection, or unavailable when its code is
/// one of Redis's "not now".
pub(super) fn reply_outcome(reply: &Value, stream: &str) -> Result<(), PublishFailure> {
    match reply {
        Value::BulkString(_) | Value::SimpleString(_) => Ok(()),
        Value::ServerError(error) => Err(server_error(error.code(), &describe(error), stream)),
        other => Err(PublishFailure::Rejected(format!(
            "redis answered the XADD to stream `{stream}` without an entry id: {other:?}"
        ))),
    }
}

/// The outcome of an `XADD` to `stream` in a pipeline that failed as a
/// whole: Redis's refusal when it answered with an error, else
/// unavailable (the connection failed or timed out; it must be replaced).
pub(super) fn pipeline_failure(error: &RedisError, stream: &str) -> PublishFailure {
    match error.code() {
        Some(code) => server_error(code, &error.to_string(), stream),
        None => PublishFailure::Unavailable(format!(
            "redis connection failed before the XADD to stream `{stream}` was answered: {error}"
        )),
    }
}

fn server_error(code: &str, message: &str, stream: &str) -> PublishFailure {
    if UNAVAILABLE_CODES.contains(&code) {
        PublishFailure::Unavailable(format!(
            "redis cannot take the XADD to stream `{stream}` now: {message}"
        ))
    } else {
        PublishFailure::Rejected(format!(
            "redis refused the XADD to stream `{stream}`: {message}"
        ))
    }
}

fn describe(error: &ServerError) -> String {
    match error.details() {
        Some(details) => format!("{} {details}", error.code()),
        None => error.code().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_id_is_published_and_errors_are_classified() {
        assert_eq!(
            reply_outcome(&Value::BulkString(b"1-0".to_vec()), "orders"),
            Ok(())
        );
        let rejected = reply_outcome(&Value::Nil, "orders");
        assert!(
            matches!(rejected, Err(PublishFailure::Rejected(_))),
            "{rejected:?}"
        );
    }
}
