//! Decoding the pgoutput messages of the stream into [`ClaimedEvent`]s.
//!
//! The publication carries inserts of `outbox_events` only, in pgoutput's
//! protocol version 1 with text values: a `Relation` message describes the
//! table's columns (once per session, and again after a schema change), then
//! each `Insert` carries one new row. `Begin` and `Commit` arrive already
//! parsed by the client; every other message (`Origin`, `Type`, ...) is
//! skipped.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};

use crate::event::ClaimedEvent;
use crate::event::OutboundEvent;
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

/// The columns an event is read from; [`Relation::positions`] lists where
/// each one sits in the relation's rows, in this order.
const READ_COLUMNS: [&str; 13] = [
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

/// Where `name` sits in [`READ_COLUMNS`].
fn column(name: &str) -> usize {
    READ_COLUMNS
        .iter()
        .position(|read| *read == name)
        .unwrap_or_else(|| unreachable!("`{name}` is not one of READ_COLUMNS"))
}

/// A relation as its `Relation` message described it: its column names, and
/// where the columns an event is read from sit, found once per message
/// rather than by name in every row.
#[derive(Debug)]
struct Relation {
    names: Vec<String>,
    positions: [Option<usize>; READ_COLUMNS.len()],
}

impl Relation {
    fn new(names: Vec<String>) -> Self {
        let positions =
            READ_COLUMNS.map(|column| names.iter().position(|name| name.as_str() == column));
        Relation { names, positions }
    }
}

/// The values of one inserted row, read by column.
struct Row<'a, 'r> {
    values: &'r [Option<&'a str>],
    relation: &'r Relation,
}

impl<'a> Row<'a, '_> {
    /// The value of [`READ_COLUMNS`]`[column]`: `None` when the relation has
    /// no such column or the value is NULL.
    fn get(&self, column: usize) -> Option<&'a str> {
        let position = self.relation.positions[column]?;
        self.values.get(position).copied().flatten()
    }
}

/// The relations of the session, by relation id, as their `Relation`
/// messages described them.
#[derive(Debug, Default)]
pub(crate) struct PgOutputDecoder {
    relations: HashMap<u32, Relation>,
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
        self.relations.insert(relation_id, Relation::new(columns));
        Ok(())
    }

    fn read_insert(&self, reader: &mut Reader<'_>) -> Result<Change, DecodeError> {
        let relation_id = reader.u32()?;
        let relation = self
            .relations
            .get(&relation_id)
            .ok_or_else(|| malformed(format!("insert into unknown relation {relation_id}")))?;
        if reader.byte()? != b'N' {
            return Err(malformed("insert without a new tuple"));
        }
        let value_count = usize::from(reader.u16()?);
        let mut values: Vec<Option<&str>> = Vec::with_capacity(value_count);
        for index in 0..value_count {
            let name = relation
                .names
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
            values.push(value);
        }
        event_from_row(&Row {
            values: &values,
            relation,
        })
    }
}

/// The event of an inserted row, or [`Change::Skipped`] for a row that is
/// not pending.
fn event_from_row(row: &Row<'_, '_>) -> Result<Change, DecodeError> {
    let text = |name: &str| -> Result<&str, DecodeError> {
        row.get(column(name))
            .ok_or_else(|| malformed(format!("column {name} missing or NULL")))
    };
    let number = |name: &str| -> Result<i64, DecodeError> {
        text(name)?
            .parse::<i64>()
            .map_err(|error| malformed(format!("column {name}: {error}")))
    };
    if row.get(column("state")).unwrap_or("pending") != "pending" {
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
        payload: Arc::from(text("payload")?),
        headers: parse_headers(event_id_text, text("headers")?),
        created_at: parse_timestamptz(text("created_at")?)?,
        attempts: row
            .get(column("attempts"))
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
/// sets to UTC: `2026-12-01 10:00:00.123456+00`. The date and the time
/// are read apart with chrono's ISO 8601 parsers, which need no format
/// string to interpret for every row.
fn parse_timestamptz(text: &str) -> Result<DateTime<Utc>, DecodeError> {
    let trimmed = text
        .strip_suffix("+00")
        .ok_or_else(|| malformed(format!("created_at {text:?} is not in UTC")))?;
    let (date, time) = trimmed
        .split_once(' ')
        .ok_or_else(|| malformed(format!("created_at {text:?}: no time")))?;
    let date = date
        .parse::<NaiveDate>()
        .map_err(|error| malformed(format!("created_at {text:?}: {error}")))?;
    let time = time
        .parse::<NaiveTime>()
        .map_err(|error| malformed(format!("created_at {text:?}: {error}")))?;
    Ok(NaiveDateTime::new(date, time).and_utc())
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

    /// The columns the decoder reads, in the order `values` gives their
    /// values (the table's other columns are left out of these messages).
    const COLUMNS: &[&str] = &READ_COLUMNS;

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
        assert_eq!(&*claimed.event.payload, r#"{"total": 3}"#);
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
    fn columns_are_found_by_name_whatever_their_order() {
        let mut decoder = PgOutputDecoder::default();
        // A table with a column added by the user and its columns in
        // another order: the relation message says where each one is.
        let mut columns: Vec<&str> = COLUMNS.iter().rev().copied().collect();
        columns.insert(3, "added_by_user");
        decoder.decode(&relation(&columns)).expect("relation");
        let mut row: Vec<Option<&str>> = values("pending").into_iter().rev().collect();
        row.insert(3, Some("anything"));
        let Ok(Change::Inserted(claimed)) = decoder.decode(&insert(&row)) else {
            panic!("no event decoded");
        };
        assert_eq!(claimed.event.id, 42);
        assert_eq!(claimed.event.topic, "orders");
        assert_eq!(claimed.event.aggregate_id, "o-1");
    }

    #[test]
    fn a_missing_column_is_named() {
        let mut decoder = PgOutputDecoder::default();
        let columns: Vec<&str> = COLUMNS.iter().copied().filter(|c| *c != "topic").collect();
        decoder.decode(&relation(&columns)).expect("relation");
        let row: Vec<Option<&str>> = values("pending")
            .into_iter()
            .enumerate()
            .filter(|(index, _)| COLUMNS[*index] != "topic")
            .map(|(_, value)| value)
            .collect();
        let error = decoder.decode(&insert(&row)).expect_err("no topic");
        assert_eq!(error.to_string(), "pgoutput: column topic missing or NULL");
    }

    #[test]
    fn timestamps_parse_with_and_without_fractions_and_only_in_utc() {
        let parsed = |text: &str| parse_timestamptz(text).map(|time| time.to_rfc3339());
        assert_eq!(
            parsed("2026-12-01 10:00:00.123456+00"),
            Ok("2026-12-01T10:00:00.123456+00:00".to_owned())
        );
        assert_eq!(
            parsed("2026-12-01 10:00:00+00"),
            Ok("2026-12-01T10:00:00+00:00".to_owned())
        );
        assert_eq!(
            parsed("2026-12-01 10:00:00.5+00"),
            Ok("2026-12-01T10:00:00.500+00:00".to_owned())
        );
        assert!(parsed("2026-12-01 10:00:00+02").is_err());
        assert!(parsed("2026-12-01T10:00:00+00").is_err());
        assert!(parsed("2026-13-01 10:00:00+00").is_err());
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
