//! [`Commands`]: what the consumer asks of Redis besides its blocking
//! reads, on a connection of their own (a blocked `XREADGROUP` holds its
//! connection): creating the group, `XACK`, the dead-letter `XADD`, the
//! delivery counts, `XAUTOCLAIM`, and refreshing the entries in flight.
//! [`connect`] opens both connections.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisError, Value};

use super::config::RedisConsumerConfig;
use super::entry::{RawEntry, StreamEntry, autoclaim_reply};
use crate::consumer::{DEAD_LETTER_REASON, DEAD_LETTER_SOURCE};
use crate::error::Error;

/// The entries this consumer holds in flight in one session, by stream
/// and id: the reader does not take one twice, and only these are
/// refreshed.
#[derive(Debug, Default)]
pub(crate) struct InFlight(Mutex<HashSet<(Arc<str>, String)>>);

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(Arc<str>, String)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Take `entry` in; `false` when it is in flight already.
    pub(crate) fn insert(&self, entry: &StreamEntry) -> bool {
        self.lock()
            .insert((Arc::clone(&entry.stream), entry.id.clone()))
    }

    /// `entries` are finished.
    pub(crate) fn remove<'a>(&self, entries: impl IntoIterator<Item = &'a StreamEntry>) {
        let mut held = self.lock();
        for entry in entries {
            held.remove(&(Arc::clone(&entry.stream), entry.id.clone()));
        }
    }

    /// The ids in flight of `stream`.
    fn ids_of(&self, stream: &str) -> HashSet<String> {
        self.lock()
            .iter()
            .filter(|(of, _)| &**of == stream)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

/// The consumer's commands, on the connection that never blocks.
#[derive(Clone)]
pub(crate) struct Commands {
    connection: MultiplexedConnection,
    config: Arc<RedisConsumerConfig>,
}

/// Open the command connection and the reading connection, whose replies
/// may take the `BLOCK` time and the command timeout.
pub(crate) async fn connect(
    config: &Arc<RedisConsumerConfig>,
) -> Result<(Commands, MultiplexedConnection), RedisError> {
    let client = redis::Client::open(config.url.as_str())?;
    let commanding = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.command_timeout))
        .set_response_timeout(Some(config.command_timeout));
    let reading = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.command_timeout))
        .set_response_timeout(Some(config.block + config.command_timeout));
    let connection = client
        .get_multiplexed_async_connection_with_config(&commanding)
        .await?;
    let reader = client
        .get_multiplexed_async_connection_with_config(&reading)
        .await?;
    Ok((
        Commands {
            connection,
            config: Arc::clone(config),
        },
        reader,
    ))
}

impl Commands {
    fn connection(&self) -> MultiplexedConnection {
        self.connection.clone()
    }

