//! Kafka adapter (in progress).
