//! A Prometheus histogram read from the relay's `/metrics`: its cumulative
//! buckets, the difference of two readings (the observations between them),
//! and quantiles interpolated within a bucket as PromQL's
//! `histogram_quantile` does.

/// The cumulative buckets of one histogram at one reading.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Buckets {
    /// `(le, observations ≤ le)`, by increasing `le`; the last is `+Inf`
    /// when the histogram was found.
    bounds: Vec<(f64, f64)>,
}

impl Buckets {
    /// The `name_bucket{le="…"}` samples of `name` in a Prometheus text
    /// exposition; empty when it has none.
    pub(crate) fn parse(metrics: &str, name: &str) -> Buckets {
        let prefix = format!("{name}_bucket{{");
        let mut bounds: Vec<(f64, f64)> = metrics
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(&prefix)?;
                let (labels, value) = rest.split_once("} ")?;
                let le = labels
                    .split(',')
                    .find_map(|label| label.trim().strip_prefix("le="))?
                    .trim_matches('"');
                let le = match le {
                    "+Inf" => f64::INFINITY,
                    finite => finite.parse().ok()?,
                };
                Some((le, value.trim().parse().ok()?))
            })
            .collect();
        bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
        Buckets { bounds }
    }

    /// The observations since `earlier`, a reading of the same histogram.
    pub(crate) fn since(&self, earlier: &Buckets) -> Buckets {
        let bounds = self
            .bounds
            .iter()
            .map(|&(le, count)| {
                let before = earlier
                    .bounds
                    .iter()
                    .find(|(other, _)| *other == le)
                    .map_or(0.0, |&(_, count)| count);
                (le, (count - before).max(0.0))
            })
            .collect();
        Buckets { bounds }
    }

    /// Observations in all: the `+Inf` bucket's.
    pub(crate) fn count(&self) -> f64 {
        match self.bounds.last() {
            Some(&(le, count)) if le == f64::INFINITY => count,
            _ => 0.0,
        }
    }

    /// The `fraction` quantile (0 to 1), as `histogram_quantile` computes
    /// it: the bucket holding the rank `fraction × count`, and a linear
    /// interpolation between its lower and upper bounds (the first
    /// bucket's lower bound is 0). A quantile in the `+Inf` bucket is the
    /// highest finite bound. `None` without observations or without the
    /// `+Inf` bucket.
    pub(crate) fn quantile(&self, fraction: f64) -> Option<f64> {
        let total = self.count();
        if total <= 0.0 || self.bounds.len() < 2 || !(0.0..=1.0).contains(&fraction) {
            return None;
        }
        let rank = fraction * total;
        let index = self.bounds.iter().position(|&(_, count)| count >= rank)?;
        if index == self.bounds.len() - 1 {
            return Some(self.bounds[index - 1].0);
        }
        let (upper, cumulative) = self.bounds[index];
        let (lower, below) = match index {
            0 => (0.0, 0.0),
            _ => self.bounds[index - 1],
        };
        let within = cumulative - below;
        if within <= 0.0 {
            return Some(upper);
        }
        Some(lower + (upper - lower) * (rank - below) / within)
    }
}

/// The unit tests of this module, run by `cargo test -p outbox-relay
/// --bench relay_binary` (the bench has no test harness; see `main.rs`).
pub(crate) mod tests {
    use super::Buckets;

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] = &[
        (
            "histogram::quantile_interpolates_within_the_bucket",
            quantile_interpolates_within_the_bucket,
        ),
        (
            "histogram::quantile_beyond_the_last_finite_bound",
            quantile_beyond_the_last_finite_bound,
        ),
        ("histogram::parse_and_difference", parse_and_difference),
    ];

    fn close(actual: Option<f64>, expected: f64) {
        let actual = actual.expect("a quantile");
        assert!(
            (actual - expected).abs() < 1e-12,
            "expected {expected}, got {actual}"
        );
    }

    fn buckets(bounds: &[(f64, f64)]) -> Buckets {
        Buckets {
            bounds: bounds.to_vec(),
        }
    }

    fn quantile_interpolates_within_the_bucket() {
        // 10 observations ≤ 1 ms, 50 in (1, 2] ms, 30 in (2, 5] ms, 10 in
        // (5, 10] ms.
        let histogram = buckets(&[
            (0.001, 10.0),
            (0.002, 60.0),
            (0.005, 90.0),
            (0.01, 100.0),
            (f64::INFINITY, 100.0),
        ]);
        assert_eq!(histogram.count(), 100.0);
        // Rank 50: the 40th of the 50 in (1, 2] ms.
        close(histogram.quantile(0.5), 0.0018);
        // Rank 99: the 9th of the 10 in (5, 10] ms.
        close(histogram.quantile(0.99), 0.0095);
        // Rank 5, in the first bucket: from 0.
        close(histogram.quantile(0.05), 0.0005);
        // Rank 90 ends the (2, 5] ms bucket: its upper bound.
        close(histogram.quantile(0.9), 0.005);
        close(histogram.quantile(1.0), 0.01);
        assert_eq!(histogram.quantile(1.5), None);
        assert_eq!(
            buckets(&[(0.001, 0.0), (f64::INFINITY, 0.0)]).quantile(0.5),
            None
        );
    }

    fn quantile_beyond_the_last_finite_bound() {
        let histogram = buckets(&[(0.001, 10.0), (0.005, 90.0), (f64::INFINITY, 100.0)]);
        // Rank 99 is among the 10 above 5 ms: the highest finite bound.
        close(histogram.quantile(0.99), 0.005);
        // Rank 50: the 40th of the 80 in (1, 5] ms.
        close(histogram.quantile(0.5), 0.003);
    }

    fn parse_and_difference() {
        let before = "\
# HELP outbox_relay_commit_to_ack_seconds Time from an event's commit (logical source) or created_at (polling) to the broker's acknowledgement.
# TYPE outbox_relay_commit_to_ack_seconds histogram
outbox_relay_commit_to_ack_seconds_bucket{le=\"0.001\"} 3
outbox_relay_commit_to_ack_seconds_bucket{le=\"0.002\"} 4
outbox_relay_commit_to_ack_seconds_bucket{le=\"+Inf\"} 5
outbox_relay_commit_to_ack_seconds_sum 0.01
outbox_relay_commit_to_ack_seconds_count 5
outbox_relay_batch_publish_seconds_bucket{le=\"0.001\"} 7
";
        let after = "\
outbox_relay_commit_to_ack_seconds_bucket{le=\"0.001\"} 13
outbox_relay_commit_to_ack_seconds_bucket{le=\"0.002\"} 64
outbox_relay_commit_to_ack_seconds_bucket{le=\"+Inf\"} 105
outbox_relay_commit_to_ack_seconds_count 105
";
        let name = "outbox_relay_commit_to_ack_seconds";
        let start = Buckets::parse(before, name);
        assert_eq!(
            start,
            buckets(&[(0.001, 3.0), (0.002, 4.0), (f64::INFINITY, 5.0)])
        );
        let window = Buckets::parse(after, name).since(&start);
        assert_eq!(
            window,
            buckets(&[(0.001, 10.0), (0.002, 60.0), (f64::INFINITY, 100.0)])
        );
        assert_eq!(window.count(), 100.0);
        // Rank 50: the 40th of the 50 in (1, 2] ms.
        close(window.quantile(0.5), 0.0018);
        assert_eq!(Buckets::parse("", name).quantile(0.5), None);
    }
}
