//! The CPU time of one PostgreSQL backend, read from `/proc` (Linux): the
//! server runs on this machine, so the backend of the bench's connection
//! (`pg_backend_pid()`) is a process the bench can read. `utime + stime`
//! of `/proc/<pid>/stat` count in clock ticks (1/100 s, `getconf
//! CLK_TCK`); `/proc/<pid>/schedstat` counts the same time on the CPU in
//! nanoseconds, which a single fetch of a few milliseconds needs.

use std::ops::{Add, Sub};
use std::path::PathBuf;

use crate::support::cpu::{clock_ticks_per_second, parse_stat};

/// Where one backend's CPU time is read.
pub(crate) struct BackendCpu {
    stat: PathBuf,
    schedstat: PathBuf,
    ticks_per_second: f64,
}

/// CPU seconds of the backend so far, or spent between two readings: by
/// `/proc/<pid>/stat` (`utime + stime`, whole ticks) and by
/// `/proc/<pid>/schedstat` (nanoseconds).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuTime {
    pub(crate) stat_seconds: f64,
    pub(crate) sched_seconds: f64,
}

impl Add for CpuTime {
    type Output = CpuTime;

    fn add(self, other: CpuTime) -> CpuTime {
        CpuTime {
            stat_seconds: self.stat_seconds + other.stat_seconds,
            sched_seconds: self.sched_seconds + other.sched_seconds,
        }
    }
}

impl Sub for CpuTime {
    type Output = CpuTime;

    fn sub(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            stat_seconds: self.stat_seconds - earlier.stat_seconds,
            sched_seconds: self.sched_seconds - earlier.sched_seconds,
        }
    }
}

impl BackendCpu {
    /// The backend with process id `pid`.
    pub(crate) fn new(pid: i32) -> BackendCpu {
        let process = PathBuf::from(format!("/proc/{pid}"));
        BackendCpu {
            stat: process.join("stat"),
            schedstat: process.join("schedstat"),
            ticks_per_second: clock_ticks_per_second(),
        }
    }

    /// The backend's CPU time so far.
    ///
    /// # Panics
    /// When its `/proc` files cannot be read: the server is not on this
    /// machine, or the backend is gone.
    pub(crate) fn read(&self) -> CpuTime {
        let stat = std::fs::read_to_string(&self.stat)
            .unwrap_or_else(|error| panic!("read {}: {error}", self.stat.display()));
        let (_, ticks, _) = parse_stat(&stat)
            .unwrap_or_else(|| panic!("unexpected {}: {stat}", self.stat.display()));
        let schedstat = std::fs::read_to_string(&self.schedstat)
            .unwrap_or_else(|error| panic!("read {}: {error}", self.schedstat.display()));
        let nanos = schedstat_nanos(&schedstat)
            .unwrap_or_else(|| panic!("unexpected {}: {schedstat}", self.schedstat.display()));
        CpuTime {
            stat_seconds: ticks as f64 / self.ticks_per_second,
            sched_seconds: nanos as f64 / 1e9,
        }
    }
}

/// Nanoseconds on the CPU: the first field of `/proc/<pid>/schedstat`.
pub(crate) fn schedstat_nanos(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

pub(crate) mod tests {
    use super::schedstat_nanos;

    /// Every test, by name.
    pub(crate) const ALL: &[(&str, fn())] =
        &[("cpu::schedstat_first_field", schedstat_first_field)];

    fn schedstat_first_field() {
        assert_eq!(
            schedstat_nanos("574411577 522116022 1694\n"),
            Some(574_411_577)
        );
        assert_eq!(schedstat_nanos(""), None);
    }
}
