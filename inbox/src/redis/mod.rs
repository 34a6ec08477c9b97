//! [`RedisInboxConsumer`]: read Redis streams fed by the relay through a
//! consumer group and apply each event's effects once through an
//! [`Inbox`](crate::Inbox).
//!
//! Entries are read as the relay writes them (`docs/wire-format.md`): one
//! entry per event, `ce_*` fields for the attributes, `content-type`, and
//! the payload in `data` ([`IncomingEvent::from_redis`](crate::IncomingEvent::from_redis)).
//! Each entry goes through the inbox's delivery policy, the same as the
//! Kafka and RabbitMQ adapters' (`docs/inbox.md`): decoded, processed in
//! the inbox transaction in an `inbox.handle` span
//! ([`crate::handler_span`]), retried with backoff after a handler
//! failure (up to [`RedisConsumerConfig::max_attempts`]) or a database
//! outage (not counted), and dead-lettered when it is poison or out of
//! attempts. This module translates Redis's side of it: the group, the
//! pending entries, `XACK` and `XAUTOCLAIM`.
//!
//! # The group and the pending entries
//!
//! The consumer group is created on each stream when missing (`XGROUP
//! CREATE <stream> <group> 0 MKSTREAM`), from the start of the stream by
//! default ([`GroupStart`]), so a backlog written before the group existed
//! is read. Each session of the consumer first reads its own pending
//! entries (`XREADGROUP ... 0`) until none remain, then new ones (`>`,
//! blocking up to [`RedisConsumerConfig::block`]). An entry is
//! acknowledged (`XACK`) only once the policy finished it: its inbox
//! transaction committed, its event was a duplicate, or its dead letter
//! was added. An entry left pending by a consumer that died is taken over
//! with `XAUTOCLAIM` once it was idle for [`RedisConsumerConfig::claim_idle`]
//! (checked every half of it); the consumer keeps its own entries in flight
//! from looking idle meanwhile (`XCLAIM ... JUSTID`). Every redelivery is
//! harmless: the inbox deduplicates it.
//!
//! # Retries and attempt counting
//!
//! A failed entry is retried by the consumer itself, in place, after the
//! policy's backoff: it stays pending and unacknowledged, and holds back
//! only the later entries of its own aggregate. A consumer killed while
//! it waits loses nothing: the entry is pending, read again when a
//! consumer of the same name starts, or claimed by another after
//! `claim_idle`. Redis counts the deliveries of a pending entry; each
//! earlier delivery counts as one failed attempt, so an entry that kills
//! its consumer is dead-lettered after `max_attempts` deliveries.
//!
//! # Concurrency and order
//!
//! Up to [`RedisConsumerConfig::max_in_flight`] entries are in flight. The
//! entries of one aggregate (`ce_partitionkey`) in one stream are handled
//! one after another, in stream order; other aggregates run concurrently.
//! The order holds within one consumer: Redis hands the entries of a
//! group to its consumers without regard to their aggregate, and a claimed
//! entry comes after later ones of its aggregate.
//!
//! # Dead letters
//!
//! A dead letter is the entry with all its fields plus
//! [`DEAD_LETTER_REASON_FIELD`] (the reason) and
//! [`DEAD_LETTER_SOURCE_FIELD`] (`<stream>/<entry id>`), added with `XADD`
//! to the dead-letter stream ([`RedisConsumerConfig::dead_letter_stream`],
//! by default `<stream>.dlq`); the entry is acknowledged only after Redis
//! added it. A dead letter that cannot be added is tried again with
//! backoff; the entry stays pending meanwhile.
//!
//! # Connection
//!
//! One server, `redis://` (no TLS, no Redis Cluster). A server that cannot
//! be reached, or a connection lost, ends the session: running handlers
//! finish (their `XACK`s may fail: the entries stay pending and come again
//! as duplicates), and the consumer reconnects with backoff. An entry
//! trimmed from its stream (`MAXLEN`) before it was read is lost to the
//! consumer; one trimmed while pending is acknowledged with a warning.
//!
//! # Stopping
//!
//! When the [`CancellationToken`](tokio_util::sync::CancellationToken)
//! passed to [`RedisInboxConsumer::run`] is cancelled, the consumer stops
//! reading, lets running handlers finish and acknowledges them, and
//! returns its [`ConsumerStats`](crate::ConsumerStats). Entries waiting
//! for a retry or for their turn stay pending on its consumer name. The
//! background pruning of the inbox ([`crate::prune_until_stopped`]) stops
//! with it.

mod commands;
mod config;
mod consumer;
mod entry;
mod reader;

pub use self::config::{DEAD_LETTER_SUFFIX, GroupStart, RedisConsumerConfig};
pub use self::consumer::RedisInboxConsumer;
pub use crate::consumer::{
    DEAD_LETTER_REASON as DEAD_LETTER_REASON_FIELD, DEAD_LETTER_SOURCE as DEAD_LETTER_SOURCE_FIELD,
};
