//! The [`EventType`] and [`Event`] traits: what a consumer needs to know to
//! decode an event type, and what the outbox needs to know to write one.

use serde::Serialize;
use serde_json::value::RawValue;

/// What a consumer needs to know to decode an event: its CloudEvents type and
/// payload version.
///
/// Every [`Event`] is an `EventType`. A service that only consumes an event
/// derives this much and nothing of the producer's topic, source or
/// aggregate: `#[derive(Event)]` with only `type` (and `version`) implements
/// `EventType` alone, and does not need `Serialize`.
///
/// ```
/// use outbox::{Event, EventType};
/// use serde::Deserialize;
///
/// #[derive(Deserialize, Event)]
/// #[event(type = "order.created", version = 2)]
/// struct OrderCreated {
///     order_id: i64,
/// }
///
/// assert_eq!(OrderCreated::EVENT_TYPE, "order.created");
/// assert_eq!(OrderCreated::EVENT_VERSION, 2);
/// ```
///
/// The constants of a concrete type are named through this trait, so bring it
/// into scope (`use outbox::EventType;`) to write `OrderCreated::EVENT_TYPE`;
/// a generic `E: Event` reaches them without it.
pub trait EventType {
    /// CloudEvents `type`, e.g. `order.created`.
    const EVENT_TYPE: &'static str;
    /// Schema version of the payload (not the CloudEvents spec version).
    const EVENT_VERSION: i32;
}

/// A domain event that can be written to the outbox.
///
/// The constants, with those of [`EventType`], fill the contract columns of
/// `outbox_events` and become the CloudEvents attributes of every
/// publication. Implement it with `#[derive(Event)]`:
///
/// ```
/// use outbox::{Event, EventType};
/// use serde::Serialize;
///
/// #[derive(Serialize, Event)]
/// #[event(type = "order.created", version = 1, aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated {
///     #[event(aggregate_id)]
///     order_id: u64,
///     total_cents: i64,
/// }
///
/// let event = OrderCreated { order_id: 7, total_cents: 1250 };
/// assert_eq!(OrderCreated::EVENT_TYPE, "order.created");
/// assert_eq!(OrderCreated::TOPIC, "orders");
/// assert_eq!(event.aggregate_id(), "7");
/// ```
pub trait Event: EventType + Serialize {
    /// CloudEvents `source`, e.g. `/orders`.
    const SOURCE: &'static str;
    /// Kind of business entity the event belongs to, e.g. `order`.
    const AGGREGATE_TYPE: &'static str;
    /// Destination: a Kafka topic or a RabbitMQ exchange.
    const TOPIC: &'static str;

    /// The entity id: the per-aggregate ordering key and the Kafka message key.
    fn aggregate_id(&self) -> String;

    /// The payload as JSON, exactly as it will be stored and published.
    ///
    /// # Errors
    /// Fails when the `Serialize` implementation fails.
    fn payload(&self) -> Result<Box<RawValue>, serde_json::Error> {
        serde_json::value::to_raw_value(self)
    }
}
