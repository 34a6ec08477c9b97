//! The figures of every variant: one line per variant as it ends, then a
//! Markdown table of all of them and the details behind each row.

use crate::fetch_timing::FetchCost;
use crate::measure::Figures;
use crate::variants::Work;
use crate::wal::WalRecords;

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
    if figures.table.updates == 0 {
        "–".to_owned()
    } else {
        format!(
            "{:.1}",
            100.0 * figures.table.hot_updates as f64 / figures.table.updates as f64
        )
    }
}

/// This database's own WAL records as `show` writes them, `per` giving
/// one of their figures per event; `missing` when they were not read.
fn own_wal(
    figures: &Figures,
    missing: &str,
    show: impl FnOnce(&dyn Fn(i64) -> f64, &WalRecords) -> String,
) -> String {
    let per = |value: i64| per_event(value as f64, figures.events);
    figures
        .wal
        .records
        .as_ref()
        .map_or_else(|| missing.to_owned(), |records| show(&per, records))
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
    let own = own_wal(figures, "not read", |per, records| {
        format!(
            "{:.0} B/event ({:.0} heap, {:.0} B-tree, {:.0} commits, {:.0} other; {:.0} of it full-page images; {:.2} records/event)",
            per(records.total()),
            per(records.heap),
            per(records.btree),
            per(records.commits),
            per(records.other),
            per(records.full_pages),
            per(records.records),
        )
    });
    println!(
        "  {}: {} CPU {:.1} µs/event by stat ticks, {:.1} by schedstat, {:.2} s wall; WAL {:.0} B/event by LSN, own records {}",
        figures.variant.name,
        work_label(figures.variant.work),
        per_event(figures.work.cpu.stat_seconds * 1e6, events),
        per_event(figures.work.cpu.sched_seconds * 1e6, events),
        figures.work.wall.as_secs_f64(),
        per_event(figures.wal.lsn_bytes as f64, events),
        own
    );
    println!(
        "    row {:.0} bytes, payload {:.0} bytes; updates {} (HOT {}), deletes {}; heap pages {} → {}, indexes {:.1} MiB after; {:.2} statements per batch",
        figures.backlog.row_bytes,
        figures.backlog.payload_bytes,
        figures.table.updates,
        figures.table.hot_updates,
        figures.table.deletes,
        figures.backlog.heap_pages,
        figures.table.heap_pages,
        figures.table.index_bytes as f64 / (1 << 20) as f64,
        figures.work.statements_per_batch
    );
    println!(
        "    fetch of {} rows µs (first / repeat): before {}, after half {} ({} rows, {} buffers, indexes {:?}), after half from the last id {}",
        figures.fetch_before.rows,
        fetch_pair(&figures.fetch_before),
        fetch_pair(&figures.fetch_after.from_start),
        figures.fetch_after.from_start.rows,
        figures.fetch_after.buffers,
        figures.fetch_after.indexes,
        fetch_pair(&figures.fetch_after.from_last)
    );
    if let Some(records) = &figures.wal.records {
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
        let own = own_wal(figures, "–", |per, records| {
            format!(
                "{:.0} ({:.0})",
                per(records.total()),
                per(records.full_pages)
            )
        });
        println!(
            "| {} | {:.0} | {:.1} ({}) | {:.0} | {} | {} | {} | {} | {:.0} | {:.1} |",
            figures.variant.label,
            figures.backlog.row_bytes,
            per_event(figures.work.cpu.stat_seconds * 1e6, events),
            work_label(figures.variant.work),
            per_event(figures.wal.lsn_bytes as f64, events),
            own,
            hot_share(figures),
            fetch_pair(&figures.fetch_before),
            fetch_pair(&figures.fetch_after.from_start),
            figures.fetch_after.from_last.repeat_us,
            figures.work.statements_per_batch
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
