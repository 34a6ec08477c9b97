//! [`Handler`]: what a consumer does with one event, inside the inbox
//! transaction; [`DecodeEvent`]: how a message becomes the handler's event;
//! [`typed`]: a handler from an `async fn`. The Kafka and RabbitMQ adapters
//! drive handlers.

use std::future::Future;
use std::marker::PhantomData;

use outbox::EventType;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::backend::InboxBackend;
use crate::delivery::Delivery;
use crate::error::{BoxError, DecodeError};
use crate::incoming::IncomingEvent;
use crate::trace_context::event_span;

/// A type a message decodes into: every `#[derive(Event)]` struct that is
/// also `Deserialize` (a consumer-only one included), through [`IncomingEvent::decode`] (its type and
/// exactly its version).
///
/// Implement it for a type of your own that reads several event types or
/// versions, for example an enum:
///
/// ```
/// use outbox_inbox::{DecodeError, DecodeEvent, IncomingEvent};
///
/// enum OrderChange { Created(serde_json::Value), Cancelled(serde_json::Value) }
///
/// impl DecodeEvent for OrderChange {
///     fn decode_event(incoming: &IncomingEvent) -> Result<Self, DecodeError> {
///         let payload = || {
///             serde_json::from_slice(&incoming.data).map_err(|error| DecodeError::Payload {
///                 event_type: incoming.event_type.clone(),
///                 reason: error.to_string(),
///             })
///         };
///         match incoming.event_type.as_str() {
///             "order.created" => Ok(OrderChange::Created(payload()?)),
///             "order.cancelled" => Ok(OrderChange::Cancelled(payload()?)),
///             other => Err(DecodeError::UnexpectedType {
///                 expected: "order.created or order.cancelled".to_owned(),
///                 actual: other.to_owned(),
///             }),
///         }
///     }
/// }
/// ```
pub trait DecodeEvent: Sized {
    /// Decode `incoming`.
    ///
    /// # Errors
    /// A [`DecodeError`] makes the message poison.
    fn decode_event(incoming: &IncomingEvent) -> Result<Self, DecodeError>;
}

impl<E: EventType + DeserializeOwned> DecodeEvent for E {
    fn decode_event(incoming: &IncomingEvent) -> Result<Self, DecodeError> {
        incoming.decode::<E>()
    }
}

/// A message handler.
///
/// [`Handler::decode`] runs first, outside any transaction: a message it
/// cannot decode is poison and goes to the dead-letter path with the
/// reason. [`Handler::handle`] then runs inside the inbox transaction, at
/// most once per event id; an error rolls everything back and the message
/// is delivered again (up to the adapter's attempt limit).
///
/// A handler with state of its own is a struct whose `handle` is an
/// `async fn`:
///
/// ```no_run
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery, Handler};
/// use serde::{Deserialize, Serialize};
/// use sqlx::{PgConnection, Postgres};
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// struct Billing { vat_percent: i64 }
///
/// impl Handler<Postgres> for Billing {
///     type Event = OrderCreated;
///
///     async fn handle(
///         &self,
///         tx: &mut PgConnection,
///         order: &OrderCreated,
///         _delivery: &Delivery<'_>,
///     ) -> Result<(), BoxError> {
///         let total = order.total_cents * (100 + self.vat_percent) / 100;
///         sqlx::query("INSERT INTO invoices (order_id, total_cents) VALUES ($1, $2)")
///             .bind(order.order_id)
///             .bind(total)
///             .execute(&mut *tx)
///             .await?;
///         Ok(())
///     }
/// }
/// ```
pub trait Handler<DB: InboxBackend>: Send + Sync + 'static {
    /// The decoded event.
    type Event: DecodeEvent + Send + Sync + 'static;

    /// Turn the incoming message into the handler's event; by default
    /// [`DecodeEvent::decode_event`] of [`Handler::Event`].
    ///
    /// # Errors
    /// A [`DecodeError`] makes the message poison.
    fn decode(&self, incoming: &IncomingEvent) -> Result<Self::Event, DecodeError> {
        Self::Event::decode_event(incoming)
    }

    /// Apply the event's effects with `tx`, the connection of the inbox
    /// transaction (`&mut PgConnection` on PostgreSQL): what the handler
    /// writes commits with the inbox row or not at all. `delivery` says
    /// which message this is: its event id, whether it is a replay, its
    /// trace and which attempt.
    fn handle(
        &self,
        tx: &mut DB::Connection,
        event: &Self::Event,
        delivery: &Delivery<'_>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Apply the effects of a batch of events with `tx`, one inbox
    /// transaction for the whole batch, when the adapter batches
    /// (`batch_size` above 1 in its config). `batch` holds the events
    /// delivered for the first time, in delivery order; their inbox rows
    /// are recorded in `tx` already, and commit with what this writes.
    ///
    /// By default [`Handler::handle`] for each, in order, each in an
    /// `inbox.handle` span. Override it for set-based writes (one `INSERT`
    /// of many rows), as MassTransit's `Batch<T>` consumers do. An error
    /// rolls the whole batch back; the adapter then runs its messages again
    /// one at a time through [`Handler::handle`], so only the failing event
    /// retries and, at its last attempt, is dead-lettered.
    ///
    /// ```no_run
    /// use outbox::Event;
    /// use outbox_inbox::{BatchItem, BoxError, Delivery, Handler};
    /// use serde::{Deserialize, Serialize};
    /// use sqlx::{PgConnection, Postgres};
    ///
    /// #[derive(Serialize, Deserialize, Event)]
    /// #[event(type = "order.created")]
    /// struct OrderCreated { order_id: i64, total_cents: i64 }
    ///
    /// struct Billing;
    ///
    /// impl Handler<Postgres> for Billing {
    ///     type Event = OrderCreated;
    ///
    ///     async fn handle(
    ///         &self,
    ///         tx: &mut PgConnection,
    ///         order: &OrderCreated,
    ///         delivery: &Delivery<'_>,
    ///     ) -> Result<(), BoxError> {
    ///         // One event is a batch of one: a single code path.
    ///         self.handle_batch(tx, &[BatchItem::new(order, *delivery)]).await
    ///     }
    ///
    ///     async fn handle_batch(
    ///         &self,
    ///         tx: &mut PgConnection,
    ///         batch: &[BatchItem<'_, OrderCreated>],
    ///     ) -> Result<(), BoxError> {
    ///         let ids: Vec<i64> = batch.iter().map(|item| item.event.order_id).collect();
    ///         let totals: Vec<i64> = batch.iter().map(|item| item.event.total_cents).collect();
    ///         sqlx::query(
    ///             "INSERT INTO invoices (order_id, total_cents) \
    ///              SELECT * FROM unnest($1::bigint[], $2::bigint[])",
    ///         )
    ///         .bind(&ids)
    ///         .bind(&totals)
    ///         .execute(&mut *tx)
    ///         .await?;
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn handle_batch(
        &self,
        tx: &mut DB::Connection,
        batch: &[BatchItem<'_, Self::Event>],
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        async move {
            for item in batch {
                self.handle(tx, item.event, &item.delivery)
                    .instrument(event_span(item.delivery.incoming()))
                    .await?;
            }
            Ok(())
        }
    }
}

/// One event of a batch given to [`Handler::handle_batch`]: the decoded
/// event and its delivery.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct BatchItem<'a, E> {
    /// The decoded event.
    pub event: &'a E,
    /// Its delivery: event id, replay flag, trace, attempt.
    pub delivery: Delivery<'a>,
}

