//! [`Received`] and [`Collected`]: what a test's consumer saw of the
//! messages on a real broker, in arrival order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// What one consumer saw of one message, the same for Kafka and RabbitMQ.
#[derive(Debug, Clone)]
pub struct Received {
    /// CloudEvents id (`ce_id` or `cloudEvents:id`).
    pub ce_id: String,
    /// Kafka key or AMQP `message_id`, depending on the broker.
    pub key: String,
    /// `partitionkey` extension: the aggregate id.
    pub aggregate_id: String,
    /// The payload, parsed as JSON (`Null` when it is not JSON).
    pub payload: serde_json::Value,
    /// Every header (Kafka) or headers-table entry (AMQP), as text.
    pub headers: HashMap<String, String>,
}

/// Messages collected so far, shared with the consuming task.
#[derive(Clone, Default)]
pub struct Collected(Arc<Mutex<Vec<Received>>>);

impl Collected {
    /// Number of messages so far.
    pub fn len(&self) -> usize {
        self.0.lock().map(|messages| messages.len()).unwrap_or(0)
    }

    /// Whether nothing arrived yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the messages so far.
    pub fn snapshot(&self) -> Vec<Received> {
        self.0
            .lock()
            .map(|messages| messages.clone())
            .unwrap_or_default()
    }

    /// The distinct CloudEvents ids so far: what arrived, duplicates
    /// counted once.
    pub fn distinct_ids(&self) -> HashSet<String> {
        self.0
            .lock()
            .map(|messages| {
                messages
                    .iter()
                    .map(|message| message.ce_id.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The CloudEvents ids so far, each at its first arrival, in arrival
    /// order.
    pub fn first_arrivals(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        self.snapshot()
            .into_iter()
            .map(|message| message.ce_id)
            .filter(|id| seen.insert(id.clone()))
            .collect()
    }

    pub(crate) fn push(&self, message: Received) {
        if let Ok(mut messages) = self.0.lock() {
            messages.push(message);
        }
    }
}
