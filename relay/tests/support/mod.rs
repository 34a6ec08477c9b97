//! Support for the relay's end-to-end tests: the relay binary as a child
//! process, and consumers that collect what reached the real brokers.

#![allow(dead_code)]

pub mod brokers;
pub mod dialect;
pub mod http;
pub mod process;
pub mod workload;
