//! Where the relay finds committed events: by polling the table (the
//! default), or from the WAL through a replication slot of its own
//! (`--source logical`).

use outbox_testkit::unique_slot_name;

/// How the relay of a case reads the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SourceKind {
    /// `--source poll`, the default: fetch by id under partition leases,
    /// mark each published event.
    Poll,
    /// `--source logical`: stream the inserts from a replication slot.
    Logical,
    /// `--source logical` over a backlog written before the slot existed
    /// (a switch from polling, or a relay started after the application):
    /// the relay creates the slot and publishes the backlog from the
    /// table, then streams.
    LogicalBacklog,
}

impl SourceKind {
    /// How the tables name it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            SourceKind::Poll => "polling",
            SourceKind::Logical => "logical",
            SourceKind::LogicalBacklog => "logical, backlog before the slot",
        }
    }
}

/// The source of one database: its kind and, for `logical`, a slot name of
/// its own (slots are server-wide). The test database drops every slot of
/// its database before itself.
#[derive(Debug, Clone)]
pub(crate) struct EventSource {
    slot: Option<String>,
    /// Whether `migrate` creates the slot, before the backlog is written.
    slot_first: bool,
}

impl EventSource {
    pub(crate) fn new(kind: SourceKind) -> EventSource {
        let slot = (kind != SourceKind::Poll).then(|| unique_slot_name("outbox_bench"));
        EventSource {
            slot,
            slot_first: kind == SourceKind::Logical,
        }
    }

    /// The arguments of `migrate`: the source's when it makes the slot
    /// before the backlog is written.
    pub(crate) fn migrate_args(&self) -> Vec<String> {
        if self.slot_first {
            self.args()
        } else {
            Vec::new()
        }
    }

    /// The arguments of `run` that choose it.
    pub(crate) fn args(&self) -> Vec<String> {
        match &self.slot {
            None => Vec::new(),
            Some(slot) => vec![
                "--source".to_owned(),
                "logical".to_owned(),
                "--slot".to_owned(),
                slot.clone(),
            ],
        }
    }
}
