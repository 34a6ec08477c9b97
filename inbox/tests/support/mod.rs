//! Support shared by the inbox's integration tests: messages on the Kafka
//! and RabbitMQ brokers as the relay leaves them. The brokers themselves
//! are reached through `outbox_testkit::{kafka, rabbitmq}`.

#![allow(dead_code)]

pub mod kafka;
pub mod rabbitmq;
