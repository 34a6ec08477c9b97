//! How events spread over aggregates: the aggregate id of each event,
//! drawn from a seeded generator so every run writes the same keys.

/// A distribution of aggregate ids.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KeyDistribution {
    /// Each event's aggregate drawn uniformly from `aggregates`.
    Uniform { aggregates: u64 },
    /// Aggregate `k` (1-based) drawn with probability ∝ 1 / k^`exponent`.
    Zipf { aggregates: u64, exponent: f64 },
}

impl KeyDistribution {
    /// How it is printed in the results.
    pub(crate) fn label(&self) -> String {
        match self {
            KeyDistribution::Uniform { aggregates: 1 } => "1 aggregate".to_owned(),
            KeyDistribution::Uniform { aggregates } => {
                format!("uniform over {aggregates} aggregates")
            }
            KeyDistribution::Zipf {
                aggregates,
                exponent,
            } => format!("Zipf (s = {exponent}) over {aggregates} aggregates"),
        }
    }
}

/// Draws aggregate ids (`s-<n>`) from a [`KeyDistribution`].
pub(crate) struct Keys {
    state: u64,
    aggregates: u64,
    /// Cumulative probabilities of the Zipf ranks; empty when uniform.
    cumulative: Vec<f64>,
}

impl Keys {
    pub(crate) fn new(distribution: KeyDistribution, seed: u64) -> Keys {
        let (aggregates, cumulative) = match distribution {
            KeyDistribution::Uniform { aggregates } => (aggregates.max(1), Vec::new()),
            KeyDistribution::Zipf {
                aggregates,
                exponent,
            } => {
                let weights: Vec<f64> = (1..=aggregates.max(1))
                    .map(|rank| (rank as f64).powf(-exponent))
                    .collect();
                let total: f64 = weights.iter().sum();
                let mut running = 0.0;
                let cumulative = weights
                    .iter()
                    .map(|weight| {
                        running += weight / total;
                        running
                    })
                    .collect();
                (aggregates.max(1), cumulative)
            }
        };
        Keys {
            state: seed,
            aggregates,
            cumulative,
        }
    }

    /// SplitMix64.
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next event's aggregate id.
    pub(crate) fn next_aggregate(&mut self) -> String {
        let index = if self.cumulative.is_empty() {
            self.next_u64() % self.aggregates
        } else {
            let draw = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let rank = self.cumulative.partition_point(|&bound| bound < draw);
            rank.min(self.cumulative.len() - 1) as u64
        };
        format!("s-{index}")
    }
}
