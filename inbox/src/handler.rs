//! [`Handler`]: what a consumer does with one event, inside the inbox
//! transaction. The Kafka and RabbitMQ adapters drive handlers.

use std::marker::PhantomData;

use futures::future::BoxFuture;
use outbox::Event;
use serde::de::DeserializeOwned;
use sqlx::Transaction;

use crate::backend::InboxBackend;
use crate::error::{BoxError, DecodeError};
use crate::incoming::IncomingEvent;

/// A message handler.
///
/// [`Handler::decode`] runs first, outside any transaction: a message it
/// cannot decode is poison and goes to the dead-letter path with the
/// reason. [`Handler::handle`] then runs inside the inbox transaction, at
/// most once per event id; an error rolls everything back and the message
/// is delivered again (up to the adapter's attempt limit).
pub trait Handler<DB: InboxBackend>: Send + Sync + 'static {
    /// The decoded event.
    type Event: Send + Sync + 'static;

    /// Turn the incoming message into the handler's event.
    ///
    /// # Errors
    /// A [`DecodeError`] makes the message poison.
    fn decode(&self, incoming: &IncomingEvent) -> Result<Self::Event, DecodeError>;

    /// Apply the event's effects with `tx`.
    fn handle<'t>(
        &'t self,
        tx: &'t mut Transaction<'static, DB>,
        event: &'t Self::Event,
    ) -> BoxFuture<'t, Result<(), BoxError>>;
}

/// A [`Handler`] for one `#[derive(Event)]` type, from a function.
pub struct TypedHandler<E, F> {
    function: F,
    event: PhantomData<fn() -> E>,
}

/// Handle events of type `E` with `function`; other types and unsupported
/// versions are poison.
///
/// ```no_run
/// use outbox::Event;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(type = "order.created", aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated { #[event(aggregate_id)] order_id: i64, total_cents: i64 }
///
/// let handler = outbox_inbox::typed::<OrderCreated, _, sqlx::Postgres>(|tx, order: &OrderCreated| {
///     let total = order.total_cents;
///     Box::pin(async move {
///         sqlx::query("UPDATE revenue SET cents = cents + $1").bind(total).execute(&mut **tx).await?;
///         Ok(())
///     })
/// });
/// # let _ = handler;
/// ```
pub fn typed<E, F, DB>(function: F) -> TypedHandler<E, F>
where
    DB: InboxBackend,
    // The closure's signature, which its argument types are inferred from;
    // everything else `E` and `F` need is what makes the result a handler.
    F: for<'t> Fn(&'t mut Transaction<'static, DB>, &'t E) -> BoxFuture<'t, Result<(), BoxError>>,
    TypedHandler<E, F>: Handler<DB>,
{
    TypedHandler {
        function,
        event: PhantomData,
    }
}

impl<E, F, DB> Handler<DB> for TypedHandler<E, F>
where
    DB: InboxBackend,
    E: Event + DeserializeOwned + Send + Sync + 'static,
    F: for<'t> Fn(&'t mut Transaction<'static, DB>, &'t E) -> BoxFuture<'t, Result<(), BoxError>>
        + Send
        + Sync
        + 'static,
{
    type Event = E;

    fn decode(&self, incoming: &IncomingEvent) -> Result<E, DecodeError> {
        incoming.decode::<E>()
    }

    fn handle<'t>(
        &'t self,
        tx: &'t mut Transaction<'static, DB>,
        event: &'t E,
    ) -> BoxFuture<'t, Result<(), BoxError>> {
        (self.function)(tx, event)
    }
}
