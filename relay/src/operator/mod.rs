//! Operator work: what `status`, `dead`, `replay`, `recover-slot` and
//! `leave-logical` do, retention, and the readings `/metrics` and `status`
//! take of what waits to be published.
//!
//! - `backlog.rs`: [`BacklogSource`], what fills the table gauges, for the
//!   polling store; `backlog_logical.rs` for the logical source.
//! - `slot_monitor.rs`: the slot's gauges on `/metrics`.
//! - `replay.rs`: `replay`, over the table; `replay_streamed.rs` adds the
//!   streamed events the slot has not confirmed yet.
//! - `retention.rs`: deleting published events; `retention_streamed.rs`
//!   deletes streamed events once the slot confirmed them.
//! - `recover_slot.rs`: `recover-slot`, after the server invalidated the
//!   slot.
//! - `leave_logical.rs`: `leave-logical`, back to polling.
//! - `lease.rs`: the stream's lease held by those two commands.
//!
//! `status` and `dead` read and write through
//! [`OperatorStore`](crate::store::OperatorStore).

mod backlog;
#[cfg(feature = "logical")]
mod backlog_logical;
#[cfg(feature = "logical")]
mod lease;
#[cfg(feature = "logical")]
mod leave_logical;
#[cfg(feature = "logical")]
mod recover_slot;
mod replay;
#[cfg(feature = "logical")]
mod replay_streamed;
mod retention;
#[cfg(feature = "logical")]
mod retention_streamed;
#[cfg(feature = "logical")]
mod slot_monitor;

pub use backlog::{BacklogSource, TableBacklog};
#[cfg(feature = "logical")]
pub use backlog_logical::{LogicalCounts, logical_status};
#[cfg(all(feature = "logical", feature = "test-util"))]
pub use lease::OPERATOR_LEASE;
#[cfg(feature = "logical")]
pub use leave_logical::{LeftLogical, leave_logical};
#[cfg(feature = "logical")]
pub use recover_slot::{SlotRecovery, recover_slot};
pub use replay::{ReplaySource, ReplayTime, replay, resolve_window};
#[cfg(feature = "logical")]
pub use replay_streamed::{StreamedReplay, unconfirmed_in_window};
pub use retention::{RetentionSettings, run_retention};
#[cfg(feature = "test-util")]
pub use retention::run_retention_pass;
#[cfg(feature = "logical")]
pub use retention_streamed::run_logical_retention;
#[cfg(all(feature = "logical", feature = "test-util"))]
pub use retention_streamed::run_logical_retention_pass;
#[cfg(all(feature = "logical", feature = "test-util"))]
pub use slot_monitor::SLOT_REPORT_INTERVAL;
#[cfg(feature = "logical")]
pub use slot_monitor::report_slot;
