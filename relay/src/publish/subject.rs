//! [`SubjectTemplate`]: the NATS subject an event is published to, from a
//! template with `{topic}`, `{event_type}`, `{aggregate_type}` and
//! `{aggregate_id}` placeholders.

use crate::event::OutboundEvent;

/// One piece of a [`SubjectTemplate`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Topic,
    EventType,
    AggregateType,
    AggregateId,
}

/// The subject of an event, written as a template: `{topic}`,
/// `{event_type}`, `{aggregate_type}` and `{aggregate_id}` are replaced
/// with the event's values, the rest is kept. The default, `{topic}`,
/// publishes each event to the subject named after its topic.
///
/// The template itself must be a subject a client may publish to once its
/// placeholders are filled: no whitespace, no empty token (`a..b`, a
/// leading or trailing `.`) and no wildcard (`*`, `>`). An event whose
/// values make the subject invalid (an aggregate id with a space) is
/// rejected when it is published.
///
/// ```
/// use outbox_relay::publish::SubjectTemplate;
///
/// let subject = SubjectTemplate::parse("events.{aggregate_type}.{event_type}").unwrap();
/// assert_eq!(subject.template(), "events.{aggregate_type}.{event_type}");
/// assert!(SubjectTemplate::parse("events.>").is_err());
/// assert!(SubjectTemplate::parse("{topik}").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectTemplate {
    pieces: Vec<Piece>,
    template: String,
}

impl Default for SubjectTemplate {
    fn default() -> Self {
        SubjectTemplate {
            pieces: vec![Piece::Topic],
            template: "{topic}".to_owned(),
        }
    }
}

impl SubjectTemplate {
    /// Read a template.
    ///
    /// # Errors
    /// A message naming the problem: an empty template, an unknown
    /// placeholder, a `{` or `}` that does not belong to one, or text that
    /// cannot be part of a subject.
    pub fn parse(template: &str) -> Result<Self, String> {
        const PLACEHOLDERS: &str = "{topic}, {event_type}, {aggregate_type} and {aggregate_id}";
        if template.is_empty() {
            return Err(
                "the subject is empty; write e.g. \"{topic}\" or \"events.{event_type}\""
                    .to_owned(),
            );
        }
        let mut pieces = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            let Some(at) = rest.find(['{', '}']) else {
                pieces.push(Piece::Text(rest.to_owned()));
                break;
            };
            if at > 0 {
                pieces.push(Piece::Text(rest[..at].to_owned()));
            }
            if rest[at..].starts_with('}') {
                return Err(format!(
                    "the subject `{template}` has a `}}` without its `{{`"
                ));
            }
            let Some(close) = rest[at..].find('}') else {
                return Err(format!(
                    "the subject `{template}` has a `{{` without its `}}`"
                ));
            };
            pieces.push(match &rest[at + 1..at + close] {
                "topic" => Piece::Topic,
                "event_type" => Piece::EventType,
                "aggregate_type" => Piece::AggregateType,
                "aggregate_id" => Piece::AggregateId,
                other => {
                    return Err(format!(
                        "the subject `{template}` names `{{{other}}}`; the placeholders are \
                         {PLACEHOLDERS}"
                    ));
                }
            });
            rest = &rest[at + close + 1..];
        }
        // Check the fixed text as a subject, each placeholder standing for
        // one valid token.
        let sample: String = pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.as_str(),
                _ => "x",
            })
            .collect();
        if let Err(reason) = check_subject(&sample) {
            return Err(format!("the subject `{template}` {reason}"));
        }
        Ok(SubjectTemplate {
            pieces,
            template: template.to_owned(),
        })
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The subject of `event`.
    ///
    /// # Errors
    /// Why the filled-in template is not a subject one may publish to (a
    /// value with whitespace, an empty value leaving an empty token, a
    /// wildcard).
    #[cfg_attr(not(feature = "nats"), allow(dead_code))]
    pub(crate) fn render(&self, event: &OutboundEvent) -> Result<String, String> {
        let mut subject = String::with_capacity(self.template.len() + event.topic.len());
        for piece in &self.pieces {
            subject.push_str(match piece {
                Piece::Text(text) => text,
                Piece::Topic => &event.topic,
                Piece::EventType => &event.event_type,
                Piece::AggregateType => &event.aggregate_type,
                Piece::AggregateId => &event.aggregate_id,
            });
        }
        match check_subject(&subject) {
            Ok(()) => Ok(subject),
            Err(reason) => Err(format!(
                "the subject `{subject}` (from `{}`) {reason}",
                self.template
            )),
        }
    }
}

impl std::fmt::Display for SubjectTemplate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.template)
    }
}

/// Why `subject` cannot be published to, if it cannot.
fn check_subject(subject: &str) -> Result<(), String> {
    if subject
        .chars()
        .any(|character| character.is_whitespace() || character.is_control())
    {
        return Err("contains whitespace or a control character".to_owned());
    }
    for token in subject.split('.') {
        match token {
            "" => return Err("has an empty token (`..`, or a `.` at an end)".to_owned()),
            "*" | ">" => {
                return Err(format!(
                    "has the wildcard `{token}`; a message is published to one subject"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> OutboundEvent {
        OutboundEvent {
            id: 1,
            event_id: uuid::Uuid::now_v7(),
            event_type: "order.created".to_owned(),
            event_version: 1,
            source: "/orders".to_owned(),
            aggregate_type: "order".to_owned(),
            aggregate_id: "o-42".to_owned(),
            topic: "orders".to_owned(),
            payload: "{}".into(),
            headers: Default::default(),
            created_at: chrono::Utc::now(),
            attempts: 0,
            replay: false,
        }
    }

    #[test]
    fn templates_render_each_placeholder() {
        let event = event();
        let subject =
            SubjectTemplate::parse("{topic}.{aggregate_type}.{aggregate_id}.{event_type}")
                .expect("valid");
        assert_eq!(
            subject.render(&event).as_deref(),
            Ok("orders.order.o-42.order.created")
        );
        assert_eq!(
            SubjectTemplate::default().render(&event).as_deref(),
            Ok("orders")
        );
    }

    #[test]
    fn bad_templates_and_values_name_the_problem() {
        for (template, words) in [
            ("", "empty"),
            ("{topic", "without its `}`"),
            ("topic}", "without its `{`"),
            ("{tenant}", "`{tenant}`"),
            ("a..{topic}", "empty token"),
            ("{topic}.", "empty token"),
            ("{topic}.*", "wildcard `*`"),
            ("a b", "whitespace"),
        ] {
            let error = SubjectTemplate::parse(template).expect_err(template);
            assert!(error.contains(words), "{template}: {error}");
        }
        let mut event = event();
        event.aggregate_id = "o 42".to_owned();
        let subject = SubjectTemplate::parse("o.{aggregate_id}").expect("valid");
        let error = subject.render(&event).expect_err("a space");
        assert!(error.contains("`o.o 42`"), "{error}");
    }
}
