use outbox::{Event, EventType};
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "invoice.paid",
    aggregate = "invoice",
    topic = "invoices",
    source = "/billing"
)]
struct InvoicePaid {
    #[event(aggregate_id)]
    invoice_number: String,
}

fn main() {
    assert_eq!(InvoicePaid::EVENT_VERSION, 1);
    assert_eq!(InvoicePaid::EVENT_TYPE, "invoice.paid");
    assert_eq!(InvoicePaid::AGGREGATE_TYPE, "invoice");
    assert_eq!(InvoicePaid::TOPIC, "invoices");
    assert_eq!(InvoicePaid::SOURCE, "/billing");

    let event = InvoicePaid {
        invoice_number: "INV-2024-001".to_owned(),
    };
    assert_eq!(event.aggregate_id(), "INV-2024-001");
}
