use std::fmt::Display;

use outbox::{Event, EventType};
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "cart.item_added",
    version = 3,
    aggregate = "cart",
    topic = "carts",
    source = "/carts"
)]
struct ItemAdded<'a, K, T>
where
    K: Serialize + Display,
    T: Serialize,
{
    #[event(aggregate_id)]
    cart_id: K,
    sku: &'a str,
    item: T,
}

#[derive(Serialize, Event)]
#[event(
    type = "batch.closed",
    aggregate = "batch",
    topic = "batches",
    source = "/batches"
)]
struct BatchClosed<T: Serialize>(#[event(aggregate_id)] &'static str, Vec<T>);

/// The trait is usable generically over derived events.
fn describe<E: Event>(event: &E) -> String {
    format!(
        "{}@{}/{}",
        E::EVENT_TYPE,
        E::EVENT_VERSION,
        event.aggregate_id()
    )
}

fn main() {
    type Added<'a> = ItemAdded<'a, u32, Vec<u8>>;
    assert_eq!(Added::EVENT_TYPE, "cart.item_added");
    assert_eq!(Added::EVENT_VERSION, 3);
    assert_eq!(Added::AGGREGATE_TYPE, "cart");
    assert_eq!(Added::TOPIC, "carts");
    assert_eq!(Added::SOURCE, "/carts");

    let added = ItemAdded {
        cart_id: 7_u32,
        sku: "sku-1",
        item: vec![1_u8, 2],
    };
    assert_eq!(added.aggregate_id(), "7");
    assert_eq!(describe(&added), "cart.item_added@3/7");

    let by_name = ItemAdded {
        cart_id: String::from("cart-9"),
        sku: "sku-2",
        item: (),
    };
    assert_eq!(by_name.aggregate_id(), "cart-9");

    let closed = BatchClosed("b-1", vec![1.5_f64]);
    assert_eq!(BatchClosed::<f64>::EVENT_VERSION, 1);
    assert_eq!(closed.aggregate_id(), "b-1");
    assert_eq!(describe(&closed), "batch.closed@1/b-1");
}
