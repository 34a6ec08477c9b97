use outbox::Event;
use serde::Serialize;

#[derive(Serialize, Event)]
#[event(
    type = "clock.ticked",
    aggregate = "clock",
    topic = "clocks",
    source = "/clock"
)]
struct ClockTicked;

fn main() {}
