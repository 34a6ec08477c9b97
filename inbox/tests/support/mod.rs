//! Support shared by the inbox's integration tests: the Kafka and RabbitMQ
//! brokers as the relay leaves them.

#![allow(dead_code)]

pub mod kafka;
pub mod rabbitmq;

/// A deterministic shuffle (xorshift), so a failure can be replayed.
pub fn shuffled<T>(mut items: Vec<T>, seed: u64) -> Vec<T> {
    let mut state = seed.max(1);
    for index in (1..items.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        items.swap(index, (state % (index as u64 + 1)) as usize);
    }
    items
}
