//! [`Reader`]: the task that takes entries from Redis for one session and
//! hands them to the message loop: first this consumer's own pending
//! entries (`XREADGROUP ... 0`) until none remain, then new ones (`>`,
//! with `BLOCK`), and every half `claim_idle` the entries other consumers
//! left idle (`XAUTOCLAIM`). Beside it, [`refresh_in_flight`] keeps the
//! consumer's own entries in flight from looking idle.
//!
//! It reads only while the message loop has room (`max_in_flight`), one
//! unit of [`Reader::room`] per entry in flight. It runs in a task of its
//! own because a read cut short would lose what it read: the entries
//! would be pending on this consumer and not in flight.

use std::collections::HashMap;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{RedisError, Value};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use super::commands::{Commands, InFlight, millis, parse_error};
use super::config::RedisConsumerConfig;
use super::entry::{RawEntry, StreamEntry, read_reply};

/// What the reader hands the message loop: entries, or why it stopped
/// reading (the session is lost).
pub(crate) type Read = Result<Vec<StreamEntry>, RedisError>;

/// The entries to start from: `0` for the consumer's own pending entries,
/// `>` for new ones.
const OWN_PENDING: &str = "0";
const NEW_ENTRIES: &str = ">";

/// Reads entries for one session.
pub(crate) struct Reader {
    pub(crate) config: Arc<RedisConsumerConfig>,
    pub(crate) commands: Commands,
    /// The reading connection, whose replies may take the `BLOCK` time.
    pub(crate) connection: MultiplexedConnection,
    /// Free room for entries in flight, given back by the message loop as
    /// entries finish.
    pub(crate) room: Arc<Semaphore>,
    pub(crate) in_flight: Arc<InFlight>,
    pub(crate) entries: mpsc::UnboundedSender<Read>,
}

impl Reader {
    /// Read until the session ends: the message loop drops its receiver
    /// or aborts the task, or a command fails (sent as the last item).
    pub(crate) async fn run(mut self) {
        if let Err(error) = self.read().await {
            let _ = self.entries.send(Err(error));
        }
    }

    async fn read(&mut self) -> Result<(), RedisError> {
        self.read_own_pending().await?;
        let mut next_claim = Instant::now();
        let mut turn = 0;
        loop {
            let Some(mut room) = self.take_room().await else {
                return Ok(());
            };
            if Instant::now() >= next_claim {
                let claimed = self.claim(room).await?;
                // A claim that filled the room may have left more idle
                // entries behind: claim again as soon as there is room,
                // not half a `claim_idle` later.
                next_claim = if claimed == room {
                    Instant::now()
                } else {
                    Instant::now() + self.config.claim_interval()
                };
                room -= claimed;
            }
            if room == 0 {
                continue;
            }
            let (streams, count) = self.streams_to_read(room, &mut turn);
            let reply = self.read_group(&streams, NEW_ENTRIES, count, true).await?;
            let mut taken = 0;
            for (stream, entries) in reply {
                taken += self.hand_over(&stream, entries, false).await?;
            }
            self.room.add_permits(room.saturating_sub(taken));
        }
    }

    /// Read this consumer's pending entries of every stream, from the
    /// start of its pending list, until none remain: what it read and did
    /// not acknowledge before it stopped, died or lost its connection.
    async fn read_own_pending(&mut self) -> Result<(), RedisError> {
        let mut after: HashMap<String, String> = self
            .config
            .streams
            .iter()
            .map(|stream| (stream.clone(), OWN_PENDING.to_owned()))
            .collect();
        let mut taken_total = 0;
        while !after.is_empty() {
            let Some(room) = self.take_room().await else {
                return Ok(());
            };
            let mut taken = 0;
            // One stream at a time, so that each read goes on after its
            // own last id.
            let streams: Vec<String> = after.keys().cloned().collect();
            for stream in streams {
                let from = after[&stream].clone();
                let reply = self
                    .read_group(std::slice::from_ref(&stream), &from, room - taken, false)
                    .await?;
                let entries: Vec<RawEntry> = reply
                    .into_iter()
                    .filter(|(name, _)| *name == stream)
                    .flat_map(|(_, entries)| entries)
                    .collect();
                match entries.last() {
                    None => {
                        after.remove(&stream);
                    }
                    Some((last, _)) => {
                        after.insert(stream.clone(), last.clone());
                    }
                }
                taken += self.hand_over(&stream, entries, true).await?;
                if taken == room {
                    break;
                }
            }
            self.room.add_permits(room - taken);
            taken_total += taken;
        }
        if taken_total > 0 {
            tracing::info!(
                entries = taken_total,
                "read this consumer's pending entries again"
            );
        }
        Ok(())
    }

