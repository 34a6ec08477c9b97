//! What the relay's publisher and the inbox's dead-lettering share about
//! RabbitMQ: messages are published `mandatory` on a channel in confirm
//! mode, and one counts as taken only on an Ack without a returned
//! message. A Nack, a returned (unroutable) message, a channel not in
//! confirm mode and a confirm that does not come in time are each a
//! [`ConfirmFailure`], with one text whoever published.
//!
//! ```
//! use lapin::Confirmation;
//! use outbox::broker::rabbitmq::{ConfirmFailure, confirmed};
//!
//! assert_eq!(confirmed(Confirmation::Ack(None), "orders", "order.created"), Ok(()));
//! let nacked = confirmed(Confirmation::Nack(None), "orders", "order.created")
//!     .expect_err("a nack is a failure");
//! assert!(nacked.is_refusal());
//! assert_eq!(
//!     nacked.to_string(),
//!     "rabbitmq nacked the message (exchange orders, routing key order.created)"
//! );
//! assert_eq!(
//!     confirmed(Confirmation::NotRequested, "orders", "order.created"),
//!     Err(ConfirmFailure::NotInConfirmMode)
//! );
//! ```

use std::time::Duration;

use lapin::Confirmation;
use lapin::options::BasicPublishOptions;

/// The options of every publish: `mandatory`, so that a message no queue
/// takes comes back (returned) instead of being dropped.
pub const MANDATORY: BasicPublishOptions = BasicPublishOptions {
    mandatory: true,
    immediate: false,
};

/// Why a message published on a channel in confirm mode was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmFailure {
    /// No confirm came within `timeout`: the channel or the connection may
    /// be stuck.
    #[error("no rabbitmq publisher confirm within {} ms", .timeout.as_millis())]
    NoConfirm {
        /// How long the publisher waited.
        timeout: Duration,
    },
    /// The channel is not in confirm mode: the broker confirms nothing on
    /// it.
    #[error("rabbitmq channel is not in confirm mode")]
    NotInConfirmMode,
    /// The broker nacked the message.
    #[error("rabbitmq nacked the message (exchange {exchange}, routing key {routing_key})")]
    Nacked {
        /// The exchange the message was published to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
    },
    /// The broker returned the message: no queue is bound to the exchange
    /// for its routing key.
    #[error(
        "unroutable: no queue bound to exchange {exchange} for routing key {routing_key} \
         ({reply_code} {reply_text})"
    )]
    Unroutable {
        /// The exchange the message was published to.
        exchange: String,
        /// Its routing key.
        routing_key: String,
        /// The AMQP reply code of the return (312 `NO_ROUTE`).
        reply_code: u16,
        /// The reply text of the return.
        reply_text: String,
    },
}

impl ConfirmFailure {
    /// Whether the broker refused the message itself (nacked or returned)
    /// rather than the channel failing to confirm it.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            ConfirmFailure::Nacked { .. } | ConfirmFailure::Unroutable { .. }
        )
    }
}

/// A message the broker returned as unroutable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    /// The `message_id` property of the returned message; empty when it
    /// has none.
    pub message_id: String,
    /// The AMQP reply code of the return.
    pub reply_code: u16,
    /// The reply text of the return.
    pub reply_text: String,
}

impl Returned {
    /// The failure of the message published to `exchange` with
    /// `routing_key` that came back this way.
    pub fn unroutable(&self, exchange: &str, routing_key: &str) -> ConfirmFailure {
        ConfirmFailure::Unroutable {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
            reply_code: self.reply_code,
            reply_text: self.reply_text.clone(),
        }
    }
}

/// What the confirmation of a message published to `exchange` with
/// `routing_key` says: `Ok` for an Ack, the failure of a Nack or of a
/// channel not in confirm mode, and the returned message it carries, if
/// any. A returned message may be another one than the message confirmed,
/// when several are in flight on one channel: match it by
/// [`Returned::message_id`].
pub fn read_confirmation(
    confirmation: Confirmation,
    exchange: &str,
    routing_key: &str,
) -> (Result<(), ConfirmFailure>, Option<Returned>) {
    let outcome = match &confirmation {
        Confirmation::Ack(_) => Ok(()),
        Confirmation::Nack(_) => Err(ConfirmFailure::Nacked {
            exchange: exchange.to_owned(),
            routing_key: routing_key.to_owned(),
        }),
        Confirmation::NotRequested => Err(ConfirmFailure::NotInConfirmMode),
    };
    let returned = confirmation.take_message().map(|message| Returned {
        message_id: message
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned())
            .unwrap_or_default(),
        reply_code: message.reply_code,
        reply_text: message.reply_text.as_str().to_owned(),
    });
    (outcome, returned)
}

/// The outcome of the only message in flight, published to `exchange` with
/// `routing_key`: `Ok` on an Ack without a returned message.
///
/// # Errors
/// [`ConfirmFailure::Nacked`], [`ConfirmFailure::NotInConfirmMode`] or, for
/// an Ack with the message returned, [`ConfirmFailure::Unroutable`].
pub fn confirmed(
    confirmation: Confirmation,
    exchange: &str,
    routing_key: &str,
) -> Result<(), ConfirmFailure> {
    let (outcome, returned) = read_confirmation(confirmation, exchange, routing_key);
    outcome?;
    match returned {
        Some(returned) => Err(returned.unroutable(exchange, routing_key)),
        None => Ok(()),
    }
}

/// Implements [`Debug`](std::fmt::Debug) for the settings of a RabbitMQ
/// client, a struct with a `url` field, as `#[derive(Debug)]` would but
/// with the URL's password masked ([`mask_password`](crate::mask_password)),
/// so that `{:?}` is safe to log. Name every other field, in the order to
/// show them after `url`: a field left out does not compile.
///
/// ```
/// pub struct Settings {
///     pub url: String,
///     pub queue: String,
/// }
/// outbox::debug_masking_url!(Settings { queue });
///
/// let settings = Settings {
///     url: "amqp://guest:secret@localhost/%2f".to_owned(),
///     queue: "orders".to_owned(),
/// };
/// assert_eq!(
///     format!("{settings:?}"),
///     r#"Settings { url: "amqp://guest:***@localhost/%2f", queue: "orders" }"#
/// );
/// ```
#[macro_export]
macro_rules! debug_masking_url {
    ($settings:ident { $($field:ident),+ $(,)? }) => {
        impl ::std::fmt::Debug for $settings {
            fn fmt(&self, formatter: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let $settings { url, $($field),+ } = self;
                formatter
                    .debug_struct(::std::stringify!($settings))
                    .field("url", &$crate::mask_password(url))
                    $(.field(::std::stringify!($field), $field))+
                    .finish()
            }
        }
    };
}
