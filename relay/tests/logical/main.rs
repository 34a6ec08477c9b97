//! The logical source against the real PostgreSQL server (wal_level =
//! logical): the stream, its acknowledgements and its failure path driven
//! directly (`source.rs`), and the relay with `--source logical` end to end
//! (`relay.rs`, `cli.rs`). Every slot a test makes is dropped by a guard,
//! and the test database drops its slots before itself.

#[path = "../support/mod.rs"]
mod support;

mod backlog;
mod cli;
mod crash;
mod failures;
mod frozen_stream;
mod harness;
mod heartbeat;
mod leave;
mod recovery;
mod relay;
mod replay;
mod retention;
mod source;
mod standby;
mod status;
mod stuck_stream;
mod switch;