    /// Take over entries idle for `claim_idle` on any consumer, up to
    /// `room` of them; how many were taken.
    async fn claim(&mut self, room: usize) -> Result<usize, RedisError> {
        let mut taken = 0;
        for stream in self.config.streams.clone() {
            let mut cursor = "0-0".to_owned();
            while taken < room {
                let (next, entries) = self
                    .commands
                    .autoclaim(&stream, &cursor, room - taken)
                    .await?;
                if !entries.is_empty() {
                    tracing::info!(
                        stream = %stream,
                        entries = entries.len(),
                        claim_idle_ms = millis(self.config.claim_idle),
                        "took over entries left idle by another consumer"
                    );
                }
                taken += self.hand_over(&stream, entries, true).await?;
                if next == "0-0" {
                    break;
                }
                cursor = next;
            }
        }
        Ok(taken)
    }

    /// `XREADGROUP` of up to `count` entries of `streams` from `from` (the
    /// same for each), waiting up to `block` for new ones when `blocking`.
    async fn read_group(
        &mut self,
        streams: &[String],
        from: &str,
        count: usize,
        blocking: bool,
    ) -> Result<Vec<(String, Vec<RawEntry>)>, RedisError> {
        let mut reading = redis::cmd("XREADGROUP");
        reading
            .arg("GROUP")
            .arg(&self.config.group)
            .arg(&self.config.consumer_name)
            .arg("COUNT")
            .arg(count);
        if blocking {
            reading.arg("BLOCK").arg(millis(self.config.block).max(1));
        }
        reading.arg("STREAMS").arg(streams);
        for _ in streams {
            reading.arg(from);
        }
        let reply: Value = reading.query_async(&mut self.connection).await?;
        read_reply(reply).map_err(parse_error)
    }

    /// Hand the `entries` of `stream` to the message loop: each one not in
    /// flight already, with its delivery count (looked up when `counted`
    /// is asked for: entries read again or claimed; 1 for new ones). An
    /// entry deleted from the stream while pending is acknowledged, as
    /// there is nothing to handle. How many were handed over.
    async fn hand_over(
        &self,
        stream: &str,
        entries: Vec<RawEntry>,
        counted: bool,
    ) -> Result<usize, RedisError> {
        if entries.is_empty() {
            return Ok(0);
        }
        let stream: Arc<str> = Arc::from(stream);
        let deliveries = if counted {
            let ids: Vec<&str> = entries.iter().map(|(id, _)| id.as_str()).collect();
            self.commands.deliveries(&stream, &ids).await?
        } else {
            HashMap::new()
        };
        let mut deleted = Vec::new();
        let mut handed = Vec::with_capacity(entries.len());
        for (id, fields) in entries {
            let delivered = deliveries.get(&id).copied().unwrap_or(1).max(1);
            let entry = StreamEntry::new(
                Arc::clone(&stream),
                id,
                fields.unwrap_or_default(),
                delivered,
            );
            if entry.fields.is_empty() {
                deleted.push(entry);
            } else if self.in_flight.insert(&entry) {
                handed.push(entry);
            }
        }
        if !deleted.is_empty() {
            tracing::warn!(
                stream = %stream,
                entries = deleted.len(),
                "pending entries were deleted from the stream (trimmed?); acknowledging them"
            );
            let deleted: Vec<&StreamEntry> = deleted.iter().collect();
            self.commands.acknowledge(&deleted).await;
        }
        let count = handed.len();
        if count > 0 && self.entries.send(Ok(handed)).is_err() {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "the message loop is gone: the session ended",
            )));
        }
        Ok(count)
    }

    /// The streams one read of new entries asks, and its `COUNT` (which
    /// is per stream): every stream, sharing `room` out, when it holds one
    /// entry of each; else `room` of them, one entry each, taking turns
    /// from `turn` on, so that none waits longer than a `BLOCK` or two.
    fn streams_to_read(&self, room: usize, turn: &mut usize) -> (Vec<String>, usize) {
        let streams = &self.config.streams;
        if room >= streams.len() {
            return (streams.clone(), room / streams.len());
        }
        let chosen = (0..room)
            .map(|offset| streams[(*turn + offset) % streams.len()].clone())
            .collect();
        *turn = (*turn + room) % streams.len();
        (chosen, 1)
    }

    /// Wait for room for at least one entry, and take up to `read_count`;
    /// `None` once the room is closed (the session ends).
    async fn take_room(&self) -> Option<usize> {
        let first = self.room.acquire().await.ok()?;
        first.forget();
        let mut taken = 1;
        while taken < self.config.read_count {
            match self.room.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    taken += 1;
                }
                Err(_) => break,
            }
        }
        Some(taken)
    }
}

/// Keep this consumer's entries in flight from looking idle, so that no
/// other consumer claims them while they run, wait for a retry or wait
/// behind an earlier entry of their aggregate: every third of
/// `claim_idle`, whether or not the reader has room, until the session
/// ends (the task is aborted). A failure is left to the reader to notice.
pub(crate) async fn refresh_in_flight(
    config: Arc<RedisConsumerConfig>,
    commands: Commands,
    in_flight: Arc<InFlight>,
) {
    let period = config.claim_idle / 3;
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        for stream in &config.streams {
            if let Err(error) = commands.refresh(stream, &in_flight).await {
                tracing::debug!(stream = %stream, %error, "cannot refresh the entries in flight");
            }
        }
    }
}
