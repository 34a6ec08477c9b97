//! Derive macro for [`outbox::Event`](https://docs.rs/outbox/latest/outbox/trait.Event.html)
//! and its supertrait [`outbox::EventType`](https://docs.rs/outbox/latest/outbox/trait.EventType.html).
//!
//! Use it through the `outbox` crate, which re-exports it next to the trait:
//! `use outbox::Event;` brings both into scope.
//!
//! The macro is built like `serde_derive` and `thiserror`, in three stages:
//!
//! 1. `attrs` parses the `#[event(...)]` attributes into an intermediate
//!    representation that keeps the user's own tokens and spans, checking only
//!    syntax (unknown and repeated keys);
//! 2. `validate` checks meaning (required keys, literal types, ranges, exactly
//!    one aggregate id field for a producer's event) and produces a validated
//!    model;
//! 3. `expand` turns that model into the `impl ::outbox::EventType` and, for a
//!    producer's event, the `impl ::outbox::Event`.
//!
//! Every user error is a [`syn::Error`] pointing at the offending token, and all
//! of them are reported together rather than one per build.

mod attrs;
mod errors;
mod expand;
mod validate;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Implements `outbox::EventType` for a struct, and `outbox::Event` when it
/// is written to the outbox.
///
/// A producer's event gives every key and marks its aggregate id field; it
/// gets both impls and must be `Serialize`:
///
/// ```
/// use outbox::Event;
/// use serde::Serialize;
/// use uuid::Uuid;
///
/// #[derive(Serialize, Event)]
/// #[event(type = "order.created", version = 1, aggregate = "order", topic = "orders", source = "/orders")]
/// struct OrderCreated {
///     #[event(aggregate_id)]
///     order_id: Uuid,
///     total_cents: i64,
/// }
/// ```
///
/// A type that is only consumed gives just `type` (and `version`): none of
/// `aggregate`, `topic`, `source` and no `#[event(aggregate_id)]`. It gets
/// `EventType` alone, all the inbox needs to decode it, and need not be
/// `Serialize`:
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
/// # Struct attribute: `#[event(...)]`
///
/// | key         | value                     | becomes                      |
/// |-------------|---------------------------|------------------------------|
/// | `type`      | string, required          | `EventType::EVENT_TYPE`      |
/// | `version`   | integer, default `1`      | `EventType::EVENT_VERSION`   |
/// | `aggregate` | string, producer only     | `Event::AGGREGATE_TYPE`      |
/// | `topic`     | string, producer only     | `Event::TOPIC`               |
/// | `source`    | string, producer only     | `Event::SOURCE`              |
///
/// Strings must not be empty, and `type` must not contain whitespace. The
/// `version` must lie in `1..=i32::MAX`. The keys may be split over several
/// `#[event(...)]` attributes, but each may appear only once.
///
/// The producer's keys, `aggregate`, `topic` and `source`, and the
/// `#[event(aggregate_id)]` field go together: give all of them for an event
/// written to the outbox, or none for a type that is only consumed. Giving
/// some but not all is an error naming what is missing.
///
/// # Field attribute: `#[event(aggregate_id)]`
///
/// A producer's event marks exactly one field with it. `aggregate_id()`
/// returns that field formatted with [`ToString`], so its type must implement
/// [`std::fmt::Display`]. Named and tuple struct fields both work.
///
/// # Generics
///
/// Generic parameters and where clauses are carried over to the impls as
/// written. Since `Event` requires `Serialize`, declare the bounds the fields
/// of a producer's event need (e.g. `T: Serialize`, and `Display` for a
/// generic aggregate id) on the struct itself.
///
/// # Errors
///
/// Enums, unions and unit producer's events are rejected, as are missing,
/// unknown or repeated keys, wrongly typed or out-of-range values, some but
/// not all of the producer's keys, and a producer's event without exactly one
/// `#[event(aggregate_id)]` field. All problems are reported in a single
/// compilation, each at the token that caused it.
#[proc_macro_derive(Event, attributes(event))]
pub fn derive_event(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
