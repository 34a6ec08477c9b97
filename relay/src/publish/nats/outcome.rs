//! What JetStream's answer to one publish means for its event.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::{self, ErrorCode};

use crate::publish::PublishFailure;

/// JetStream error codes that say the stream cannot take messages for now,
/// nothing about the event: no cluster, no leader, no quorum, no resources.
const UNAVAILABLE_CODES: &[ErrorCode] = &[
    ErrorCode::CLUSTER_INCOMPLETE,
    ErrorCode::CLUSTER_NO_PEERS,
    ErrorCode::CLUSTER_NOT_ACTIVE,
    ErrorCode::CLUSTER_NOT_AVAILABLE,
    ErrorCode::CLUSTER_NOT_LEADER,
    ErrorCode::INSUFFICIENT_RESOURCES,
    ErrorCode::TEMP_STORAGE_FAILED,
];

/// What a failed publish to `subject` means.
pub(super) enum Failure {
    /// The event's own outcome: a rejection, or JetStream's "not now"; the
    /// client is fine.
    Event(PublishFailure),
    /// The client failed (no acknowledgement in time, connection lost): the
    /// event is unavailable and the client must be replaced.
    Client(PublishFailure),
}

/// The outcome of the error `error` of a publish to `subject`, whether
/// it came when handing the message over or instead of its
/// acknowledgement.
pub(super) fn publish_failure(error: &PublishError, subject: &str) -> Failure {
    match error.kind() {
        // No stream listens on the subject: the server answered "no
        // responders" to the publish.
        PublishErrorKind::StreamNotFound => Failure::Event(PublishFailure::Rejected(format!(
            "no JetStream stream takes subject `{subject}`"
        ))),
        PublishErrorKind::MaxPayloadExceeded => Failure::Event(PublishFailure::Rejected(format!(
            "the message to subject `{subject}` is larger than the server takes: {error}"
        ))),
        PublishErrorKind::TimedOut => Failure::Client(PublishFailure::Unavailable(format!(
            "no JetStream acknowledgement of the message to subject `{subject}` in time"
        ))),
        PublishErrorKind::BrokenPipe => Failure::Client(PublishFailure::Unavailable(format!(
            "the NATS connection was lost before the message to subject `{subject}` was \
             acknowledged"
        ))),
        PublishErrorKind::MaxAckPending => Failure::Event(PublishFailure::Unavailable(format!(
            "too many NATS publishes await their acknowledgement; the message to subject \
             `{subject}` was not sent"
        ))),
        _ => match jetstream_error(error) {
            Some(refusal) if UNAVAILABLE_CODES.contains(&refusal.error_code()) => {
                Failure::Event(PublishFailure::Unavailable(format!(
                    "JetStream cannot take the message to subject `{subject}` now: {refusal}"
                )))
            }
            Some(refusal) => Failure::Event(PublishFailure::Rejected(format!(
                "JetStream refused the message to subject `{subject}`: {refusal}"
            ))),
            // The message never left (the client is closed), or its answer
            // was not an acknowledgement.
            None => Failure::Client(PublishFailure::Unavailable(format!(
                "publishing to subject `{subject}` failed on the NATS client: {error}"
            ))),
        },
    }
}

/// The error JetStream answered with, if it answered with one.
fn jetstream_error(error: &PublishError) -> Option<&jetstream::Error> {
    std::error::Error::source(error)?.downcast_ref::<jetstream::Error>()
}
