//! The release `outbox-relay` binary, run as users run it: `outbox-relay
//! migrate`, then `outbox-relay run` with the default configuration (only
//! the HTTP endpoint's address is set, to a free port) and the broker URL,
//! in a process of its own, read through its `/metrics`.

use std::process::Command;
use std::time::Duration;

use crate::database::BenchDatabase;
use crate::histogram::Buckets;
use crate::source::EventSource;
use crate::support::http::{endpoint_address, get, sample};
use crate::support::process::RelayProcess;

/// The configuration file: every setting at its default but the HTTP
/// endpoint, on a free port of the loopback.
const CONFIG: &str = "[http]\nlisten = \"127.0.0.1:0\"\n";

/// Environment variable with TOML put before [`CONFIG`], to measure a
/// setting against the default (e.g. `batch_size = 2000`); unset in the
/// figures of `BENCHMARKS.md` unless they say otherwise.
const EXTRA_CONFIG_VARIABLE: &str = "OUTBOX_BENCH_RELAY_CONFIG";

/// The relay's configuration file: [`CONFIG`], after the case's own TOML
/// (`case_config`) and that of [`EXTRA_CONFIG_VARIABLE`] when it is set.
fn config_file(case_config: &str) -> String {
    match std::env::var(EXTRA_CONFIG_VARIABLE) {
        Ok(extra) if !extra.trim().is_empty() => format!("{extra}\n{case_config}\n{CONFIG}"),
        _ => format!("{case_config}\n{CONFIG}"),
    }
}

/// The published counter of `/metrics`, summed over topics.
const PUBLISHED_TOTAL: &str = "outbox_relay_events_published_total";
/// Sum and count of the batch publish histogram.
const BATCH_PUBLISH_SUM: &str = "outbox_relay_batch_publish_seconds_sum";
const BATCH_PUBLISH_COUNT: &str = "outbox_relay_batch_publish_seconds_count";
/// The commit-to-ack histogram: from an event's commit (the WAL's commit
/// record on the logical source; its `created_at`, the transaction's
/// `now()`, when polling) to the broker's acknowledgement.
const COMMIT_TO_ACK: &str = "outbox_relay_commit_to_ack_seconds";

/// How long a relay may take to stop after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(60);

/// `outbox-relay migrate --database-url url`, with the source's arguments
/// (`--source logical` also creates the slot and its publication).
pub(crate) fn migrate(database_url: &str, source: &EventSource) {
    let output = Command::new(env!("CARGO_BIN_EXE_outbox-relay"))
        .args(["migrate", "--database-url", database_url])
        .args(source.migrate_args())
        .output()
        .expect("run outbox-relay migrate");
    assert!(
        output.status.success(),
        "outbox-relay migrate failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One reading of `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scrape {
    /// `outbox_relay_events_published_total`, every topic.
    pub(crate) published: f64,
    /// Seconds spent publishing batches, and how many batches.
    pub(crate) batch_publish_seconds: f64,
    pub(crate) batches: f64,
}

/// The counters of one `/metrics` text.
fn scrape_of(body: &str) -> Scrape {
    let published = body
        .lines()
        .filter(|line| line.starts_with(PUBLISHED_TOTAL))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Scrape {
        published,
        batch_publish_seconds: sample(body, BATCH_PUBLISH_SUM).unwrap_or(0.0),
        batches: sample(body, BATCH_PUBLISH_COUNT).unwrap_or(0.0),
    }
}

/// `VmHWM` of a `/proc/<pid>/status` text, in KiB.
fn peak_rss_of(status: &str) -> Option<u64> {
    let value = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))?;
    value.trim().strip_suffix("kB")?.trim().parse().ok()
}

/// A running `outbox-relay run` and its HTTP endpoint.
pub(crate) struct RunningRelay {
    process: RelayProcess,
    address: String,
}

impl RunningRelay {
    /// Start the relay on `database` (with its source) and `broker_url`,
    /// with `log_filter` as `RUST_LOG` (the default is `info`), and wait for
    /// its endpoint.
    pub(crate) async fn start(
        database: &BenchDatabase,
        broker_url: &str,
        log_filter: &str,
    ) -> Self {
        RunningRelay::start_with(database, broker_url, log_filter, "").await
    }

    /// [`RunningRelay::start`] with `case_config`, TOML put before the
    /// endpoint's settings (e.g. `[retention]` with `published = "0s"`).
    pub(crate) async fn start_with(
        database: &BenchDatabase,
        broker_url: &str,
        log_filter: &str,
        case_config: &str,
    ) -> Self {
        let source_args = database.source.args();
        let run_args: Vec<&str> = source_args.iter().map(String::as_str).collect();
        let process = RelayProcess::spawn_with_log_filter(
            &database.url,
            broker_url,
            &config_file(case_config),
            &[],
            &run_args,
            log_filter,
        );
        let address = endpoint_address(&process).await;
        RunningRelay { process, address }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The relay's peak resident set size so far, in KiB: `VmHWM` of
    /// `/proc/<pid>/status`.
    pub(crate) fn peak_rss_kib(&self) -> u64 {
        let path = format!("/proc/{}/status", self.pid());
        let status =
            std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {path}: {error}"));
        peak_rss_of(&status).unwrap_or_else(|| panic!("no VmHWM line in {path}:\n{status}"))
    }

    /// The text of `/metrics`.
    async fn metrics(&self) -> String {
        let response = get(&self.address, "/metrics").await;
        assert_eq!(response.status, 200, "/metrics: {}", response.body);
        response.body
    }

    /// Read `/metrics`.
    pub(crate) async fn scrape(&self) -> Scrape {
        scrape_of(&self.metrics().await)
    }

    /// Read `/metrics`: the counters, and the commit-to-ack histogram's
    /// cumulative buckets.
    pub(crate) async fn scrape_with_commit_to_ack(&self) -> (Scrape, Buckets) {
        let body = self.metrics().await;
        (scrape_of(&body), Buckets::parse(&body, COMMIT_TO_ACK))
    }

    /// Read `/metrics` every `interval` until `total` events are published;
    /// returns the last reading.
    pub(crate) async fn wait_published(&self, total: u64, interval: Duration) -> Scrape {
        loop {
            let scrape = self.scrape().await;
            if scrape.published as u64 >= total {
                return scrape;
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// SIGTERM, and wait for the exit; returns the relay's log.
    pub(crate) fn stop(mut self) -> String {
        self.process.signal("TERM");
        let status = self.process.wait_exit(STOP_LIMIT);
        let log = self.process.log();
        match status {
            Some(status) if status.success() => {}
            other => eprintln!("    ! the relay did not stop cleanly ({other:?}); its log:\n{log}"),
        }
        log
    }

    /// The relay's log file.
    pub(crate) fn log_path(&self) -> std::path::PathBuf {
        self.process.log_path().to_owned()
    }
}

pub(crate) mod tests {
    use super::peak_rss_of;

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] = &[(
        "relay::peak_rss_from_proc_status",
        peak_rss_from_proc_status,
    )];

    fn peak_rss_from_proc_status() {
        let status =
            "Name:\toutbox-relay\nVmPeak:\t 1201384 kB\nVmHWM:\t  146812 kB\nVmRSS:\t  98304 kB\n";
        assert_eq!(peak_rss_of(status), Some(146_812));
        assert_eq!(peak_rss_of("Name:\toutbox-relay\n"), None);
    }
}
