//! [`NatsInboxConsumer`]: consume a NATS JetStream stream fed by the relay
//! through a durable pull consumer and apply each event's effects once
//! through an [`Inbox`](crate::Inbox).
//!
//! Messages are read as the relay publishes them (`docs/wire-format.md`):
//! one message per event, `ce-<attribute>` headers with percent-encoded
//! values, `Content-Type`, `Nats-Msg-Id` = the event id, and the payload
//! ([`IncomingEvent::from_nats`](crate::IncomingEvent::from_nats)). Each
//! message goes through the inbox's delivery policy, the same as the other
//! adapters' (`docs/inbox.md`): decoded, processed in the inbox
//! transaction in an `inbox.handle` span ([`crate::handler_span`]),
//! retried with backoff after a handler failure (up to
//! [`NatsConsumerConfig::max_attempts`]) or a database outage (not
//! counted), and dead-lettered when it is poison or out of attempts. This
//! module translates JetStream's side of it: the durable consumer, the
//! acknowledgements and the dead-letter subject.
//!
//! # The durable consumer and the acknowledgements
//!
//! The durable pull consumer [`NatsConsumerConfig::durable`] on
//! [`NatsConsumerConfig::stream`] is created when missing (deliver all, so
//! a backlog published before it existed is read; explicit
//! acknowledgement; [`NatsConsumerConfig::ack_wait`]), and bound to as it
//! is when present. A message is acknowledged (`+ACK`, confirmed by the
//! server) only once the policy finished it: its inbox transaction
//! committed or its event was a duplicate. While the consumer holds a
//! message (its handler runs, it waits for a retry or behind an earlier
//! message of its aggregate) it marks it in progress (`+WPI`) every third
//! of the consumer's `ack_wait`, so the server does not deliver it again.
//!
//! # Retries and attempt counting
//!
//! A failed message is retried by the consumer itself, in place, after the
//! policy's backoff, and holds back only the later messages of its own
//! aggregate. A message given up without finishing (the consumer stops)
//! is `NAK`ed with [`NatsConsumerConfig::retry_base_delay`] as its delay.
//! The server counts the deliveries of a message; each earlier delivery
//! counts as one failed attempt, so a message that kills its consumer is
//! dead-lettered after `max_attempts` deliveries. The durable consumer is
//! created without a `max_deliver` limit: the policy bounds the attempts,
//! and a server limit would drop a message without a dead letter.
//!
//! # Concurrency and order
//!
//! Up to [`NatsConsumerConfig::max_in_flight`] messages are in flight.
//! The messages of one aggregate (`ce-partitionkey`) are handled one after
//! another, in stream order; other aggregates run concurrently. The order
//! holds within one consumer process.
//!
//! # Dead letters
//!
//! A dead letter is the message, payload and headers, plus
//! [`DEAD_LETTER_REASON_HEADER`] (the reason, percent-encoded) and
//! [`DEAD_LETTER_SOURCE_HEADER`] (`<stream>/<stream sequence>`), published
//! to `<subject>.dlq` ([`NatsConsumerConfig::dead_letter_subject`]); its
//! `Nats-Msg-Id` is `<stream>/<sequence>/dead-letter`. A stream must take
//! that subject. The original is terminated (`+TERM`) only once JetStream
//! acknowledged the dead letter; a dead letter that no stream takes (no
//! responders) or that is not acknowledged is logged and tried again with
//! backoff, the message held and marked in progress meanwhile.
//!
//! # Connection
//!
//! A server that cannot be reached, or a pull that fails, ends the
//! session: running handlers finish (their acknowledgements may fail: the
//! messages come again after `ack_wait`, as duplicates), and the consumer
//! reconnects with backoff.
//!
//! # Stopping
//!
//! When the [`CancellationToken`](tokio_util::sync::CancellationToken)
//! passed to [`NatsInboxConsumer::run`] is cancelled, the consumer stops
//! pulling, lets running handlers finish and acknowledges them, and
//! returns its [`ConsumerStats`](crate::ConsumerStats). Messages waiting
//! for a retry are `NAK`ed; those waiting for their turn come again after
//! `ack_wait`. The background pruning of the inbox
//! ([`crate::prune_until_stopped`]) stops with it.

mod config;
mod consumer;
mod message;
mod session;

pub use self::config::{DEAD_LETTER_SUFFIX, NatsConsumerConfig, NatsCredentials};
pub use self::consumer::NatsInboxConsumer;
pub use crate::consumer::{
    DEAD_LETTER_REASON as DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE_HEADER,
};
