//! RabbitMQ adapter (in progress).
