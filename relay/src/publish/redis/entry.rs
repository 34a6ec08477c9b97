//! The stream entry of an event: the `XADD` that adds it, with one field
//! per CloudEvents attribute (`docs/wire-format.md`), and the trimming of
//! its stream.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outbox::wire;

use super::config::{RedisStream, StreamTrim};
use crate::event::OutboundEvent;
use crate::publish::PublishFailure;
use crate::publish::cloudevent::CloudEvent;

/// The `XADD` of one event, and the stream it adds to.
pub(super) struct Entry {
    /// The stream key.
    pub(super) stream: String,
    /// The command, ready for a pipeline.
    pub(super) command: redis::Cmd,
}

/// The `XADD` of `event` to its stream under `stream`'s settings:
/// `ce_<attribute>` for every CloudEvents attribute, `content-type` for
/// `datacontenttype`, `traceparent` and `tracestate` as plain fields when
/// the event carries them, and `data` holding the payload bytes. An
/// event that is not a valid CloudEvent is rejected.
pub(super) fn entry(event: &OutboundEvent, stream: &RedisStream) -> Result<Entry, PublishFailure> {
    let cloud_event = CloudEvent::from_outbound(event)?;
    let key = stream.key.render(event, stream.partitions);
    let mut command = redis::cmd("XADD");
    command.arg(&key);
    match stream.trim {
        Some(StreamTrim::MaxLen(length)) => {
            command.arg("MAXLEN").arg("~").arg(length);
        }
        Some(StreamTrim::MaxAge(age)) => {
            command.arg("MINID").arg("~").arg(min_id(age));
        }
        None => {}
    }
    command.arg("*");
    let mut prefixed = String::with_capacity(32);
    for (name, value) in cloud_event.attributes() {
        if name == wire::DATACONTENTTYPE_ATTRIBUTE {
            command.arg(wire::REDIS_CONTENT_TYPE_FIELD);
        } else {
            wire::write_kafka_header_name(&mut prefixed, name);
            command.arg(prefixed.as_str());
        }
        command.arg(value.as_ref());
    }
    for trace_header in wire::TRACE_CONTEXT_HEADERS {
        if let Some(value) = event.headers.get(trace_header) {
            command.arg(trace_header).arg(value.as_str());
        }
    }
    command
        .arg(wire::REDIS_DATA_FIELD)
        .arg(event.payload.as_bytes());
    Ok(Entry {
        stream: key,
        command,
    })
}

/// The `MINID` that drops entries older than `age`: the entry id of that
/// moment, `<milliseconds>-0`.
fn min_id(age: Duration) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let since = now.saturating_sub(age);
    format!("{}-0", since.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::redis::StreamKey;
    use crate::publish::redis::tests::order_event;

    /// The arguments of a command, as text.
    fn arguments(command: &redis::Cmd) -> Vec<String> {
        command
            .args_iter()
            .map(|argument| match argument {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not simple>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn an_entry_carries_every_attribute_and_the_payload() {
        let mut event = order_event("order-7");
        event.headers.insert(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        );
        let entry = entry(&event, &RedisStream::default()).expect("valid event");
        assert_eq!(entry.stream, "orders");
        let arguments = arguments(&entry.command);
        assert_eq!(&arguments[..3], ["XADD", "orders", "*"]);
        let fields: std::collections::HashMap<&str, &str> = arguments[3..]
            .chunks(2)
            .map(|pair| (pair[0].as_str(), pair[1].as_str()))
            .collect();
        let id = event.event_id.to_string();
        for (field, value) in [
            ("ce_id", id.as_str()),
            ("ce_type", "order.created"),
            ("ce_source", "/orders"),
            ("ce_specversion", "1.0"),
            ("ce_aggregatetype", "order"),
            ("ce_partitionkey", "order-7"),
            ("ce_eventversion", "1"),
            ("content-type", "application/json"),
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            (
                "ce_traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("data", "{}"),
        ] {
            assert_eq!(fields.get(field), Some(&value), "{field}");
        }
        assert!(fields.contains_key("ce_time"));
    }

    #[test]
    fn trimming_is_written_only_when_configured() {
        let event = order_event("order-7");
        let by_length = RedisStream::new(StreamKey::parse("s:{partition}").expect("valid"))
            .partitions(4)
            .trim(StreamTrim::MaxLen(1000));
        let by_length = arguments(&entry(&event, &by_length).expect("valid").command);
        assert_eq!(&by_length[2..6], ["MAXLEN", "~", "1000", "*"]);
        assert!(by_length[1].starts_with("s:"), "{}", by_length[1]);

        let by_age = RedisStream::default().trim(StreamTrim::MaxAge(Duration::from_secs(60)));
        let by_age = arguments(&entry(&event, &by_age).expect("valid").command);
        assert_eq!(&by_age[2..4], ["MINID", "~"]);
        let millis: u128 = by_age[4]
            .strip_suffix("-0")
            .and_then(|millis| millis.parse().ok())
            .expect("an entry id");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis();
        assert!(now - millis >= 60_000 && now - millis < 70_000);
    }
}
