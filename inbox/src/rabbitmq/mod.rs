//! [`RabbitMqInboxConsumer`]: consume a RabbitMQ queue fed by the relay
//! (`docs/wire-format.md`) and apply each event's effects once through an
//! [`Inbox`](crate::Inbox).
//!
//! # Delivery
//!
//! The consumer reads one queue with manual acknowledgements and a prefetch
//! ([`RabbitMqConsumerConfig::prefetch`]) that bounds the messages in
//! flight; up to that many are processed concurrently. Each delivery goes
//! through the inbox's delivery policy, the same as the Kafka adapter's
//! (`docs/inbox.md`): its [`IncomingEvent`](crate::IncomingEvent) is read
//! from the `cloudEvents:` headers and the `message_id` / `type`
//! properties, decoded with [`Handler::decode`](crate::Handler::decode) and
//! processed in the inbox transaction, in an `inbox.handle` span
//! ([`crate::handler_span`]). This module translates RabbitMQ's side of
//! it: the delivery is acked only once the policy finished it (the inbox
//! transaction committed, the event was a duplicate, or the dead letter was
//! confirmed), and requeued when the policy released it. Every redelivery
//! the broker makes (after a lost connection, a crash, a requeue) is
//! therefore harmless: the inbox deduplicates it.
//!
//! # Retries and attempt counting
//!
//! * **Handler failure** (the handler returned an error or panicked): the
//!   delivery stays unacked while the consumer waits an exponential backoff
//!   with jitter (`retry_base_delay * 2^(n-1)`, at most `retry_max_delay`)
//!   and runs the handler again, up to
//!   [`RabbitMqConsumerConfig::max_attempts`] runs; a waiting retry
//!   occupies one prefetch slot. The attempts of a message that already
//!   carries [`ATTEMPTS_HEADER`] count from that number.
//! * **Database outage** ([`Error::Database`](crate::Error::Database), or a
//!   handler error caused by a lost `sqlx` connection): not the message's
//!   fault and not counted; the delivery stays unacked and is tried again
//!   after a backoff that grows with consecutive outages.
//! * **Poison** (a [`DecodeError`](crate::DecodeError): no id, unknown
//!   type or version, a body that does not decode): dead-lettered at once.
//!
//! A stop or a lost connection ends every wait early: the delivery is
//! requeued (or, with the connection gone, redelivered by the broker), and
//! the failed attempts of its wait are not recorded on it.
//!
//! # Dead letters
//!
//! Dead-lettered messages are published (confirmed, `mandatory`) to the
//! dead-letter exchange with the original body, properties and headers
//! plus [`DEAD_LETTER_REASON_HEADER`], [`DEAD_LETTER_QUEUE_HEADER`] and
//! [`ATTEMPTS_HEADER`], then the original is acked. With no
//! [`RabbitMqConsumerConfig::dead_letter_exchange`] the consumer declares a
//! durable fanout exchange `<queue>.dlx` bound to a durable queue
//! `<queue>.dlq` at every connect; a configured exchange must exist. When a
//! dead letter cannot be published (unroutable, nacked, broker trouble),
//! the original stays unacked and publishing is tried again with backoff:
//! it is never dropped.
//!
//! # Connection
//!
//! The queue must exist (it is checked with a passive declare). A failure
//! to connect when [`RabbitMqInboxConsumer::run`] starts is returned; a
//! connection lost later is reopened with backoff (`retry_base_delay` up to
//! `retry_max_delay`) and consuming resumes; so is a session whose channel
//! the broker closed. Unacked messages of the lost connection are
//! redelivered by the broker and deduplicated by the inbox.
//!
//! The consumer also runs [`crate::prune_until_stopped`] for its inbox
//! while it runs.

mod config;
mod consumer;
mod dead_letter;
mod delivery;
mod headers;
mod session;
mod topology;

pub use self::config::{QueueBinding, RabbitMqConsumerConfig};
pub use self::consumer::RabbitMqInboxConsumer;
pub use self::dead_letter::{ATTEMPTS_HEADER, DEAD_LETTER_QUEUE_HEADER, DEAD_LETTER_REASON_HEADER};