impl<'a, E> BatchItem<'a, E> {
    /// `event`, delivered as `delivery`.
    pub fn new(event: &'a E, delivery: Delivery<'a>) -> Self {
        BatchItem { event, delivery }
    }
}

/// The `async fn`s (and async closures that capture nothing) [`typed`]
/// takes: `async fn(&mut DB::Connection, &E, &Delivery<'_>) ->
/// Result<(), BoxError>`. Implemented for every such function; the future's
/// type is named here, so that its `Send` bound can be written on stable
/// Rust.
pub trait HandlerFn<'t, DB: InboxBackend, E: 't>:
    Fn(&'t mut DB::Connection, &'t E, &'t Delivery<'t>) -> Self::Future
{
    /// The future the function returns.
    type Future: Future<Output = Result<(), BoxError>> + Send + 't;
}

impl<'t, DB, E, F, Fut> HandlerFn<'t, DB, E> for F
where
    DB: InboxBackend,
    E: 't,
    F: Fn(&'t mut DB::Connection, &'t E, &'t Delivery<'t>) -> Fut,
    Fut: Future<Output = Result<(), BoxError>> + Send + 't,
{
    type Future = Fut;
}

/// A [`Handler`] for one event type, from a function.
pub struct TypedHandler<E, F> {
    function: F,
    event: PhantomData<fn() -> E>,
}

/// Handle events of type `E` with the `async fn` `function`; other types
/// and unsupported versions are poison.
///
/// ```no_run
/// use outbox::Event;
/// use outbox_inbox::{BoxError, Delivery};
/// use serde::{Deserialize, Serialize};
/// use sqlx::{PgConnection, Postgres};
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// async fn add_revenue(
///     tx: &mut PgConnection,
///     order: &OrderCreated,
///     _delivery: &Delivery<'_>,
/// ) -> Result<(), BoxError> {
///     sqlx::query("UPDATE revenue SET cents = cents + $1")
///         .bind(order.total_cents)
///         .execute(&mut *tx)
///         .await?;
///     Ok(())
/// }
///
/// # async fn example(inbox: outbox_inbox::Inbox<Postgres>) -> Result<(), outbox_inbox::Error> {
/// use outbox_inbox::rabbitmq::{RabbitMqConsumerConfig, RabbitMqInboxConsumer};
///
/// let config = RabbitMqConsumerConfig::new("amqp://guest:guest@127.0.0.1:5672/%2f", "revenue");
/// let consumer = RabbitMqInboxConsumer::new(inbox, outbox_inbox::typed(add_revenue), config)?;
/// # let _ = consumer;
/// # Ok(()) }
/// ```
///
/// The database and the event type come from the consumer the handler is
/// given to and from the function's signature. A closure works when it
/// captures nothing, with its argument types written out (`async |tx: &mut
/// PgConnection, order: &OrderCreated, delivery: &Delivery<'_>| { ... }`).
/// One that captures state cannot promise stable Rust that its future is
/// `Send`; give the state to a struct that implements [`Handler`] instead.
pub fn typed<E, F>(function: F) -> TypedHandler<E, F> {
    // No bounds here: the database and the event type are those of the
    // consumer the handler is given to, inferred there from the function's
    // signature (`impl Handler<DB> for TypedHandler<E, F>`).
    TypedHandler {
        function,
        event: PhantomData,
    }
}

impl<E, F, DB> Handler<DB> for TypedHandler<E, F>
where
    DB: InboxBackend,
    E: DecodeEvent + Send + Sync + 'static,
    F: for<'t> HandlerFn<'t, DB, E> + Send + Sync + 'static,
{
    type Event = E;

    async fn handle(
        &self,
        tx: &mut DB::Connection,
        event: &E,
        delivery: &Delivery<'_>,
    ) -> Result<(), BoxError> {
        (self.function)(tx, event, delivery).await
    }
}
