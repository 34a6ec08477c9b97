//! Whether a consumer got every event of a backlog exactly once, and each
//! aggregate's events in the order they were written: its deliveries (event
//! ids in the order they came) against the events as the table holds them.

use std::collections::HashMap;

/// One event as written: its id and aggregate, in the table's id order.
pub(crate) struct Written {
    pub(crate) event_id: String,
    pub(crate) aggregate_id: String,
}

/// What the deliveries of a backlog came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeliveryCheck {
    /// Events written.
    pub(crate) written: u64,
    /// Deliveries in all, duplicates included.
    pub(crate) delivered: u64,
    /// Events written and never delivered.
    pub(crate) missing: u64,
    /// Deliveries of an event already delivered.
    pub(crate) duplicates: u64,
    /// Deliveries of an id that was never written.
    pub(crate) unknown: u64,
    /// First deliveries that came after a later event of their aggregate.
    pub(crate) out_of_order: u64,
}

impl DeliveryCheck {
    /// Every event delivered once, each aggregate's in order.
    pub(crate) fn passed(&self) -> bool {
        self.missing == 0 && self.duplicates == 0 && self.unknown == 0 && self.out_of_order == 0
    }

    /// One phrase, for the tables.
    pub(crate) fn describe(&self) -> String {
        let mut text = format!(
            "{} of {} delivered; {} missing, {} duplicated, {} out of order",
            self.delivered, self.written, self.missing, self.duplicates, self.out_of_order
        );
        if self.unknown > 0 {
            text.push_str(&format!(", {} never written", self.unknown));
        }
        text
    }
}

/// Check `deliveries` against `written` (in the table's id order, which is
/// each aggregate's order: the backlog is written by one session).
pub(crate) fn check(written: &[Written], deliveries: &[String]) -> DeliveryCheck {
    let position: HashMap<&str, (usize, &str)> = written
        .iter()
        .enumerate()
        .map(|(index, event)| {
            (
                event.event_id.as_str(),
                (index, event.aggregate_id.as_str()),
            )
        })
        .collect();
    let mut seen = vec![false; written.len()];
    let mut latest: HashMap<&str, usize> = HashMap::new();
    let mut result = DeliveryCheck {
        written: written.len() as u64,
        delivered: deliveries.len() as u64,
        ..DeliveryCheck::default()
    };
    for id in deliveries {
        let Some(&(index, aggregate)) = position.get(id.as_str()) else {
            result.unknown += 1;
            continue;
        };
        if seen[index] {
            // A redelivery is counted as a duplicate, not as disorder.
            result.duplicates += 1;
            continue;
        }
        seen[index] = true;
        let latest = latest.entry(aggregate).or_insert(index);
        if *latest > index {
            result.out_of_order += 1;
        } else {
            *latest = index;
        }
    }
    result.missing = seen.iter().filter(|&&delivered| !delivered).count() as u64;
    result
}

pub(crate) mod tests {
    use super::{DeliveryCheck, Written, check};

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] = &[
        (
            "deliveries::each_aggregate_in_order_passes",
            each_aggregate_in_order_passes,
        ),
        (
            "deliveries::missing_duplicated_and_unknown",
            missing_duplicated_and_unknown,
        ),
        (
            "deliveries::out_of_order_within_an_aggregate",
            out_of_order_within_an_aggregate,
        ),
    ];

    /// Events `e0`, `e1`, ... of aggregates `a`, `b`, `a`, `b`, ...
    fn written(count: usize) -> Vec<Written> {
        (0..count)
            .map(|index| Written {
                event_id: format!("e{index}"),
                aggregate_id: if index % 2 == 0 { "a" } else { "b" }.to_owned(),
            })
            .collect()
    }

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn each_aggregate_in_order_passes() {
        // Aggregate b's events before a's: another partition, still in order.
        let result = check(&written(4), &ids(&["e1", "e3", "e0", "e2"]));
        assert!(result.passed(), "{result:?}");
        assert_eq!(result.delivered, 4);
    }

    fn missing_duplicated_and_unknown() {
        let result = check(&written(4), &ids(&["e0", "e1", "e0", "e2", "x"]));
        assert_eq!(
            result,
            DeliveryCheck {
                written: 4,
                delivered: 5,
                missing: 1,
                duplicates: 1,
                unknown: 1,
                out_of_order: 0,
            }
        );
        assert!(!result.passed());
        assert!(result.describe().contains("1 never written"));
    }

    fn out_of_order_within_an_aggregate() {
        // e2 before e0, both of aggregate a; e4 after e2 is in order again.
        let result = check(&written(6), &ids(&["e2", "e0", "e1", "e4", "e3", "e5"]));
        assert_eq!(result.out_of_order, 1, "{result:?}");
        assert_eq!(result.missing, 0);
        assert!(!result.passed());
    }
}
