//! What the `peers` case prints: each run as it ends, then every pair's
//! rates and ratios, their medians and the targets.

use super::{AGGREGATES, Mode, Pair, PeerSettings, TRANSACTIONS};
use crate::Settings;
use crate::broker::Broker;
use crate::mq_bridge;
use crate::queue_fill::Fill;

/// One run's line, as it ends.
pub(super) fn print_run(label: &str, fill: &Fill, peer: &PeerSettings) {
    println!(
        "  {label}: {:.0} events/s to all {} in the queue ({:.0} ms from the process start), {:.0} events/s from the first message (seen at {:.0} ms, {} in the queue)",
        fill.drain_rate(peer.events),
        peer.events,
        fill.all.as_secs_f64() * 1e3,
        fill.rate_from_first(peer.events),
        fill.first_seen.as_secs_f64() * 1e3,
        fill.first_count
    );
}

/// The middle value; the mean of the two middle ones of an even count.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        length if length % 2 == 0 => (values[middle - 1] + values[middle]) / 2.0,
        _ => values[middle],
    }
}

/// Every pair's rates and ratios, their medians, and the targets.
pub(super) fn print_peers(settings: &Settings, peer: &PeerSettings, modes: &[(Mode, Vec<Pair>)]) {
    println!();
    println!(
        "## Beside mq-bridge {}: {} events, ~{} byte payloads, {AGGREGATES} aggregates, {TRANSACTIONS} transactions, {}",
        mq_bridge::VERSION,
        peer.events,
        settings.payload_bytes,
        Broker::RabbitMq.path()
    );
    println!();
    println!(
        "| mode | pair | relay events/s | mq-bridge events/s | relay / mq-bridge | relay from first | mq-bridge from first | relay / mq-bridge from first |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let n = peer.events;
    let mut verdicts = Vec::new();
    for (mode, pairs) in modes {
        let mut ratios = Vec::new();
        let mut ratios_from_first = Vec::new();
        for (index, pair) in pairs.iter().enumerate() {
            let (relay, bridge) = (pair.relay.drain_rate(n), pair.mq_bridge.drain_rate(n));
            let (relay_first, bridge_first) = (
                pair.relay.rate_from_first(n),
                pair.mq_bridge.rate_from_first(n),
            );
            ratios.push(relay / bridge);
            ratios_from_first.push(relay_first / bridge_first);
            println!(
                "| {} | {} | {relay:.0} | {bridge:.0} | {:.2} | {relay_first:.0} | {bridge_first:.0} | {:.2} |",
                mode.label(),
                index + 1,
                relay / bridge,
                relay_first / bridge_first
            );
        }
        let (ratio, ratio_from_first) = (median(ratios), median(ratios_from_first));
        println!(
            "| {} | median | | | **{ratio:.2}** | | | {ratio_from_first:.2} |",
            mode.label()
        );
        verdicts.push(format!(
            "- {} ({} against {}): median relay / mq-bridge {ratio:.2}, target ≥ {} → {}",
            mode.label(),
            mode.relay(),
            mode.mq_bridge(),
            mode.target(),
            if ratio >= mode.target() {
                "PASS"
            } else {
                "MISS"
            }
        ));
    }
    println!();
    for verdict in verdicts {
        println!("{verdict}");
    }
}
