//! [`StreamKey`]: the stream an event goes to, from a template with
//! `{topic}`, `{aggregate_type}` and `{partition}` placeholders, and the
//! partition an aggregate falls in.

use crate::event::OutboundEvent;

/// One piece of a [`StreamKey`] template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Topic,
    AggregateType,
    Partition,
}

/// The key of the stream an event is added to, written as a template:
/// `{topic}` (the event's topic), `{aggregate_type}` and `{partition}` (the
/// aggregate id's partition, from 0 to `partitions - 1`) are replaced, the
/// rest is kept. The default, `{topic}`, names the stream after the topic.
///
/// The partition is Kafka's default partitioner applied to the aggregate
/// id (murmur2, positive, modulo the partition count), so a stream
/// `orders:p:3` holds the aggregates a Kafka topic of as many partitions
/// would hold in its partition 3.
///
/// ```
/// use outbox_relay::publish::StreamKey;
///
/// let key = StreamKey::parse("{topic}:p:{partition}").unwrap();
/// assert!(key.uses_partition());
/// assert!(StreamKey::parse("{topik}").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamKey {
    pieces: Vec<Piece>,
    template: String,
}

impl Default for StreamKey {
    fn default() -> Self {
        StreamKey {
            pieces: vec![Piece::Topic],
            template: "{topic}".to_owned(),
        }
    }
}

impl StreamKey {
    /// Read a template.
    ///
    /// # Errors
    /// A message naming the problem: an empty template, an unknown
    /// placeholder, or a `{` or `}` that does not belong to one.
    pub fn parse(template: &str) -> Result<Self, String> {
        if template.is_empty() {
            return Err(
                "the stream key is empty; write e.g. \"{topic}\" or \"{topic}:p:{partition}\""
                    .to_owned(),
            );
        }
        let mut pieces = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                None => {
                    pieces.push(Piece::Text(rest.to_owned()));
                    break;
                }
                Some(at) => {
                    if at > 0 {
                        pieces.push(Piece::Text(rest[..at].to_owned()));
                    }
                    if rest[at..].starts_with('}') {
                        return Err(format!(
                            "the stream key `{template}` has a `}}` without its `{{`"
                        ));
                    }
                    let Some(close) = rest[at..].find('}') else {
                        return Err(format!(
                            "the stream key `{template}` has a `{{` without its `}}`"
                        ));
                    };
                    let name = &rest[at + 1..at + close];
                    pieces.push(match name {
                        "topic" => Piece::Topic,
                        "aggregate_type" => Piece::AggregateType,
                        "partition" => Piece::Partition,
                        other => {
                            return Err(format!(
                                "the stream key `{template}` names `{{{other}}}`; \
                                 the placeholders are {{topic}}, {{aggregate_type}} and {{partition}}"
                            ));
                        }
                    });
                    rest = &rest[at + close + 1..];
                }
            }
        }
        Ok(StreamKey {
            pieces,
            template: template.to_owned(),
        })
    }

    /// Whether the template has `{partition}`: it then needs a partition
    /// count.
    pub fn uses_partition(&self) -> bool {
        self.pieces.contains(&Piece::Partition)
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The stream key of `event`, its aggregate spread over `partitions`
    /// (at least 1; only read when the template has `{partition}`).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn render(&self, event: &OutboundEvent, partitions: u32) -> String {
        let mut key = String::with_capacity(self.template.len() + event.topic.len());
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => key.push_str(text),
                Piece::Topic => key.push_str(&event.topic),
                Piece::AggregateType => key.push_str(&event.aggregate_type),
                Piece::Partition => {
                    let partition = partition_of(event.aggregate_id.as_bytes(), partitions);
                    key.push_str(&partition.to_string());
                }
            }
        }
        key
    }
}

impl std::fmt::Display for StreamKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.template)
    }
}

/// The partition of `key` among `partitions`, as Kafka's default
/// partitioner picks it: `(murmur2(key) & 0x7fffffff) % partitions`.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn partition_of(key: &[u8], partitions: u32) -> u32 {
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

/// MurmurHash2 with Kafka's seed, as the Java client computes it.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut hash = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        hash = hash.wrapping_mul(M);
        hash ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        hash ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        hash ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        hash ^= u32::from(tail[0]);
        hash = hash.wrapping_mul(M);
    }
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(M);
    hash ^= hash >> 15;
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka_s_partitioner() {
        // Values of org.apache.kafka.common.utils.Utils.murmur2 (as the
        // Kafka client's own tests list them), made positive.
        let cases: [(&str, i32); 3] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
        ];
        for (input, expected) in cases {
            assert_eq!(murmur2(input.as_bytes()) as i32, expected, "{input}");
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn templates_render_each_placeholder() {
        let event = crate::publish::redis::tests::order_event("order-42");
        let key = StreamKey::parse("{topic}:{aggregate_type}:p:{partition}").expect("valid");
        let rendered = key.render(&event, 8);
        let partition = partition_of(b"order-42", 8);
        assert_eq!(rendered, format!("orders:order:p:{partition}"));
        assert_eq!(StreamKey::default().render(&event, 1), "orders");
        assert_eq!(
            StreamKey::parse("fixed").expect("valid").render(&event, 1),
            "fixed"
        );
    }

    #[test]
    fn bad_templates_name_the_problem() {
        for (template, words) in [
            ("", "empty"),
            ("{topic", "without its `}`"),
            ("topic}", "without its `{`"),
            ("{tenant}", "`{tenant}`"),
        ] {
            let error = StreamKey::parse(template).expect_err(template);
            assert!(error.contains(words), "{template}: {error}");
        }
    }
}
