//! Support for the relay's end-to-end tests: the relay binary as a child
//! process, its HTTP endpoint, per-backend SQL and the workload. The
//! brokers' side (topics, exchanges, collecting consumers) is in
//! `outbox_testkit::{kafka, rabbitmq}`.

#![allow(dead_code)]

pub mod dialect;
pub mod http;
pub mod outbound;
pub mod process;
pub mod service_control;
pub mod workload;
