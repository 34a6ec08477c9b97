//! The figures of every variant: one line per variant as it ends, then a
//! Markdown table of all of them and the details behind each row.

use crate::measure::{FetchCost, Figures};
use crate::variants::Work;

/// Per event, of `events`.
fn per_event(value: f64, events: u64) -> f64 {
    value / events.max(1) as f64
}

/// `first / repeat` in µs.
fn fetch_pair(cost: &FetchCost) -> String {
    format!("{:.0} / {:.0}", cost.first_us, cost.repeat_us)
}

/// HOT updates as a share of updates; `–` when nothing was updated.
fn hot_share(figures: &Figures) -> String {
    if figures.updates == 0 {
        "–".to_owned()
    } else {
        format!(
            "{:.1}",
            100.0 * figures.hot_updates as f64 / figures.updates as f64
        )
    }
}

/// What the CPU column counts for the variant's work.
fn work_label(work: Work) -> &'static str {
    match work {
        Work::Mark { .. } => "mark",
        Work::Loop { .. } => "fetch + mark",
    }
}

/// One line as the variant ends.
pub(crate) fn print_variant(figures: &Figures) {
    let events = figures.events;
    let own = figures.wal_records.as_ref().map_or_else(
        || "not read".to_owned(),
        |records| {
            format!(
                "{:.0} B/event ({:.0} heap, {:.0} B-tree, {:.0} commits, {:.0} other; {:.0} of it full-page images; {:.2} records/event)",
                per_event(records.total() as f64, events),
                per_event(records.heap as f64, events),
                per_event(records.btree as f64, events),
                per_event(records.commits as f64, events),
                per_event(records.other as f64, events),
                per_event(records.full_pages as f64, events),
                per_event(records.records as f64, events),
            )
        },
    );
    println!(
        "  {}: {} CPU {:.1} µs/event by stat ticks, {:.1} by schedstat, {:.2} s wall; WAL {:.0} B/event by LSN, own records {}",
        figures.variant.name,
        work_label(figures.variant.work),
        per_event(figures.cpu.stat_seconds * 1e6, events),
        per_event(figures.cpu.sched_seconds * 1e6, events),
        figures.wall.as_secs_f64(),
        per_event(figures.wal_lsn as f64, events),
        own
    );
    println!(
        "    row {:.0} bytes, payload {:.0} bytes; updates {} (HOT {}), deletes {}; heap pages {} → {}, indexes {:.1} MiB after; {:.2} statements per batch",
        figures.row_bytes,
        figures.payload_bytes,
        figures.updates,
        figures.hot_updates,
        figures.deletes,
        figures.heap_pages_before,
        figures.heap_pages_after,
        figures.index_bytes_after as f64 / (1 << 20) as f64,
        figures.statements_per_batch
    );
    println!(
        "    fetch of {} rows µs (first / repeat): before {}, after half {} ({} rows, {} buffers, indexes {:?}), after half from the last id {}",
        figures.fetch_before.rows,
        fetch_pair(&figures.fetch_before),
        fetch_pair(&figures.fetch_after),
        figures.fetch_after.rows,
        figures.fetch_after_buffers,
        figures.fetch_after_indexes,
        fetch_pair(&figures.fetch_after_from_last)
    );
    if let Some(records) = &figures.wal_records {
        let kinds: Vec<String> = records
            .kinds
            .iter()
            .map(|(kind, count, bytes)| {
                format!(
                    "{kind} {:.2} × {:.0} B",
                    per_event(*count as f64, events),
                    *bytes as f64 / (*count).max(1) as f64
                )
            })
            .collect();
        println!("    WAL records per event: {}", kinds.join(", "));
    }
}

/// The table of every variant.
pub(crate) fn print_table(all: &[Figures]) {
    println!();
    println!(
        "| variant | row bytes | PG CPU µs/event | WAL B/event (LSN) | own WAL B/event (full-page images) | HOT % | fetch before µs | fetch after half µs | from last id µs | statements/batch |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for figures in all {
        let events = figures.events;
        let own = figures.wal_records.as_ref().map_or_else(
            || "–".to_owned(),
            |records| {
                format!(
                    "{:.0} ({:.0})",
                    per_event(records.total() as f64, events),
                    per_event(records.full_pages as f64, events)
                )
            },
        );
        println!(
            "| {} | {:.0} | {:.1} ({}) | {:.0} | {} | {} | {} | {} | {:.0} | {:.1} |",
            figures.variant.label,
            figures.row_bytes,
            per_event(figures.cpu.stat_seconds * 1e6, events),
            work_label(figures.variant.work),
            per_event(figures.wal_lsn as f64, events),
            own,
            hot_share(figures),
            fetch_pair(&figures.fetch_before),
            fetch_pair(&figures.fetch_after),
            figures.fetch_after_from_last.repeat_us,
            figures.statements_per_batch
        );
    }
    println!();
    println!(
        "PG CPU: the marking backend's utime + stime over the backlog, the fetches timed apart left out. Fetch: \
         the backend's CPU (schedstat) of the relay's fetch of 500 rows in its transaction, the first one / \
         the mean of the repeats; after half the backlog, from the start of the table and (HOT's need) from \
         the last marked id. Own WAL: this database's records (pg_walinspect), their commits included."
    );
}
