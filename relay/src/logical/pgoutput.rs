//! Decoding the pgoutput messages of the stream into [`ClaimedEvent`]s.
//!
//! The publication carries inserts of `outbox_events` only, in pgoutput's
//! protocol version 1 with text values: a `Relation` message describes the
//! table's columns (once per session, and again after a schema change), then
//! each `Insert` carries one new row. `Begin` and `Commit` arrive already
//! parsed by the client; every other message (`Origin`, `Type`, ...) is
//! skipped.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::OutboundEvent;
use crate::store::ClaimedEvent;
use crate::store::rows::parse_headers;

/// The pseudo-partition every streamed event belongs to: the stream is one
/// unit of work, held under one lease.
pub(crate) const STREAM_PARTITION: i32 = 0;

/// A pgoutput message that is not what the decoder expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pgoutput: {0}")]
pub(crate) struct DecodeError(String);

fn malformed(what: impl Into<String>) -> DecodeError {
    DecodeError(what.into())
}

/// One decoded message of interest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Change {
    /// A row inserted into `outbox_events`, to publish.
    Inserted(Box<ClaimedEvent>),
    /// A row inserted that is not a pending event (a row copied in with
    /// another state), or a message that carries no row.
    Skipped,
}

/// Column names of each relation, by relation id, as the `Relation`
/// messages of the session described them.
#[derive(Debug, Default)]
pub(crate) struct PgOutputDecoder {
    relations: HashMap<u32, Vec<String>>,
}

impl PgOutputDecoder {
    /// Decode one pgoutput message.
    pub(crate) fn decode(&mut self, message: &[u8]) -> Result<Change, DecodeError> {
        let mut reader = Reader(message);
        match reader.byte()? {
            b'R' => {
                self.read_relation(&mut reader)?;
                Ok(Change::Skipped)
            }
            b'I' => self.read_insert(&mut reader),
            _ => Ok(Change::Skipped),
        }
    }

    fn read_relation(&mut self, reader: &mut Reader<'_>) -> Result<(), DecodeError> {
        let relation_id = reader.u32()?;
        let _namespace = reader.cstring()?;
        let _name = reader.cstring()?;
        let _replica_identity = reader.byte()?;
        let column_count = reader.u16()?;
        let mut columns = Vec::with_capacity(usize::from(column_count));
        for _ in 0..column_count {
            let _flags = reader.byte()?;
            columns.push(reader.cstring()?.to_owned());
            let _type_oid = reader.u32()?;
            let _type_modifier = reader.u32()?;
        }
        self.relations.insert(relation_id, columns);
        Ok(())
    }

    fn read_insert(&self, reader: &mut Reader<'_>) -> Result<Change, DecodeError> {
        let relation_id = reader.u32()?;
        let columns = self
            .relations
            .get(&relation_id)
            .ok_or_else(|| malformed(format!("insert into unknown relation {relation_id}")))?;
        if reader.byte()? != b'N' {
            return Err(malformed("insert without a new tuple"));
        }
        let value_count = usize::from(reader.u16()?);
        let mut row: HashMap<&str, Option<&str>> = HashMap::with_capacity(value_count);
        for index in 0..value_count {
            let name = columns
                .get(index)
                .ok_or_else(|| malformed("more values than the relation has columns"))?;
            let value = match reader.byte()? {
                b'n' | b'u' => None,
                b't' => {
                    let length = reader.u32()? as usize;
                    let bytes = reader.take(length)?;
                    Some(
                        std::str::from_utf8(bytes)
                            .map_err(|_| malformed(format!("column {name} is not UTF-8")))?,
                    )
                }
                other => {
                    return Err(malformed(format!(
                        "column {name}: unexpected value kind {other}"
                    )));
                }
            };
            row.insert(name.as_str(), value);
        }
        event_from_row(&row)
    }
}

/// The event of an inserted row, or [`Change::Skipped`] for a row that is
/// not pending.
fn event_from_row(row: &HashMap<&str, Option<&str>>) -> Result<Change, DecodeError> {
    let text = |column: &str| -> Result<&str, DecodeError> {
        row.get(column)
            .copied()
            .flatten()
            .ok_or_else(|| malformed(format!("column {column} missing or NULL")))
    };
    let number = |column: &str| -> Result<i64, DecodeError> {
        text(column)?
            .parse::<i64>()
            .map_err(|error| malformed(format!("column {column}: {error}")))
    };
    if row.get("state").copied().flatten().unwrap_or("pending") != "pending" {
        return Ok(Change::Skipped);
    }
    let event_id_text = text("event_id")?;
    let event_id = uuid::Uuid::parse_str(event_id_text)
        .map_err(|error| malformed(format!("column event_id: {error}")))?;
    let event = OutboundEvent {
        id: number("id")?,
        event_id,
        event_type: text("event_type")?.to_owned(),
        event_version: i32::try_from(number("event_version")?)
            .map_err(|error| malformed(format!("column event_version: {error}")))?,
        source: text("source")?.to_owned(),
        aggregate_type: text("aggregate_type")?.to_owned(),
        aggregate_id: text("aggregate_id")?.to_owned(),
        topic: text("topic")?.to_owned(),
        payload: text("payload")?.to_owned(),
        headers: parse_headers(event_id_text, text("headers")?),
        created_at: parse_timestamptz(text("created_at")?)?,
        attempts: row
            .get("attempts")
            .copied()
            .flatten()
            .and_then(|value| value.parse().ok())
            .unwrap_or(0),
        replay: false,
    };
    Ok(Change::Inserted(Box::new(ClaimedEvent {
        partition_no: STREAM_PARTITION,
        event,
        committed_at: None,
    })))
}

