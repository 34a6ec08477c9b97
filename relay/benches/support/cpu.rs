//! CPU time spent by the processes of one benchmark scenario, read from
//! `/proc` (Linux): the client (the relay, in this process or as a child
//! process, or the raw client), every PostgreSQL process, and the broker. Between two samples it gives the
//! CPU cost of each side per event, which is what bounds the relay's rate
//! on a machine whose cores are all busy.

use std::time::Instant;

/// Cumulative CPU seconds at one instant.
#[derive(Debug, Clone, Copy)]
pub struct CpuSample {
    at: Instant,
    client: f64,
    postgres: f64,
    broker: f64,
    machine_busy: f64,
}

/// CPU seconds spent between two samples.
#[derive(Debug, Clone, Copy)]
pub struct CpuSpent {
    pub wall: f64,
    pub client: f64,
    pub postgres: f64,
    pub broker: f64,
    /// Every process of the machine, from `/proc/stat`.
    pub machine_busy: f64,
}

/// Clock ticks per second of `/proc`'s CPU times (`getconf CLK_TCK`; 100
/// when it cannot be read).
pub fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|output| String::from_utf8(output.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `(comm, utime + stime, cutime + cstime)` of a `/proc/<pid>/stat` line, in
/// ticks. The command name is in parentheses and may hold spaces.
pub fn parse_stat(line: &str) -> Option<(String, u64, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // Fields 14-17 of proc(5); `fields[0]` is field 3 (state).
    let number = |index: usize| fields.get(index).and_then(|text| text.parse::<u64>().ok());
    let own = number(11)? + number(12)?;
    let children = number(13)? + number(14)?;
    Some((comm, own, children))
}

/// Whether a PostgreSQL process counts for `database`: a client backend
/// of that database (its title is `postgres: [CLUSTER: ]USER DATABASE
/// HOST(PORT) ...`), a WAL sender (`walsender USER HOST(PORT) ...`, no
/// database in its title: logical decoding runs in it, and during a bench
/// the only one streaming is the relay's), or a process of the server's
/// own (no client address in its title). The postmaster (its command line
/// is the binary's path) is left out: its reaped children were other
/// databases' backends.
fn counts_for(process: &std::path::Path, database: &str) -> bool {
    let Ok(raw) = std::fs::read(process.join("cmdline")) else {
        return false;
    };
    let title = String::from_utf8_lossy(&raw).replace('\0', " ");
    let Some(rest) = title.strip_prefix("postgres: ") else {
        return false;
    };
    // After the cluster name, when the server has one (`15/main: `).
    let rest = rest.split_once(": ").map_or(rest, |(_, after)| after);
    if rest.starts_with("walsender ") {
        return true;
    }
    let client_backend = rest.contains('(') || rest.contains("[local]");
    !client_backend || rest.split_whitespace().nth(1) == Some(database)
}

/// Busy ticks of all cores, from the first line of `/proc/stat`.
fn machine_busy_ticks() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = text.lines().next() else {
        return 0;
    };
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|value| value.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    total.saturating_sub(idle)
}

/// Sample the CPU time of the process `client_pid` (the relay or the raw
/// client; `std::process::id()` when it runs in this process), of every
/// `postgres` process (the children it has reaped included, so backends
/// that exit are counted) and of every process whose name starts with one
/// of `broker_names`.
pub fn sample(client_pid: u32, broker_names: &[&str]) -> CpuSample {
    sample_for_database(client_pid, broker_names, None)
}

/// [`sample`], counting of PostgreSQL's client backends only those of the
/// database `database` when it is given (on a server other work shares),
/// and every other PostgreSQL process (WAL writer, checkpointer, ...).
pub fn sample_for_database(
    client_pid: u32,
    broker_names: &[&str],
    database: Option<&str>,
) -> CpuSample {
    let ticks = clock_ticks_per_second();
    let mut client = 0;
    let mut postgres = 0;
    let mut broker = 0;
    let client_pid = client_pid.to_string();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str() else { continue };
            if !pid.bytes().all(|byte| byte.is_ascii_digit()) {
                continue;
            }
            let Ok(line) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let Some((comm, own, children)) = parse_stat(&line) else {
                continue;
            };
            if pid == client_pid {
                client += own;
            } else if comm == "postgres" {
                match database {
                    None => postgres += own + children,
                    Some(database) => {
                        if counts_for(&entry.path(), database) {
                            postgres += own;
                        }
                    }
                }
            } else if broker_names.iter().any(|prefix| comm.starts_with(prefix)) {
                broker += own;
            }
        }
    }
    CpuSample {
        at: Instant::now(),
        client: client as f64 / ticks,
        postgres: postgres as f64 / ticks,
        broker: broker as f64 / ticks,
        machine_busy: machine_busy_ticks() as f64 / ticks,
    }
}

impl CpuSample {
    /// CPU spent from `self` until `later`.
    pub fn until(&self, later: &CpuSample) -> CpuSpent {
        CpuSpent {
            wall: (later.at - self.at).as_secs_f64(),
            client: later.client - self.client,
            postgres: later.postgres - self.postgres,
            broker: later.broker - self.broker,
            machine_busy: later.machine_busy - self.machine_busy,
        }
    }
}

impl CpuSpent {
    /// One line: CPU microseconds per event of each side, and how busy the
    /// machine's cores were.
    pub fn per_event(&self, events: u64) -> String {
        self.per_event_named(events, "this process")
    }

    /// [`CpuSpent::per_event`], naming the client `client`.
    pub fn per_event_named(&self, events: u64, client: &str) -> String {
        let micros = |seconds: f64| seconds * 1e6 / events.max(1) as f64;
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        format!(
            "cpu per event: {client} {:.1} µs, postgres {:.1} µs, broker {:.1} µs, all three {:.1} µs; machine {:.0}% busy of {} cores over {:.2} s",
            micros(self.client),
            micros(self.postgres),
            micros(self.broker),
            micros(self.client + self.postgres + self.broker),
            100.0 * self.machine_busy / (self.wall * cores).max(f64::EPSILON),
            cores,
            self.wall
        )
    }
}

pub mod tests {
    use super::parse_stat;

    /// Every test, by name.
    pub const ALL: &[(&str, fn())] = &[(
        "cpu::parse_stat_adds_utime_and_stime",
        parse_stat_adds_utime_and_stime,
    )];

    fn parse_stat_adds_utime_and_stime() {
        let line = "4242 (postgres: x (y)) S 1 4242 4242 0 -1 4194560 4331 0 0 0 \
                    117 23 5 2 20 0 1 0 5000 225000000 2000 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(("postgres: x (y)".to_owned(), 140, 7))
        );
        assert_eq!(parse_stat("garbage"), None);
    }
}
