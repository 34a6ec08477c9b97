//! The variants: each one a schema change made by SQL on a freshly
//! migrated database before its backlog is written, a payload size, and
//! the work measured over the backlog. None of them changes the relay: a
//! variant that pays off is a proposal, measured here.

/// How an acknowledged event is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// `mark_published.sql`: an `UPDATE` to `published`.
    Update,
    /// `delete_acknowledged.sql`: a `DELETE`.
    Delete,
}

/// What runs over the backlog on the measured connection.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Work {
    /// The mark alone over the backlog in id order, `batch` ids a
    /// statement, each in the relay's transaction: `BEGIN`, `SET LOCAL
    /// synchronous_commit = off`, the mark, `COMMIT`.
    Mark { settle: Settle, batch: usize },
    /// The relay's batch loop with a broker that answers at once, 500
    /// events a batch: fetch batch N + 1 (batch N's ids left out, as the
    /// relay leaves out the ids in flight) and mark batch N, as two
    /// statements or (`together`) one; each in a transaction with its
    /// `SET LOCAL`, or (`session_settings`) alone, the settings made once
    /// for the session.
    Loop {
        together: bool,
        session_settings: bool,
    },
}

/// One variant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variant {
    /// Its name on the command line (`--variants`).
    pub(crate) name: &'static str,
    /// Its name in the table.
    pub(crate) label: &'static str,
    /// Run in order after the migrations, before the backlog is written.
    pub(crate) schema: &'static [&'static str],
    /// The payload size, when not `--payload-bytes`.
    pub(crate) payload_bytes: Option<usize>,
    pub(crate) work: Work,
}

/// The mark as the relay runs it.
const MARK: Work = Work::Mark {
    settle: Settle::Update,
    batch: 500,
};

const DROP_PUBLISHED_INDEX: &str = "DROP INDEX outbox_events_published_idx";

/// No index on a column the mark sets, nor a predicate on one: the mark
/// (`state`, `published_at`, `next_attempt_at`) then changes no indexed
/// column, and its new row version may be a heap-only tuple (HOT) when it
/// fits the page. The primary key gives the fetch its id order, and the
/// fetch skips published rows in the heap; the index of failed events
/// keeps `attempts > 0` alone as its predicate (the fetch's probe has that
/// condition), so it keeps an event that failed once and was published
/// later. Listing dead events and retention lose their indexes.
const HOT_INDEXES: [&str; 5] = [
    "DROP INDEX outbox_events_pending_idx",
    DROP_PUBLISHED_INDEX,
    "DROP INDEX outbox_events_dead_idx",
    "DROP INDEX outbox_events_failed_idx",
    "CREATE INDEX outbox_events_failed_idx ON outbox_events (aggregate_type, aggregate_id, id) \
     WHERE attempts > 0",
];

/// The HOT schema: [`HOT_INDEXES`], then `fillfactor` (the table's
/// `ALTER TABLE`).
const fn hot_schema(fillfactor: &'static str) -> [&'static str; 6] {
    let [first, second, third, fourth, fifth] = HOT_INDEXES;
    [first, second, third, fourth, fifth, fillfactor]
}

const FILLFACTOR_70: &str = "ALTER TABLE outbox_events SET (fillfactor = 70)";
const FILLFACTOR_50: &str = "ALTER TABLE outbox_events SET (fillfactor = 50)";
const HOT_70: [&str; 6] = hot_schema(FILLFACTOR_70);
const HOT_50: [&str; 6] = hot_schema(FILLFACTOR_50);

/// Every variant, in the order they run.
pub(crate) const VARIANTS: &[Variant] = &[
    Variant {
        name: "update",
        label: "update (as migrated)",
        schema: &[],
        payload_bytes: None,
        work: MARK,
    },
    Variant {
        name: "delete",
        label: "delete",
        schema: &[],
        payload_bytes: None,
        work: Work::Mark {
            settle: Settle::Delete,
            batch: 500,
        },
    },
    Variant {
        name: "no-published-index",
        label: "update, no published index",
        schema: &[DROP_PUBLISHED_INDEX],
        payload_bytes: None,
        work: MARK,
    },
    Variant {
        name: "fillfactor-70",
        label: "update, fillfactor 70",
        schema: &[FILLFACTOR_70],
        payload_bytes: None,
        work: MARK,
    },
    Variant {
        name: "hot-70",
        label: "HOT schema, fillfactor 70",
        schema: &HOT_70,
        payload_bytes: None,
        work: MARK,
    },
    Variant {
        name: "hot-50",
        label: "HOT schema, fillfactor 50",
        schema: &HOT_50,
        payload_bytes: None,
        work: MARK,
    },
    Variant {
        name: "narrow",
        label: "update, 30-byte payloads",
        schema: &[],
        payload_bytes: Some(30),
        work: MARK,
    },
    Variant {
        name: "batch-2000",
        label: "update, batches of 2,000",
        schema: &[],
        payload_bytes: None,
        work: Work::Mark {
            settle: Settle::Update,
            batch: 2000,
        },
    },
    Variant {
        name: "loop",
        label: "loop: fetch + mark, 2 transactions",
        schema: &[],
        payload_bytes: None,
        work: Work::Loop {
            together: false,
            session_settings: false,
        },
    },
    Variant {
        name: "loop-session",
        label: "loop: fetch + mark, session settings",
        schema: &[],
        payload_bytes: None,
        work: Work::Loop {
            together: false,
            session_settings: true,
        },
    },
    Variant {
        name: "loop-cte",
        label: "loop: mark N + fetch N+1 in one CTE, 1 transaction",
        schema: &[],
        payload_bytes: None,
        work: Work::Loop {
            together: true,
            session_settings: false,
        },
    },
    Variant {
        name: "loop-cte-session",
        label: "loop: mark N + fetch N+1 in one CTE, session settings",
        schema: &[],
        payload_bytes: None,
        work: Work::Loop {
            together: true,
            session_settings: true,
        },
    },
];

pub(crate) mod tests {
    use super::VARIANTS;

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] = &[("variants::names_are_unique", names_are_unique)];

    fn names_are_unique() {
        let mut names: Vec<&str> = VARIANTS.iter().map(|variant| variant.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), VARIANTS.len());
    }
}
