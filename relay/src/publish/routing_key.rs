//! [`RoutingKey`]: how the RabbitMQ publisher picks a message's routing key.

/// An AMQP routing key setting. Written in TOML as a string: `"event_type"`
/// or any fixed key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RoutingKey {
    /// `"event_type"`: the event's `event_type`, e.g. `order.created`.
    #[default]
    EventType,
    /// Any other string: this key for every event.
    Fixed(String),
}