    /// Create the group on every stream where it is missing, creating the
    /// stream too (`XGROUP CREATE <stream> <group> <start> MKSTREAM`); a
    /// group that exists (`BUSYGROUP`) is left as it is.
    pub(crate) async fn create_groups(&self) -> Result<(), RedisError> {
        for stream in &self.config.streams {
            let created: Result<Value, RedisError> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(stream)
                .arg(&self.config.group)
                .arg(self.config.group_start.id())
                .arg("MKSTREAM")
                .query_async(&mut self.connection())
                .await;
            match created {
                Ok(_) => tracing::info!(
                    stream = %stream,
                    group = %self.config.group,
                    start = self.config.group_start.id(),
                    "created the consumer group"
                ),
                Err(error) if error.code() == Some("BUSYGROUP") => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// `XACK` `entries`, one command per stream. A failed `XACK` leaves the
    /// entries pending: read again at this consumer's next session, or
    /// claimed by another, and then a duplicate.
    pub(crate) async fn acknowledge(&self, entries: &[&StreamEntry]) {
        let mut by_stream: Vec<(&str, Vec<&str>)> = Vec::new();
        for entry in entries {
            match by_stream
                .iter_mut()
                .find(|(stream, _)| *stream == &*entry.stream)
            {
                Some((_, ids)) => ids.push(&entry.id),
                None => by_stream.push((&entry.stream, vec![&entry.id])),
            }
        }
        for (stream, ids) in by_stream {
            let acked: Result<u64, RedisError> = redis::cmd("XACK")
                .arg(stream)
                .arg(&self.config.group)
                .arg(&ids)
                .query_async(&mut self.connection())
                .await;
            match acked {
                Ok(_) => tracing::trace!(stream, entries = ids.len(), "entries acknowledged"),
                Err(error) => tracing::warn!(
                    stream,
                    entries = ids.len(),
                    %error,
                    "XACK failed; the entries stay pending and come again as duplicates"
                ),
            }
        }
    }

    /// `XADD` `entry` to its dead-letter stream with all its fields plus
    /// the reason and the source (`stream/id`); the dead-letter stream once
    /// Redis added it.
    pub(crate) async fn dead_letter(
        &self,
        entry: &StreamEntry,
        reason: &str,
    ) -> Result<String, Error> {
        let dead_letter_stream = self.config.dead_letter_stream_for(&entry.stream);
        let mut adding = redis::cmd("XADD");
        adding.arg(&dead_letter_stream).arg("*");
        for (name, value) in entry
            .fields
            .iter()
            .filter(|(name, _)| name != DEAD_LETTER_REASON && name != DEAD_LETTER_SOURCE)
        {
            adding.arg(name).arg(value);
        }
        adding
            .arg(DEAD_LETTER_REASON)
            .arg(reason)
            .arg(DEAD_LETTER_SOURCE)
            .arg(entry.source());
        let _id: String = adding
            .query_async(&mut self.connection())
            .await
            .map_err(Error::redis)?;
        Ok(dead_letter_stream)
    }

    /// How often the group delivered each of `ids` of `stream` (all
    /// pending on this consumer), from `XPENDING`; an id missing from the
    /// answer is not pending any more.
    pub(crate) async fn deliveries(
        &self,
        stream: &str,
        ids: &[&str],
    ) -> Result<HashMap<String, u32>, RedisError> {
        let (Some(first), Some(last)) = (ids.first(), ids.last()) else {
            return Ok(HashMap::new());
        };
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(&self.config.group)
            .arg(first)
            .arg(last)
            // Other entries in flight may lie between the first and the last.
            .arg(ids.len() + self.config.max_in_flight)
            .arg(&self.config.consumer_name)
            .query_async(&mut self.connection())
            .await?;
        Ok(pending
            .into_iter()
            .map(|(id, _consumer, _idle, delivered)| {
                (id, u32::try_from(delivered).unwrap_or(u32::MAX))
            })
            .collect())
    }

    /// Claim up to `count` entries of `stream` idle for `claim_idle` on any
    /// consumer of the group, from `cursor`; the next cursor (`0-0` when
    /// the pending list was scanned to its end) and the entries.
    pub(crate) async fn autoclaim(
        &self,
        stream: &str,
        cursor: &str,
        count: usize,
    ) -> Result<(String, Vec<RawEntry>), RedisError> {
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(stream)
            .arg(&self.config.group)
            .arg(&self.config.consumer_name)
            .arg(millis(self.config.claim_idle))
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.connection())
            .await?;
        autoclaim_reply(reply).map_err(parse_error)
    }

    /// Reset the idle time of this consumer's entries in flight of
    /// `stream`, still pending on it, so that no other consumer claims
    /// them while they run or wait for a retry (`XCLAIM ... 0 <ids>
    /// JUSTID`, which leaves their delivery counts alone).
    pub(crate) async fn refresh(
        &self,
        stream: &str,
        in_flight: &InFlight,
    ) -> Result<(), RedisError> {
        let held = in_flight.ids_of(stream);
        if held.is_empty() {
            return Ok(());
        }
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(&self.config.group)
            .arg("-")
            .arg("+")
            .arg(held.len().max(self.config.max_in_flight).saturating_mul(4))
            .arg(&self.config.consumer_name)
            .query_async(&mut self.connection())
            .await?;
        let ids: Vec<String> = pending
            .into_iter()
            .map(|(id, ..)| id)
            .filter(|id| held.contains(id))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let _: Value = redis::cmd("XCLAIM")
            .arg(stream)
            .arg(&self.config.group)
            .arg(&self.config.consumer_name)
            .arg(0)
            .arg(&ids)
            .arg("JUSTID")
            .query_async(&mut self.connection())
            .await?;
        tracing::trace!(stream, entries = ids.len(), "entries in flight refreshed");
        Ok(())
    }
}

/// A reply that does not read as expected, as the client's error.
pub(crate) fn parse_error(reason: String) -> RedisError {
    RedisError::from((redis::ErrorKind::Parse, "unexpected reply", reason))
}

pub(crate) fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
