//! The `outbox-relay` command line: its arguments (`args.rs`, described in
//! `docs/operations.md`, Command line) and what each subcommand does
//! (`commands/`).

mod args;
pub mod commands;

pub use args::*;
