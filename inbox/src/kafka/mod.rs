//! [`KafkaInboxConsumer`]: a Kafka consumer group that feeds a
//! [`Handler`](crate::Handler) through the [`Inbox`](crate::Inbox), so
//! each event's effects are applied once however often Kafka delivers it.
//!
//! Messages are read as the relay writes them (CloudEvents Kafka binding,
//! binary mode, `docs/wire-format.md`): `ce_*` headers, the payload as the
//! value and the aggregate id as the key. Each message goes through the
//! inbox's delivery policy, the same as the RabbitMQ adapter's
//! (`docs/inbox.md`): decoded, processed in the inbox transaction in an
//! `inbox.handle` span ([`crate::handler_span`]), retried in place with
//! backoff after a handler failure (up to
//! [`KafkaConsumerConfig::max_attempts`]) or a database outage (not
//! counted), and dead-lettered when it is poison or out of attempts. This
//! module translates Kafka's side of it: partitions, keys and offsets.
//!
//! # Offsets
//!
//! Automatic commits and automatic offset storing are off. A message's
//! offset becomes committable only after the policy finished the message:
//! its inbox transaction committed (processed, or a duplicate), or the
//! dead-letter topic acknowledged its dead letter. Offsets are committed
//! per partition up to the lowest offset that is not finished: a finished
//! message after an unfinished one is never committed past it. Commits
//! happen every [`KafkaConsumerConfig::commit_interval`], before a
//! partition is revoked in a rebalance, and when the consumer stops. A
//! crash between a database commit and the offset commit costs a
//! redelivery, which the inbox turns into [`Outcome::Duplicate`](crate::Outcome::Duplicate).
//!
//! # Concurrency and order
//!
//! Up to [`KafkaConsumerConfig::max_in_flight`] messages are in flight
//! (running, retrying or waiting for their turn). Messages with the same key
//! in the same partition (the events of one aggregate) are handled strictly
//! one after another, in offset order; different keys run concurrently.
//! Messages without a key are one sequence per partition. A retry holds
//! back the later messages of its key only. While the limit is reached the
//! consumer stops fetching; when that lasts longer than
//! `max.poll.interval.ms` (a database down for minutes), librdkafka leaves
//! the group and rejoins on the next poll, and the messages are redelivered
//! (as duplicates where they were processed).
//!
//! # Dead letters
//!
//! A dead letter is the original key, value and headers, plus
//! [`DEAD_LETTER_REASON_HEADER`] (the reason) and
//! [`DEAD_LETTER_SOURCE_HEADER`] (`topic/partition/offset`), produced to
//! the dead-letter topic ([`KafkaConsumerConfig::dead_letter_topic`], by
//! default `<topic>.dlq`) with `acks=all`. A dead-letter topic that does
//! not exist is created at startup (or on first use). Kafka keeps no
//! attempt count, so a message redelivered after a restart starts its
//! attempts over.
//!
//! # Stopping
//!
//! When the [`CancellationToken`](tokio_util::sync::CancellationToken)
//! passed to [`KafkaInboxConsumer::run`] is cancelled, the consumer stops
//! fetching, lets running handlers finish (messages waiting for a retry or
//! for their turn are left for redelivery), commits and returns its
//! [`ConsumerStats`](crate::ConsumerStats). The background pruning of the
//! inbox ([`crate::prune_until_stopped`]) stops with it.

mod config;
mod consumer;
mod dead_letter;
mod lanes;
mod logging;
mod message;
mod offset_commits;
mod offsets;

pub use self::config::{DEAD_LETTER_SUFFIX, KafkaConsumerConfig};
pub use self::consumer::KafkaInboxConsumer;
pub use self::dead_letter::{DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER};
