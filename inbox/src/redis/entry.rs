//! [`StreamEntry`]: a stream entry as the consumer keeps it, read out of the
//! replies of `XREADGROUP` and `XAUTOCLAIM`; [`RedisDelivery`], the entry as
//! the delivery policy sees it.

use std::sync::Arc;

use outbox::wire;
use redis::Value;

use super::commands::Commands;
use crate::consumer::{LaneBroker, LaneMessage};
use crate::error::{DecodeError, Error};
use crate::incoming::IncomingEvent;
use crate::policy::{BrokerMessage, Settlement};

/// The entries of one aggregate in one stream: handled one after another.
/// An entry without `ce_partitionkey` is in its stream's lane of such
/// entries.
pub(crate) type LaneKey = (Arc<str>, Option<Arc<[u8]>>);

/// One entry of a stream, read through the consumer group.
#[derive(Debug, Clone)]
pub(crate) struct StreamEntry {
    pub(crate) stream: Arc<str>,
    pub(crate) id: String,
    /// The fields in the order the producer wrote them.
    pub(crate) fields: Vec<(String, Vec<u8>)>,
    /// Times the group delivered it, this delivery included (the
    /// `XPENDING` delivery count); 1 for a new entry.
    pub(crate) deliveries: u32,
    /// Its `ce_partitionkey`, read once: the aggregate of its lane.
    pub(crate) aggregate: Option<Arc<[u8]>>,
    /// Whether it was in a batch whose handler failed: it then runs on its
    /// own, never in a batch again.
    pub(crate) alone: bool,
}

impl StreamEntry {
    /// The entry `id` of `stream` with `fields`, delivered `deliveries`
    /// times.
    pub(crate) fn new(
        stream: Arc<str>,
        id: String,
        fields: Vec<(String, Vec<u8>)>,
        deliveries: u32,
    ) -> Self {
        let partition_key = wire::redis_field_name(wire::PARTITION_KEY_ATTRIBUTE);
        let aggregate = fields
            .iter()
            .find(|(name, _)| *name == partition_key)
            .map(|(_, value)| Arc::from(value.as_slice()));
        StreamEntry {
            stream,
            id,
            fields,
            deliveries,
            aggregate,
            alone: false,
        }
    }

    /// `stream/id`: where a dead letter came from.
    pub(crate) fn source(&self) -> String {
        format!("{}/{}", self.stream, self.id)
    }
}

impl LaneMessage for StreamEntry {
    type Lane = LaneKey;

    fn lane(&self) -> LaneKey {
        (Arc::clone(&self.stream), self.aggregate.clone())
    }

    fn runs_alone(&self) -> bool {
        self.alone
    }

    fn run_alone(&mut self) {
        self.alone = true;
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!(
            "inbox_message",
            stream = %self.stream,
            entry_id = %self.id,
            deliveries = self.deliveries,
            event_id = tracing::field::Empty,
        )
    }
}

/// An entry with the commands of its dead letter.
pub(crate) struct RedisDelivery<'a> {
    entry: &'a StreamEntry,
    commands: &'a Commands,
}

impl BrokerMessage for RedisDelivery<'_> {
    fn incoming(&self) -> Result<IncomingEvent, DecodeError> {
        IncomingEvent::from_redis(
            self.entry
                .fields
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_slice())),
        )
    }

    /// Every earlier delivery of the entry counts as one failed attempt:
    /// it ended without an acknowledgement (its consumer died, or lost its
    /// connection), so an entry that kills its consumer is dead-lettered
    /// after `max_attempts` deliveries rather than redelivered for ever.
    fn previous_attempts(&self) -> u32 {
        self.entry.deliveries.saturating_sub(1)
    }

    async fn dead_letter(&self, reason: &str, _attempts: u32) -> Result<String, Error> {
        self.commands.dead_letter(self.entry, reason).await
    }
}

impl LaneBroker<StreamEntry> for Commands {
    type Delivery<'a> = RedisDelivery<'a>;

    fn delivery<'a>(&'a self, entry: &'a StreamEntry) -> RedisDelivery<'a> {
        RedisDelivery {
            entry,
            commands: self,
        }
    }

    /// `XACK` the finished entries, only now that their inbox transaction
    /// committed (or their duplicate was recognised, or their dead letter
    /// was added).
    async fn settled(&self, settled: &[(Arc<StreamEntry>, Settlement)]) {
        let finished: Vec<&StreamEntry> = settled
            .iter()
            .filter(|(_, settlement)| settlement.is_finished())
            .map(|(entry, _)| entry.as_ref())
            .collect();
        self.acknowledge(&finished).await;
    }
}

