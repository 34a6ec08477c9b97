//! Reading and writing AMQP header values: the CloudEvents attributes as
//! text, the attempt count, and error texts cut to a header's size.

use lapin::types::{AMQPValue, FieldTable};

/// Longest error text carried in a header.
pub(crate) const MAX_REASON_BYTES: usize = 4_096;

/// Every header of `table` that has a text form, as `(name, text)`.
pub(crate) fn text_headers(table: Option<&FieldTable>) -> Vec<(String, String)> {
    table
        .map(|table| {
            table
                .inner()
                .iter()
                .filter_map(|(name, value)| header_text(value).map(|text| (name.to_string(), text)))
                .collect()
        })
        .unwrap_or_default()
}

/// A header value as text, for the CloudEvents attributes.
fn header_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(text) => Some(String::from_utf8_lossy(text.as_bytes()).into_owned()),
        AMQPValue::ShortString(text) => Some(text.to_string()),
        AMQPValue::Boolean(value) => Some(value.to_string()),
        AMQPValue::ShortShortInt(value) => Some(value.to_string()),
        AMQPValue::ShortShortUInt(value) => Some(value.to_string()),
        AMQPValue::ShortInt(value) => Some(value.to_string()),
        AMQPValue::ShortUInt(value) => Some(value.to_string()),
        AMQPValue::LongInt(value) => Some(value.to_string()),
        AMQPValue::LongUInt(value) => Some(value.to_string()),
        AMQPValue::LongLongInt(value) => Some(value.to_string()),
        AMQPValue::Timestamp(value) => Some(value.to_string()),
        _ => None,
    }
}

/// The count of a header such as `x-outbox-attempts`: any integer, or text
/// holding one; negative counts as 0.
pub(crate) fn header_count(value: &AMQPValue) -> Option<u32> {
    let count: i64 = match value {
        AMQPValue::ShortShortInt(value) => i64::from(*value),
        AMQPValue::ShortShortUInt(value) => i64::from(*value),
        AMQPValue::ShortInt(value) => i64::from(*value),
        AMQPValue::ShortUInt(value) => i64::from(*value),
        AMQPValue::LongInt(value) => i64::from(*value),
        AMQPValue::LongUInt(value) => i64::from(*value),
        AMQPValue::LongLongInt(value) => *value,
        AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes())
            .ok()?
            .trim()
            .parse()
            .ok()?,
        AMQPValue::ShortString(text) => text.as_str().trim().parse().ok()?,
        _ => return None,
    };
    u32::try_from(count.max(0)).ok()
}

/// `text` cut to at most [`MAX_REASON_BYTES`], on a character boundary.
pub(crate) fn truncated(text: &str) -> String {
    if text.len() <= MAX_REASON_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_REASON_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use lapin::types::{LongString, ShortString};

    use super::*;

    #[test]
    fn counts_attempts_from_any_integer_or_text() {
        assert_eq!(header_count(&AMQPValue::LongLongInt(3)), Some(3));
        assert_eq!(header_count(&AMQPValue::ShortUInt(2)), Some(2));
        assert_eq!(
            header_count(&AMQPValue::LongString(LongString::from("4"))),
            Some(4)
        );
        assert_eq!(header_count(&AMQPValue::LongLongInt(-1)), Some(0));
        assert_eq!(header_count(&AMQPValue::Boolean(true)), None);
    }

    #[test]
    fn reads_headers_as_text() {
        let mut table = FieldTable::default();
        table.insert(
            ShortString::from("cloudEvents:id"),
            AMQPValue::LongString(LongString::from("e-1")),
        );
        table.insert(
            ShortString::from("cloudEvents:eventversion"),
            AMQPValue::LongLongInt(2),
        );
        table.insert(
            ShortString::from("nested"),
            AMQPValue::FieldTable(FieldTable::default()),
        );
        let mut headers = text_headers(Some(&table));
        headers.sort();
        assert_eq!(
            headers,
            vec![
                ("cloudEvents:eventversion".to_owned(), "2".to_owned()),
                ("cloudEvents:id".to_owned(), "e-1".to_owned()),
            ]
        );
        assert!(text_headers(None).is_empty());
    }

    #[test]
    fn truncates_on_a_character_boundary() {
        let text = "é".repeat(MAX_REASON_BYTES);
        let cut = truncated(&text);
        assert!(cut.len() <= MAX_REASON_BYTES + 3);
        assert!(cut.ends_with("..."));
    }
}
