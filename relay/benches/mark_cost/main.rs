//! What marking a published event costs PostgreSQL, and what takes work
//! off it: per variant, the CPU of the marking backend and the WAL per
//! event over a backlog, and the CPU of the fetch where the variant
//! changes what the fetch depends on.
//!
//! ```sh
//! cargo bench -p outbox-relay --bench mark_cost
//! cargo bench -p outbox-relay --bench mark_cost -- --events 20000 --variants update,hot-50
//! ```
//!
//! Each variant gets a fresh database (`outbox_testkit::postgres`),
//! migrated by `outbox::migrate` (what `outbox-relay migrate` runs), with
//! autovacuum off on the outbox table, the `pg_walinspect` extension, and
//! the variant's schema change made by SQL. Then a backlog as the
//! `relay_binary` bench writes it (`--events`, 100,000, over 1,000
//! aggregates, one `INSERT` per event, 500 per transaction, never
//! analyzed), and all 32 partition leases taken with the relay's
//! `acquire_leases.sql`. On one connection the work runs over the backlog
//! in id order, its backend's CPU read from `/proc/<pid>/stat` (`utime +
//! stime`) and `/proc/<pid>/schedstat`, the WAL from `pg_current_wal_lsn()`
//! and, for this database's records alone, `pg_get_wal_records_info`:
//! - the relay's mark (`mark_published.sql`, or `delete_acknowledged.sql`),
//!   500 ids a statement with the fence values the relay binds, each in
//!   its transaction (`BEGIN`, `SET LOCAL synchronous_commit = off`, the
//!   mark, `COMMIT`);
//! - or the relay's loop with a broker that answers at once: fetch batch
//!   N + 1 (batch N's ids left out) and mark batch N, as two transactions,
//!   two statements, or one statement (the mark as a data-modifying CTE in
//!   front of the fetch).
//!
//! Before the work and after half the backlog, the relay's fetch of 500
//! rows (in its transaction, `SET LOCAL enable_sort = off`) is timed on
//! the same backend: once, then `--repeats` (5) times; after half also
//! from the last marked id (`AND e.id > $7`), which a schema whose pending
//! rows share an index with published ones needs.
//!
//! Variants (`--variants`, comma-separated; all by default): `update`,
//! `delete`, `no-published-index`, `fillfactor-70`, `hot-70`, `hot-50`
//! (no index on a column the mark sets, fillfactor 70 or 50: the mark's
//! update can be HOT), `narrow` (30-byte payloads), `batch-2000`, `loop`,
//! `loop-session`, `loop-cte`, `loop-cte-session`. `--payload-bytes`
//! (300) sets the others' payload size.
//!
//! The bench has no test harness: `cargo bench` passes `--bench`, and
//! without it (`cargo test -p outbox-relay --bench mark_cost`) only the
//! bench's own unit tests run.

mod backlog;
mod cpu;
mod fence;
mod fetch_mark_loop;
mod fetch_timing;
#[allow(dead_code)]
#[path = "../relay_binary/keys.rs"]
mod keys;
mod mark_loop;
mod measure;
mod relay_statements;
mod report;
mod session;
#[allow(dead_code)]
#[path = "../relay_binary/sql.rs"]
mod sql;
mod statements;
#[path = "../support/mod.rs"]
mod support;
mod table_after;
mod variants;
mod wal;
mod work;
#[allow(dead_code)]
#[path = "../relay_binary/writers.rs"]
mod writers;

use crate::support::args::flag_value;
use crate::variants::{VARIANTS, Variant};

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) events: u64,
    pub(crate) payload_bytes: usize,
    pub(crate) repeats: usize,
    pub(crate) variants: Vec<Variant>,
}

impl Settings {
    fn load() -> Settings {
        let number = |flag: &str, default: u64| -> u64 {
            flag_value(flag).map_or(default, |text| {
                text.replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("{flag}: not a number: {text}"))
            })
        };
        let variants = match flag_value("--variants") {
            None => VARIANTS.to_vec(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(|name| {
                    *VARIANTS
                        .iter()
                        .find(|variant| variant.name == name)
                        .unwrap_or_else(|| {
                            let names: Vec<&str> =
                                VARIANTS.iter().map(|variant| variant.name).collect();
                            panic!("no variant {name}; the variants are {names:?}")
                        })
                })
                .collect(),
        };
        Settings {
            events: number("--events", 100_000),
            payload_bytes: number("--payload-bytes", 300) as usize,
            repeats: number("--repeats", 5) as usize,
            variants,
        }
    }
}

fn run_unit_tests() {
    let tests = cpu::tests::ALL
        .iter()
        .chain(support::cpu::tests::ALL)
        .chain(statements::tests::ALL)
        .chain(variants::tests::ALL);
    support::unit_tests::run("mark_cost", tests);
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|arg| arg == "--bench") {
        run_unit_tests();
        return;
    }
    let settings = Settings::load();
    let names: Vec<&str> = settings
        .variants
        .iter()
        .map(|variant| variant.name)
        .collect();
    println!(
        "mark_cost: {} events per backlog of {}-byte payloads, fetch repeats {}, variants {:?}",
        settings.events, settings.payload_bytes, settings.repeats, names
    );
    let mut all = Vec::new();
    for variant in &settings.variants {
        println!("== {}", variant.label);
        let figures = measure::run(*variant, &settings).await;
        report::print_variant(&figures);
        all.push(figures);
    }
    report::print_table(&all);
}
