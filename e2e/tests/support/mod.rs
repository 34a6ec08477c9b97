//! Support shared by the end-to-end tests: the examples as processes and
//! the trace tests' spans and handler.

#![allow(dead_code)]

pub mod example;
pub mod trace;
