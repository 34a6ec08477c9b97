//! The relay's rate over time: `/metrics` read at a fixed interval, each
//! reading with the CPU times of the relay, PostgreSQL and the broker.

use std::time::{Duration, Instant};

use crate::relay::{RunningRelay, Scrape};
use crate::support::cpu::{self, CpuSample, CpuSpent};

/// Where the relay runs: its process, its database and the broker's
/// processes, for their CPU times.
pub(crate) struct Watched<'a> {
    pub(crate) relay: &'a RunningRelay,
    pub(crate) database: &'a str,
    pub(crate) broker_processes: &'a [&'a str],
}

/// One reading.
#[derive(Clone, Copy)]
pub(crate) struct Reading {
    pub(crate) at: Instant,
    pub(crate) scrape: Scrape,
    pub(crate) cpu: CpuSample,
}

/// Readings from the relay's start.
pub(crate) struct Series {
    pub(crate) started: Instant,
    pub(crate) readings: Vec<Reading>,
}

/// Read `/metrics` every `interval` until the published counter reaches
/// `target(published)` (asked anew at each reading, for producers still
/// writing) or `limit` passes.
pub(crate) async fn sample_until(
    watched: Watched<'_>,
    started: Instant,
    interval: Duration,
    limit: Duration,
    target: impl Fn(u64) -> u64,
) -> Series {
    let relay = watched.relay;
    let mut readings = Vec::new();
    let mut next = Instant::now();
    loop {
        let scrape = relay.scrape().await;
        let reading = Reading {
            at: Instant::now(),
            scrape,
            cpu: cpu::sample_for_database(
                relay.pid(),
                watched.broker_processes,
                Some(watched.database),
            ),
        };
        readings.push(reading);
        let wanted = target(scrape.published as u64);
        if scrape.published >= wanted as f64 {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "the relay published {} of {} events in {limit:?}",
            scrape.published,
            wanted
        );
        next += interval;
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
    Series { started, readings }
}

impl Series {
    /// When the counter reached `count`, interpolated between readings.
    pub(crate) fn crossing(&self, count: f64) -> Option<Instant> {
        let mut previous: Option<&Reading> = None;
        for reading in &self.readings {
            if reading.scrape.published >= count {
                let Some(before) = previous else {
                    return Some(reading.at);
                };
                let span = reading.scrape.published - before.scrape.published;
                let fraction = if span > 0.0 {
                    (count - before.scrape.published) / span
                } else {
                    1.0
                };
                return Some(
                    before.at + (reading.at - before.at).mul_f64(fraction.clamp(0.0, 1.0)),
                );
            }
            previous = Some(reading);
        }
        None
    }

    /// Events/s between the crossings of `low` and `high` × `total`.
    pub(crate) fn rate_between(&self, total: u64, low: f64, high: f64) -> f64 {
        let (from, to) = (total as f64 * low, total as f64 * high);
        match (self.crossing(from), self.crossing(to)) {
            (Some(start), Some(end)) if end > start => (to - from) / (end - start).as_secs_f64(),
            _ => f64::NAN,
        }
    }

    /// Events/s from the first published event to the last of `total`.
    pub(crate) fn whole_rate(&self, total: u64) -> f64 {
        match (self.crossing(1.0), self.crossing(total as f64)) {
            (Some(first), Some(end)) if end > first => {
                (total - 1) as f64 / (end - first).as_secs_f64()
            }
            _ => f64::NAN,
        }
    }

    /// From the relay's start to its first published event.
    pub(crate) fn first_publish(&self) -> Duration {
        self.crossing(1.0)
            .map_or(Duration::ZERO, |at| at - self.started)
    }

    /// CPU between the readings around the 10% and 90% crossings of
    /// `total`, and the events published between those two readings.
    pub(crate) fn cpu_between(&self, total: u64, low: f64, high: f64) -> (CpuSpent, u64) {
        let first = self
            .readings
            .iter()
            .rposition(|reading| reading.scrape.published <= total as f64 * low)
            .unwrap_or(0);
        let last = self
            .readings
            .iter()
            .position(|reading| reading.scrape.published >= total as f64 * high)
            .unwrap_or(self.readings.len() - 1);
        let (a, b) = (&self.readings[first], &self.readings[last.max(first)]);
        (
            a.cpu.until(&b.cpu),
            (b.scrape.published - a.scrape.published) as u64,
        )
    }
}
