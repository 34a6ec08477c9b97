//! What one run measured, and the markdown tables of every run.

use std::time::Duration;

use crate::settings::{Broker, Case};

/// One consumer's run.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// From the consumer's start (its `run` called, or its process
    /// spawned) to its last delivery settled.
    pub(crate) elapsed: Duration,
    /// From the first invoice committed to the last delivery settled.
    pub(crate) from_first_invoice: Option<Duration>,
    /// CPU seconds of the consumer's process over `elapsed`: the bench's
    /// own for in-process consumers, the Python process's (every thread)
    /// for mq-bridge.
    pub(crate) consumer_cpu: f64,
    /// Busy share of the machine's cores over `elapsed`, in percent.
    pub(crate) machine_busy: f64,
}

/// A run of an in-process consumer being timed: from its start, with the
/// bench's own CPU, the machine's and the first invoice's commit.
pub(crate) struct Stopwatch {
    started: std::time::Instant,
    cpu_before: f64,
    machine: crate::cpu::MachineSample,
    first: tokio::task::JoinHandle<std::time::Instant>,
}

impl Stopwatch {
    /// Start timing a consumer that writes into `pool`'s database.
    pub(crate) fn start(pool: &sqlx::PgPool) -> Stopwatch {
        let first = tokio::spawn(crate::database::first_invoice(pool.clone()));
        Stopwatch {
            machine: crate::cpu::MachineSample::now(),
            cpu_before: crate::cpu::own_seconds(),
            started: std::time::Instant::now(),
            first,
        }
    }

    /// The consumer settled its last delivery now.
    pub(crate) async fn stop(self) -> Measured {
        let ended = std::time::Instant::now();
        let consumer_cpu = crate::cpu::own_seconds() - self.cpu_before;
        let machine_busy = self.machine.busy_percent_since();
        self.first.abort();
        let first = self.first.await.ok();
        Measured {
            elapsed: ended - self.started,
            from_first_invoice: first.map(|first| ended.saturating_duration_since(first)),
            consumer_cpu,
            machine_busy,
        }
    }
}

/// The runs of every case, by round.
pub(crate) struct Report {
    deliveries: u64,
    rounds: usize,
    runs: Vec<(Broker, Case, usize, Measured)>,
}

impl Report {
    pub(crate) fn new(deliveries: u64, rounds: usize) -> Report {
        Report {
            deliveries,
            rounds,
            runs: Vec::new(),
        }
    }

    pub(crate) fn add(&mut self, broker: Broker, case: Case, round: usize, measured: Measured) {
        self.runs.push((broker, case, round, measured));
    }

    fn run(&self, broker: Broker, case: Case, round: usize) -> Option<&Measured> {
        self.runs
            .iter()
            .find(|(b, c, r, _)| *b == broker && *c == case && *r == round)
            .map(|(_, _, _, measured)| measured)
    }

    fn rate(&self, measured: &Measured) -> f64 {
        self.deliveries as f64 / measured.elapsed.as_secs_f64()
    }

    /// The markdown table of `broker`'s cases, or `None` when none ran.
    pub(crate) fn table(&self, broker: Broker) -> Option<String> {
        let reference = Case::reference(broker);
        let cases: Vec<Case> = Case::of(broker)
            .iter()
            .copied()
            .filter(|case| (1..=self.rounds).any(|round| self.run(broker, *case, round).is_some()))
            .collect();
        if cases.is_empty() {
            return None;
        }
        let mut out = format!(
            "{broker}: {} deliveries per run, deliveries/s from the consumer's start to its last delivery settled\n\n\
             | consumer | deliveries/s per round | median | ratio to {} per round | median ratio | \
             from the first invoice, median | consumer CPU µs/delivery, median | machine busy %, median |\n\
             |---|---|---|---|---|---|---|---|\n",
            self.deliveries,
            reference.key(),
        );
        for case in cases {
            let runs: Vec<Option<&Measured>> = (1..=self.rounds)
                .map(|round| self.run(broker, case, round))
                .collect();
            let rates: Vec<Option<f64>> = runs
                .iter()
                .map(|run| run.map(|measured| self.rate(measured)))
                .collect();
            let ratios: Vec<Option<f64>> = (1..=self.rounds)
                .zip(&rates)
                .map(|(round, rate)| {
                    let reference = self.run(broker, reference, round)?;
                    Some(rate.as_ref()? / self.rate(reference))
                })
                .collect();
            let first: Vec<f64> = runs
                .iter()
                .flatten()
                .filter_map(|measured| {
                    let from_first = measured.from_first_invoice?.as_secs_f64();
                    Some(self.deliveries as f64 / from_first)
                })
                .collect();
            let cpu: Vec<f64> = runs
                .iter()
                .flatten()
                .map(|measured| 1e6 * measured.consumer_cpu / self.deliveries as f64)
                .collect();
            let busy: Vec<f64> = runs
                .iter()
                .flatten()
                .map(|measured| measured.machine_busy)
                .collect();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                case.label(),
                join(&rates, |rate| format!("{rate:.0}")),
                median(&rates.iter().flatten().copied().collect::<Vec<_>>())
                    .map_or_else(|| "-".to_owned(), |rate| format!("**{rate:.0}**")),
                join(&ratios, |ratio| format!("{ratio:.2}")),
                median(&ratios.iter().flatten().copied().collect::<Vec<_>>())
                    .map_or_else(|| "-".to_owned(), |ratio| format!("**{ratio:.2}**")),
                median(&first).map_or_else(|| "-".to_owned(), |rate| format!("{rate:.0}/s")),
                median(&cpu).map_or_else(|| "-".to_owned(), |micros| format!("{micros:.0}")),
                median(&busy).map_or_else(|| "-".to_owned(), |busy| format!("{busy:.0}")),
            ));
        }
        Some(out)
    }
}

/// The values, `-` for a round that did not run.
fn join(values: &[Option<f64>], show: impl Fn(f64) -> String) -> String {
    values
        .iter()
        .map(|value| value.map_or_else(|| "-".to_owned(), &show))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The median (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    })
}
