//! CPU time from `/proc` (Linux): a process's own (every thread), and the
//! whole machine's busy share, between two samples.

use std::sync::OnceLock;

/// Clock ticks per second of `/proc`'s CPU times (`getconf CLK_TCK`; 100
/// when it cannot be read).
fn ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8(output.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds (user + system, every thread) this process has used.
pub(crate) fn own_seconds() -> f64 {
    process_seconds("self")
}

/// CPU seconds (user + system, every thread) process `pid` has used.
pub(crate) fn process_seconds(pid: &str) -> f64 {
    let path = format!("/proc/{pid}/stat");
    let line =
        std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {path}: {error}"));
    // Fields 14 and 15 of proc(5), after the command name in parentheses.
    let after_name = line
        .rfind(')')
        .and_then(|close| line.get(close + 1..))
        .unwrap_or_else(|| panic!("not a stat line in {path}: {line}"));
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let number = |index: usize| -> f64 {
        fields
            .get(index)
            .and_then(|text| text.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no utime and stime in {path}: {line}")) as f64
    };
    (number(11) + number(12)) / ticks_per_second()
}

/// The machine's CPU time: (busy, total) in ticks, from `/proc/stat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MachineSample {
    busy: u64,
    total: u64,
}

impl MachineSample {
    pub(crate) fn now() -> MachineSample {
        let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
        let times: Vec<u64> = stat
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("cpu "))
            .expect("the cpu line of /proc/stat")
            .split_whitespace()
            .filter_map(|text| text.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest is in user).
        let total: u64 = times.iter().take(8).sum();
        let idle = times.get(3).copied().unwrap_or(0) + times.get(4).copied().unwrap_or(0);
        MachineSample {
            busy: total - idle,
            total,
        }
    }

    /// The share of every core that was busy since `self`, in percent.
    pub(crate) fn busy_percent_since(self) -> f64 {
        let later = MachineSample::now();
        let total = later.total.saturating_sub(self.total).max(1) as f64;
        100.0 * later.busy.saturating_sub(self.busy) as f64 / total
    }
}
