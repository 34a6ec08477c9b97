//! What a channel error means for the event whose publish it failed:
//! rejected (its exchange is missing or refused, it is too large) or the
//! broker unavailable.

use outbox::broker::rabbitmq::ConfirmFailure;

use super::RabbitMqPublisher;
use super::exchanges::missing_exchange_failure;
use crate::event::OutboundEvent;
use crate::publish::PublishFailure;

impl From<ConfirmFailure> for PublishFailure {
    /// A nacked or returned message is rejected; a channel that does not
    /// confirm leaves the broker unavailable.
    fn from(failure: ConfirmFailure) -> Self {
        if failure.is_refusal() {
            PublishFailure::Rejected(failure.to_string())
        } else {
            PublishFailure::Unavailable(failure.to_string())
        }
    }
}

/// AMQP reply codes the publisher tells apart.
const REPLY_ACCESS_REFUSED: u16 = 403;
pub(super) const REPLY_NOT_FOUND: u16 = 404;
const REPLY_PRECONDITION_FAILED: u16 = 406;

impl RabbitMqPublisher {
    /// The failure of `event` when its channel failed with `error`: a
    /// rejection when the broker closed the channel because of this event's
    /// exchange or size, otherwise the broker is unavailable.
    pub(super) fn channel_failure(
        &self,
        error: &lapin::Error,
        event: &OutboundEvent,
    ) -> PublishFailure {
        let exchange = event.topic.as_str();
        if let lapin::ErrorKind::ProtocolError(amqp_error) = error.kind() {
            let text = amqp_error.get_message().as_str();
            let names_exchange = text.contains(&format!("exchange '{exchange}'"));
            match amqp_error.get_id() {
                REPLY_NOT_FOUND if names_exchange => {
                    self.forget_exchange(exchange);
                    return missing_exchange_failure(exchange);
                }
                REPLY_ACCESS_REFUSED if names_exchange => {
                    return PublishFailure::Rejected(format!(
                        "rabbitmq refused the publish to exchange {exchange}: {text}"
                    ));
                }
                REPLY_PRECONDITION_FAILED => {
                    if let Some(max_size) = max_message_size(text)
                        && event.payload.len() > max_size
                    {
                        return PublishFailure::Rejected(format!(
                            "message too large for rabbitmq ({} payload bytes, max {max_size}): {text}",
                            event.payload.len()
                        ));
                    }
                }
                _ => {}
            }
        }
        match error.kind() {
            lapin::ErrorKind::ProtocolError(amqp_error) => {
                PublishFailure::Unavailable(format!("rabbitmq closed the channel: {amqp_error}"))
            }
            _ => PublishFailure::Unavailable(format!("rabbitmq: {error}")),
        }
    }
}

/// The AMQP reply code of a channel or connection error, if the broker
/// sent one.
pub(super) fn reply_code(error: &lapin::Error) -> Option<u16> {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(amqp_error) => Some(amqp_error.get_id()),
        _ => None,
    }
}

/// The limit in RabbitMQ's "message size N is larger than configured max
/// size M" channel error.
fn max_message_size(text: &str) -> Option<usize> {
    let (_, after) = text.split_once("max size ")?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_max_message_size() {
        assert_eq!(
            max_message_size(
                "PRECONDITION_FAILED - message size 20480 is larger than configured max size 10000"
            ),
            Some(10000)
        );
        assert_eq!(
            max_message_size("PRECONDITION_FAILED - something else"),
            None
        );
    }
}
