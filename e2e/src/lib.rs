//! End-to-end tests of the outbox workspace (`e2e/tests/`): the `outbox`
//! crate, the relay and the inbox together against the real services, and
//! the examples (`../examples/`, built by this package) run as processes.
//!
//! The library is empty; the package exists so that the `outbox` crate does
//! not dev-depend on the relay or the inbox. `cargo test --workspace` (or
//! `scripts/test.sh`) runs these tests with every other.

/// The README's Rust snippets, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeSnippets;

/// The consumers of `docs/inbox.md`, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/inbox.md")]
pub struct InboxGuideSnippets;