/// A `timestamptz` in PostgreSQL's ISO output, which the stream's session
/// sets to UTC: `2026-12-01 10:00:00.123456+00`.
fn parse_timestamptz(text: &str) -> Result<DateTime<Utc>, DecodeError> {
    let trimmed = text
        .strip_suffix("+00")
        .ok_or_else(|| malformed(format!("created_at {text:?} is not in UTC")))?;
    NaiveDateTime::parse_from_str(trimmed, "%Y-%m-%d %H:%M:%S%.f")
        .map(|naive| naive.and_utc())
        .map_err(|error| malformed(format!("created_at {text:?}: {error}")))
}

/// Reads big-endian integers and strings off a message.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < length {
            return Err(malformed("message truncated"));
        }
        let (head, tail) = self.0.split_at(length);
        self.0 = tail;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        let bytes = self.take(2)?;
        Ok(u16::from_be_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let bytes = self.take(4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn cstring(&mut self) -> Result<&'a str, DecodeError> {
        let end = self
            .0
            .iter()
            .position(|&byte| byte == 0)
            .ok_or_else(|| malformed("unterminated string"))?;
        let text =
            std::str::from_utf8(&self.0[..end]).map_err(|_| malformed("string not UTF-8"))?;
        self.0 = &self.0[end + 1..];
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(columns: &[&str]) -> Vec<u8> {
        let mut message = vec![b'R'];
        message.extend_from_slice(&7u32.to_be_bytes());
        message.extend_from_slice(b"public\0outbox_events\0");
        message.push(b'd');
        message.extend_from_slice(&(columns.len() as u16).to_be_bytes());
        for column in columns {
            message.push(0);
            message.extend_from_slice(column.as_bytes());
            message.push(0);
            message.extend_from_slice(&25u32.to_be_bytes());
            message.extend_from_slice(&(-1i32).to_be_bytes());
        }
        message
    }

    fn insert(values: &[Option<&str>]) -> Vec<u8> {
        let mut message = vec![b'I'];
        message.extend_from_slice(&7u32.to_be_bytes());
        message.push(b'N');
        message.extend_from_slice(&(values.len() as u16).to_be_bytes());
        for value in values {
            match value {
                None => message.push(b'n'),
                Some(text) => {
                    message.push(b't');
                    message.extend_from_slice(&(text.len() as u32).to_be_bytes());
                    message.extend_from_slice(text.as_bytes());
                }
            }
        }
        message
    }

    const COLUMNS: &[&str] = &[
        "id",
        "event_id",
        "event_type",
        "event_version",
        "source",
        "aggregate_type",
        "aggregate_id",
        "topic",
        "payload",
        "headers",
        "created_at",
        "state",
        "attempts",
    ];

    fn values(state: &str) -> Vec<Option<&str>> {
        vec![
            Some("42"),
            Some("0192f3a4-5b6c-7d8e-9f00-112233445566"),
            Some("order.placed"),
            Some("2"),
            Some("/shop"),
            Some("order"),
            Some("o-1"),
            Some("orders"),
            Some(r#"{"total": 3}"#),
            Some(r#"{"tenant": "t1"}"#),
            Some("2026-12-01 10:00:00.123456+00"),
            Some(state),
            Some("0"),
        ]
    }

    #[test]
    fn an_insert_decodes_into_the_event_it_carries() {
        let mut decoder = PgOutputDecoder::default();
        assert_eq!(decoder.decode(&relation(COLUMNS)), Ok(Change::Skipped));
        let Ok(Change::Inserted(claimed)) = decoder.decode(&insert(&values("pending"))) else {
            panic!("no event decoded");
        };
        assert_eq!(claimed.partition_no, STREAM_PARTITION);
        assert_eq!(claimed.event.id, 42);
        assert_eq!(claimed.event.event_version, 2);
        assert_eq!(claimed.event.aggregate_id, "o-1");
        assert_eq!(claimed.event.payload, r#"{"total": 3}"#);
        assert_eq!(
            claimed.event.headers.get("tenant").map(String::as_str),
            Some("t1")
        );
        assert_eq!(
            claimed.event.created_at.to_rfc3339(),
            "2026-12-01T10:00:00.123456+00:00"
        );
    }

    #[test]
    fn a_row_inserted_in_another_state_is_skipped() {
        let mut decoder = PgOutputDecoder::default();
        decoder.decode(&relation(COLUMNS)).expect("relation");
        assert_eq!(
            decoder.decode(&insert(&values("published"))),
            Ok(Change::Skipped)
        );
    }

    #[test]
    fn an_insert_before_its_relation_is_an_error() {
        let mut decoder = PgOutputDecoder::default();
        assert!(decoder.decode(&insert(&values("pending"))).is_err());
    }

    #[test]
    fn a_truncated_message_is_an_error() {
        let mut decoder = PgOutputDecoder::default();
        decoder.decode(&relation(COLUMNS)).expect("relation");
        let mut message = insert(&values("pending"));
        message.truncate(message.len() - 3);
        assert!(decoder.decode(&message).is_err());
    }
}
