//! The metric names the relay exports, read from its own metrics text so
//! that a renamed metric breaks the board and rule checks.

use std::collections::BTreeSet;

use outbox_relay::RelayMetrics;

/// Every series name in the relay's `/metrics` text (histograms with
/// their `_bucket`, `_sum` and `_count`). Labelled families appear only
/// once a label value was used, so each is touched once first.
pub fn exported_metric_names() -> BTreeSet<String> {
    let metrics = RelayMetrics::new();
    metrics.record_published("orders", 1);
    metrics.record_failed("orders");
    metrics.record_retried("orders");
    metrics.record_dead_lettered("orders");
    metrics.record_published_out_of_order("orders");
    let text = metrics.encode().expect("encode the relay's metrics");
    series_names(&text)
}

/// The series names of a Prometheus text exposition.
pub fn series_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// Every metric name that `queries` (source, PromQL) select and the
/// relay does not export.
pub fn unknown_metric_problems<'a>(
    queries: impl IntoIterator<Item = (&'a str, &'a str)>,
    exported: &BTreeSet<String>,
) -> Vec<String> {
    queries
        .into_iter()
        .flat_map(|(source, expr)| {
            super::promql::metric_names(expr)
                .into_iter()
                .filter(|name| !exported.contains(name))
                .map(move |name| format!("{source}: {name} is not a metric the relay exports"))
        })
        .collect()
}