/// The entries of a reply to `XREADGROUP`: per stream (in the order of
/// the reply), its entries; an entry whose fields are nil was deleted
/// from the stream (trimmed) while it was pending. A nil reply (the
/// `BLOCK` ran out) has none.
pub(crate) fn read_reply(reply: Value) -> Result<Vec<(String, Vec<RawEntry>)>, String> {
    let streams: Vec<(Value, Value)> = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Map(pairs) => pairs,
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Array(pair) if pair.len() == 2 => {
                    let mut pair = pair.into_iter();
                    match (pair.next(), pair.next()) {
                        (Some(stream), Some(entries)) => Ok((stream, entries)),
                        _ => Err("a stream of the reply is not [name, entries]".to_owned()),
                    }
                }
                other => Err(format!(
                    "a stream of the reply is not [name, entries]: {other:?}"
                )),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(format!("not a reply of XREADGROUP: {other:?}")),
    };
    streams
        .into_iter()
        .map(|(stream, entries)| Ok((text(&stream)?, entry_list(entries)?)))
        .collect()
}

/// An entry as the reply carries it: its id and, unless it was deleted,
/// its fields.
pub(crate) type RawEntry = (String, Option<Vec<(String, Vec<u8>)>>);

/// The reply to `XAUTOCLAIM`: the cursor to go on from and the entries
/// claimed (entries deleted while pending are left out of it and dropped
/// from the group's pending list by the server).
pub(crate) fn autoclaim_reply(reply: Value) -> Result<(String, Vec<RawEntry>), String> {
    let Value::Array(parts) = reply else {
        return Err(format!("not a reply of XAUTOCLAIM: {reply:?}"));
    };
    let mut parts = parts.into_iter();
    let cursor = parts
        .next()
        .ok_or_else(|| "XAUTOCLAIM replied without a cursor".to_owned())
        .and_then(|cursor| text(&cursor))?;
    let entries = match parts.next() {
        Some(entries) => entry_list(entries)?
            .into_iter()
            .filter(|(_, fields)| fields.is_some())
            .collect(),
        None => Vec::new(),
    };
    Ok((cursor, entries))
}

/// `[[id, [field, value, ...]], ...]`, a nil in place of the fields of a
/// deleted entry.
fn entry_list(entries: Value) -> Result<Vec<RawEntry>, String> {
    let Value::Array(entries) = entries else {
        return Err(format!("entries are not an array: {entries:?}"));
    };
    entries
        .into_iter()
        .filter(|entry| !matches!(entry, Value::Nil))
        .map(|entry| {
            let Value::Array(parts) = entry else {
                return Err(format!("an entry is not [id, fields]: {entry:?}"));
            };
            let mut parts = parts.into_iter();
            let id = parts
                .next()
                .ok_or_else(|| "an entry without an id".to_owned())
                .and_then(|id| text(&id))?;
            let fields = match parts.next() {
                None | Some(Value::Nil) => None,
                Some(fields) => Some(field_list(fields)?),
            };
            Ok((id, fields))
        })
        .collect()
}

/// `[field, value, ...]` (or a map, in RESP3) as pairs, in order.
fn field_list(fields: Value) -> Result<Vec<(String, Vec<u8>)>, String> {
    let pairs: Vec<(Value, Value)> = match fields {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            if flat.len() % 2 != 0 {
                return Err("an entry's fields are not field, value pairs".to_owned());
            }
            let mut flat = flat.into_iter();
            let mut pairs = Vec::with_capacity(flat.len() / 2);
            while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
                pairs.push((name, value));
            }
            pairs
        }
        other => return Err(format!("an entry's fields are not an array: {other:?}")),
    };
    pairs
        .into_iter()
        .map(|(name, value)| {
            let name = String::from_utf8(bytes(name)?)
                .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned());
            Ok((name, bytes(value)?))
        })
        .collect()
}

fn bytes(value: Value) -> Result<Vec<u8>, String> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::VerbatimString { text, .. } => Ok(text.into_bytes()),
        Value::Int(number) => Ok(number.to_string().into_bytes()),
        other => Err(format!("not a string: {other:?}")),
    }
}

fn text(value: &Value) -> Result<String, String> {
    bytes(value.clone()).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn entry(id: &str, fields: &[&str]) -> Value {
        Value::Array(vec![
            bulk(id),
            Value::Array(fields.iter().map(|field| bulk(field)).collect()),
        ])
    }

    #[test]
    fn reads_entries_in_order_with_their_fields() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("orders"),
            Value::Array(vec![
                entry("1-0", &["ce_id", "e-1", "data", "{}"]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let streams = read_reply(reply).expect("a reply");
        assert_eq!(streams.len(), 1);
        let (stream, entries) = &streams[0];
        assert_eq!(stream, "orders");
        assert_eq!(
            entries[0],
            (
                "1-0".to_owned(),
                Some(vec![
                    ("ce_id".to_owned(), b"e-1".to_vec()),
                    ("data".to_owned(), b"{}".to_vec())
                ])
            )
        );
        assert_eq!(
            entries[1],
            ("2-0".to_owned(), None),
            "deleted while pending"
        );
        assert!(read_reply(Value::Nil).expect("timed out").is_empty());
    }

    #[test]
    fn reads_a_claim_and_its_cursor() {
        let reply = Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![entry("3-0", &["data", "{}"])]),
            Value::Array(vec![bulk("4-0")]),
        ]);
        let (cursor, entries) = autoclaim_reply(reply).expect("a reply");
        assert_eq!(cursor, "0-0");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, "3-0");
    }
}
