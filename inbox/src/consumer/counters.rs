//! [`StatsCounters`]: the counters behind [`ConsumerStats`].

use std::sync::atomic::{AtomicU64, Ordering};

use crate::stats::ConsumerStats;

/// The counters behind [`ConsumerStats`], shared by the tasks of one
/// consumer.
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    processed: AtomicU64,
    duplicates: AtomicU64,
    dead_lettered: AtomicU64,
    retried: AtomicU64,
    database_outages: AtomicU64,
}

impl StatsCounters {
    pub(crate) fn count_processed(&self) {
        self.processed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_duplicate(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_dead_lettered(&self) {
        self.dead_lettered.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_retry(&self) {
        self.retried.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_database_outage(&self) {
        self.database_outages.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> ConsumerStats {
        ConsumerStats {
            processed: self.processed.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            database_outages: self.database_outages.load(Ordering::Relaxed),
        }
    }
}
