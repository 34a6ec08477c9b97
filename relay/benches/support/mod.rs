//! Code the relay benchmarks share: the command line's flags, CPU
//! sampling, the raw broker clients (lapin also over several channels), consumers that stamp arrivals, the
//! events' shape, a RabbitMQ target, the unit-test runner of a bench
//! without a test harness, and (from the end-to-end tests' support) the
//! relay binary as a child process with its HTTP endpoint.

#![allow(dead_code)]

pub mod args;
pub mod consumers;
pub mod cpu;
pub mod events;
#[path = "../../tests/support/http.rs"]
pub mod http;
#[path = "../../tests/support/process.rs"]
pub mod process;
pub mod raw;
pub mod raw_channels;
pub mod targets;
pub mod unit_tests;
