//! Support shared by the end-to-end trace tests.

#![allow(dead_code)]

pub mod trace;
