//! The values of the batch loop's fetch, for the fetch itself
//! (`source/polling.rs`) and for its plan (`explain.rs`).

use super::Param::{ExcludedIds, HoldDead, Limit, MaxBytes, PartitionCount, Partitions};
use super::{Dialect, SqlDatabase, Values};
use crate::event::FetchRequest;

/// The values of the fetch `request` asks for.
pub(crate) fn fetch_pending_values<D: Dialect>(request: FetchRequest<'_>) -> Values<D::Database> {
    Values::new()
        .with(PartitionCount, D::Database::int(request.partition_count))
        .with(Partitions, D::partition_list(request.partitions))
        .with(ExcludedIds, D::id_list(request.exclude))
        .with(HoldDead, D::Database::flag(request.hold_dead))
        .with(Limit, D::Database::bigint(request.limit.events))
        .with(MaxBytes, D::Database::bigint(request.limit.bytes))
}
