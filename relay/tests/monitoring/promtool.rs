//! Running promtool: finding it, and its `check rules` and `test rules`
//! commands, with its output on failure.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's `prometheus` package installs promtool.
const DEBIAN_PROMTOOL: &str = "/usr/bin/promtool";

/// The first of `candidates` that exists, or an error naming the package
/// that brings promtool.
pub fn promtool_among(candidates: &[PathBuf]) -> Result<PathBuf, String> {
    candidates
        .iter()
        .find(|candidate| candidate.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "promtool not found (looked at {candidates:?}): install Debian's `prometheus` \
                 package (`apt-get install prometheus`), as scripts/test.sh does"
            )
        })
}

/// promtool from `PATH`, else Debian's path; panics naming the package
/// when it is in neither, so a machine without it fails rather than skips.
pub fn promtool() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|directory| directory.join("promtool"))
                .collect()
        })
        .unwrap_or_default();
    candidates.push(PathBuf::from(DEBIAN_PROMTOOL));
    promtool_among(&candidates).unwrap_or_else(|message| panic!("{message}"))
}

/// `promtool check rules FILE`: `Err` with promtool's output when the file
/// does not parse or a query is not valid PromQL.
pub fn check_rules(promtool: &Path, rules: &Path) -> Result<(), String> {
    run(promtool, &["check", "rules"], rules)
}

/// `promtool test rules FILE`: `Err` with promtool's output when a test
/// fails.
pub fn test_rules(promtool: &Path, tests: &Path) -> Result<(), String> {
    run(promtool, &["test", "rules"], tests)
}

fn run(promtool: &Path, command: &[&str], file: &Path) -> Result<(), String> {
    let output = Command::new(promtool)
        .args(command)
        .arg(file)
        .output()
        .map_err(|error| format!("running {}: {error}", promtool.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`promtool {} {}` failed ({}):\n{}{}",
            command.join(" "),
            file.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
