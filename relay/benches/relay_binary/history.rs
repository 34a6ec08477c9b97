//! Fetch and mark cost against the table's size: published events already
//! in the table (10 thousand to 10 million, made with `generate_series`),
//! then a backlog drained by the relay, with `pg_stat_activity` read
//! throughout to time the relay's fetch and mark statements.

use std::time::Instant;

use crate::broker::Broker;
use crate::database::BenchDatabase;
use crate::drain::{DrainFigures, DrainSpec, drain, print_drain};
use crate::keys::KeyDistribution;
use crate::source::SourceKind;
use crate::sql::{INSERT_PUBLISHED_HISTORY, VACUUM_ANALYZE};
use crate::{Settings, UNIFORM_AGGREGATES};

/// Published rows per `INSERT ... SELECT generate_series`.
const HISTORY_CHUNK: u64 = 1_000_000;

/// Write `rows` published events for `topic`, then `VACUUM ANALYZE`, as
/// autovacuum would long since have done to an old table (the backlog
/// written afterwards is not analyzed).
pub(crate) async fn write_history(
    database: &BenchDatabase,
    topic: &str,
    rows: u64,
    payload_bytes: usize,
) {
    let started = Instant::now();
    let pad = payload_bytes.saturating_sub(60) as i32;
    let mut written = 0u64;
    while written < rows {
        let chunk = HISTORY_CHUNK.min(rows - written);
        sqlx::query(INSERT_PUBLISHED_HISTORY)
            .bind(written as i64)
            .bind(chunk as i64)
            .bind(topic)
            .bind(pad)
            .execute(&database.pool)
            .await
            .expect("write published history");
        written += chunk;
    }
    sqlx::query(VACUUM_ANALYZE)
        .execute(&database.pool)
        .await
        .expect("vacuum analyze the history");
    println!(
        "    {rows} published rows written and vacuumed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The drain of a uniform backlog on top of each history size, to Kafka.
pub(crate) async fn history_sizes(settings: &Settings) -> Vec<(u64, DrainFigures)> {
    let mut results = Vec::new();
    for &rows in &settings.sizes {
        let spec = DrainSpec {
            label: format!("{rows} published rows, then a uniform backlog"),
            distribution: KeyDistribution::Uniform {
                aggregates: UNIFORM_AGGREGATES,
            },
            analyze: false,
            steady_rate: None,
            history_rows: rows,
            profile: true,
            source: SourceKind::Poll,
            relay_config: "",
        };
        let figures = drain(settings, Broker::Kafka, spec).await;
        print_drain(&figures);
        results.push((rows, figures));
    }
    results
}
