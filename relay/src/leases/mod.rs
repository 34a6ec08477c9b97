//! Leases: which partitions this relay instance owns, and for how long.
//!
//! - `store.rs`: [`LeaseStore`], what a source of leases answers: partition
//!   leases with fencing tokens, and the heartbeats of the live relays.
//! - `polling.rs`: the polling stores' leases, one row per partition in
//!   `outbox_partitions` (their SQL in `store/sql/<backend>/`). The logical
//!   source brings its own: one lease on its stream
//!   (`source/logical/source.rs`).
//! - `keeper.rs`: [`LeaseKeeper`], this instance's share: renewal,
//!   rebalancing, handover.

mod keeper;
mod polling;
mod store;

#[cfg(feature = "test-util")]
pub use keeper::LeaseSnapshot;
pub use keeper::{Handover, LeaseKeeper, Rebalanced, Release};
pub use store::{LeaseStore, Leased};
