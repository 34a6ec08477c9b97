//! The summary: every figure of the run as Markdown tables, and the ratios
//! measured within the run against their targets.

use crate::Settings;
use crate::broker::Broker;
use crate::drain::DrainFigures;
use crate::latency::{LatencyFigures, Route};
use crate::payloads::PayloadFigures;
use crate::support::raw::RawRate;

/// The rate of the commit → ack target, events/s.
const TARGET_RATE: u64 = 1000;
/// The target: the logical source's commit → ack p99 at [`TARGET_RATE`].
const ACK_P99_TARGET_MS: f64 = 5.0;

/// Everything one broker's cases measured.
pub(crate) struct BrokerResults {
    pub(crate) broker: Broker,
    pub(crate) raw: Option<RawRate>,
    /// By case name (`uniform`, `analyzed`, ...).
    pub(crate) drains: Vec<(&'static str, DrainFigures)>,
}

impl BrokerResults {
    fn rate(&self, case: &str) -> Option<f64> {
        self.drains
            .iter()
            .find(|(name, _)| *name == case)
            .map(|(_, figures)| figures.rate)
    }
}

/// A ratio; `target` is its lower bound, or upper bound when `at_most`.
struct Ratio {
    name: String,
    value: f64,
    target: Option<f64>,
    at_most: bool,
}

impl Ratio {
    fn line(&self) -> String {
        let verdict = match self.target {
            None => "(no target)".to_owned(),
            Some(target) => {
                let pass = if self.at_most {
                    self.value <= target
                } else {
                    self.value >= target
                };
                format!(
                    "target {} {target} → {}",
                    if self.at_most { "≤" } else { "≥" },
                    if pass { "PASS" } else { "MISS" }
                )
            }
        };
        format!("| {} | {:.2} | {verdict} |", self.name, self.value)
    }
}

fn quotient(
    name: String,
    top: Option<f64>,
    bottom: Option<f64>,
    target: Option<f64>,
) -> Option<Ratio> {
    Some(Ratio {
        name,
        value: top? / bottom?,
        target,
        at_most: false,
    })
}

/// Print the summary.
pub(crate) fn print_summary(
    settings: &Settings,
    brokers: &[BrokerResults],
    latencies: &[LatencyFigures],
    history: &[(u64, DrainFigures)],
    payloads: &[PayloadFigures],
) {
    let drained = brokers
        .iter()
        .any(|results| results.raw.is_some() || !results.drains.is_empty());
    if drained || !history.is_empty() || !latencies.is_empty() {
        println!();
        println!(
            "## Summary: {} events per backlog, ~{} byte payloads, sampled every {} ms",
            settings.events,
            settings.payload_bytes,
            settings.sample_interval.as_millis()
        );
    }
    if drained || !history.is_empty() {
        print_drains(brokers, history);
    }

    let ratios = ratios(brokers, history, latencies);
    if !ratios.is_empty() {
        println!();
        println!("| ratio (one run) | value | target |");
        println!("|---|---|---|");
        for ratio in ratios {
            println!("{}", ratio.line());
        }
    }

    if !history.is_empty() {
        print_history(history);
    }
    print_latencies(latencies);
    print_payloads(payloads, settings.max_rss_mib);
}

/// The ratios of the run, each within the run, with their targets.
fn ratios(
    brokers: &[BrokerResults],
    history: &[(u64, DrainFigures)],
    latencies: &[LatencyFigures],
) -> Vec<Ratio> {
    let mut ratios = Vec::new();
    for results in brokers {
        let path = results.broker.path();
        let raw_target = match results.broker {
            Broker::Kafka => 0.5,
            Broker::RabbitMq | Broker::Redis | Broker::Nats => 0.8,
        };
        ratios.extend([
            quotient(
                format!("{path}: relay (uniform, no statistics) / raw client"),
                results.rate("uniform"),
                results.raw.as_ref().map(|raw| raw.rate),
                Some(raw_target),
            ),
            quotient(
                format!("{path}: no statistics / after ANALYZE"),
                results.rate("uniform"),
                results.rate("analyzed"),
                Some(0.9),
            ),
            quotient(
                format!("{path}: 5 aggregates / uniform"),
                results.rate("five"),
                results.rate("uniform"),
                Some(0.7),
            ),
            quotient(
                format!("{path}: 1 aggregate / uniform"),
                results.rate("one"),
                results.rate("uniform"),
                Some(0.5),
            ),
            quotient(
                format!("{path}: Zipf / uniform"),
                results.rate("zipf"),
                results.rate("uniform"),
                None,
            ),
            quotient(
                format!("{path}: with steady producers / uniform"),
                results.rate("steady"),
                results.rate("uniform"),
                None,
            ),
            quotient(
                format!("{path}: logical drain / polling drain (uniform)"),
                results.rate("logical"),
                results.rate("uniform"),
                Some(2.0),
            ),
            quotient(
                format!("{path}: logical / polling, with steady producers"),
                results.rate("logical-steady"),
                results.rate("steady"),
                None,
            ),
            quotient(
                format!("{path}: logical, backlog before the slot / polling drain (uniform)"),
                results.rate("logical-backlog"),
                results.rate("uniform"),
                None,
            ),
        ]);
    }
    if history.len() > 1 {
        let spread = |values: Vec<f64>| {
            let max = values.iter().copied().fold(f64::MIN, f64::max);
            let min = values.iter().copied().fold(f64::MAX, f64::min);
            max / min
        };
        let per_event = |phase: usize| {
            history
                .iter()
                .filter_map(|(_, figures)| {
                    let profile = figures.profile.as_ref()?;
                    let costs = profile.fetch_and_mark_per_event(figures.published);
                    Some(if phase == 0 { costs.0 } else { costs.1 })
                })
                .collect::<Vec<_>>()
        };
        for (name, values) in [
            ("fetch µs/event", per_event(0)),
            ("mark µs/event", per_event(1)),
            (
                "drain µs/event",
                history
                    .iter()
                    .map(|(_, figures)| 1e6 / figures.rate)
                    .collect(),
            ),
        ] {
            ratios.push(Some(Ratio {
                name: format!("history sizes: max/min {name}"),
                value: spread(values),
                target: Some(1.5),
                at_most: true,
            }));
        }
    }
    for figures in latencies
        .iter()
        .filter(|figures| figures.route == Route::Logical && figures.rate == TARGET_RATE)
    {
        let path = figures.broker.path();
        // The target is on commit → ack; commit → consumer adds the
        // consumer's fetch wait, shown beside it.
        ratios.push(figures.ack_percentile(0.99).map(|value| Ratio {
            name: format!("{path}: logical source, commit → ack p99 at 1,000/s, ms"),
            value,
            target: Some(ACK_P99_TARGET_MS),
            at_most: true,
        }));
        ratios.push(Some(Ratio {
            name: format!("{path}: logical source, commit → consumer p99 at 1,000/s, ms"),
            value: figures.percentile(0.99),
            target: None,
            at_most: true,
        }));
    }
    ratios.into_iter().flatten().collect()
}

/// Fetch and mark cost against the table's size.
fn print_history(history: &[(u64, DrainFigures)]) {
    println!();
    println!(
        "| published rows in the table | drain events/s | fetch µs/event | mark µs/event | PostgreSQL CPU µs/event |"
    );
    println!("|---|---|---|---|---|");
    for (rows, figures) in history {
        let (fetch, mark) = figures
            .profile
            .as_ref()
            .map_or((f64::NAN, f64::NAN), |profile| {
                profile.fetch_and_mark_per_event(figures.published)
            });
        println!(
            "| {rows} | {:.0} | {fetch:.1} | {mark:.1} | {:.1} |",
            figures.rate,
            figures.cpu.postgres * 1e6 / figures.cpu_events.max(1) as f64
        );
    }
}

/// The drains' table: raw clients, every case, the history sizes.
fn print_drains(brokers: &[BrokerResults], history: &[(u64, DrainFigures)]) {
    println!();
    println!(
        "| path | case | events/s (10%→90%) | first→last | relay µs/event | PostgreSQL µs/event | broker µs/event | batch publish mean | rows written per event |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for results in brokers {
        if let Some(raw) = &results.raw {
            println!(
                "| {} | raw client | {:.0} | | {:.1} (client) | {:.1} | {:.1} | | |",
                results.broker.path(),
                raw.rate,
                raw.cpu.client * 1e6 / raw.acknowledged.max(1) as f64,
                raw.cpu.postgres * 1e6 / raw.acknowledged.max(1) as f64,
                raw.cpu.broker * 1e6 / raw.acknowledged.max(1) as f64,
            );
        }
        for (_, figures) in &results.drains {
            print_drain_row(results.broker.path(), figures);
        }
    }
    for (_, figures) in history {
        print_drain_row(Broker::Kafka.path(), figures);
    }
}

fn print_drain_row(path: &str, figures: &DrainFigures) {
    let per_event = |seconds: f64| seconds * 1e6 / figures.cpu_events.max(1) as f64;
    println!(
        "| {path} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} ms | {:.2} |",
        figures.spec.label,
        figures.rate,
        figures.whole_rate,
        per_event(figures.cpu.client),
        per_event(figures.cpu.postgres),
        per_event(figures.cpu.broker),
        figures.batch_publish_ms,
        figures.rows_written_per_event
    );
}

fn print_latencies(latencies: &[LatencyFigures]) {
    if latencies.is_empty() {
        return;
    }
    println!();
    println!(
        "| path | rate | route | committed/s | commit → consumer p50 | p99 | max | relay-added p99 | commit → ack p50 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for figures in latencies {
        let direct = latencies.iter().find(|other| {
            other.broker == figures.broker
                && other.rate == figures.rate
                && other.route == Route::Direct
        });
        let added = match (figures.route, direct) {
            (Route::Relay | Route::Logical, Some(direct)) => {
                format!(
                    "{:.1} ms",
                    figures.percentile(0.99) - direct.percentile(0.99)
                )
            }
            _ => String::new(),
        };
        let ack = |fraction| {
            figures
                .ack_percentile(fraction)
                .map_or(String::new(), |value| format!("{value:.2} ms"))
        };
        println!(
            "| {} | {}/s | {} | {:.0} | {:.1} ms | {:.1} ms | {:.1} ms | {added} | {} | {} |{}",
            figures.broker.path(),
            figures.rate,
            match figures.route {
                Route::Relay => "relay binary, polling",
                Route::Logical => "relay binary, logical source",
                Route::Direct => "direct producer",
            },
            figures.producer_rate,
            figures.percentile(0.5),
            figures.percentile(0.99),
            figures.percentile(1.0),
            ack(0.5),
            ack(0.99),
            if figures.missing > 0 {
                format!(" ({} never arrived)", figures.missing)
            } else {
                String::new()
            }
        );
    }
    if latencies
        .iter()
        .all(|figures| figures.commit_to_ack.is_none())
    {
        return;
    }
    println!();
    println!(
        "Commit → ack: the relay's `outbox_relay_commit_to_ack_seconds` read at the start and the end of the measured window, \
         the difference of its cumulative buckets; from each event's commit (the WAL's commit record on the logical source; \
         its `created_at`, the transaction's `now()`, when polling) to the broker's acknowledgement; p50 and p99 interpolated linearly within their bucket, as PromQL's `histogram_quantile` does."
    );
    for figures in latencies
        .iter()
        .filter(|figures| figures.route == Route::Logical && figures.rate == TARGET_RATE)
    {
        let verdict = match figures.ack_percentile(0.99) {
            Some(p99) if p99 <= ACK_P99_TARGET_MS => format!("PASS ({p99:.2} ms)"),
            Some(p99) => format!("MISS ({p99:.2} ms)"),
            None => "n/a (no acknowledgement counted)".to_owned(),
        };
        println!(
            "- {}, logical source at 1,000/s: commit → ack p99 ≤ {ACK_P99_TARGET_MS} ms: {verdict}",
            figures.broker.path()
        );
    }
}

/// The `payloads` case: per broker, size and source, the relay against the
/// raw client, its peak RSS against the bound, and the consumer's check.
fn print_payloads(payloads: &[PayloadFigures], max_rss_mib: u64) {
    if payloads.is_empty() {
        return;
    }
    println!();
    println!("## Payload sizes: the relay binary against the raw client, and its peak RSS");
    println!();
    println!(
        "| path | payload | source | events | MB | relay events/s (10%→90%) | raw msg/s | relay / raw | drained in | peak RSS MiB (≤ {max_rss_mib}) | CPU µs/event: relay / PostgreSQL / broker | machine busy | consumer |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    for figures in payloads {
        let per_event = |seconds: f64| seconds * 1e6 / figures.cpu_events.max(1) as f64;
        let cpu = figures.cpu;
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} s | {:.0}{} | {:.0} / {:.0} / {:.0} | {:.0}% | {}{} |",
            figures.broker.path(),
            figures.size.label(),
            figures.source.label(),
            figures.size.events,
            figures.size.megabytes(),
            figures.rate,
            figures.raw_rate,
            figures.ratio(),
            figures.drained_in.as_secs_f64(),
            figures.peak_rss_mib(),
            if figures.peak_rss_kib > max_rss_mib * 1024 {
                " (above)"
            } else {
                ""
            },
            per_event(cpu.client),
            per_event(cpu.postgres),
            per_event(cpu.broker),
            100.0 * cpu.machine_busy / (cpu.wall * cores).max(f64::EPSILON),
            if figures.deliveries.passed() {
                "every event once, in order".to_owned()
            } else {
                figures.deliveries.describe()
            },
            if figures.errors.is_empty() {
                String::new()
            } else {
                format!("; {} ERROR lines", figures.errors.len())
            }
        );
    }
}
