//! The library's modules form layers that only point down: a module of
//! `relay/src` imports (`crate::<module>`) only the modules listed before
//! it in [`LAYERS`], so no import runs upward and no two modules import
//! each other. The binary (`src/bin/`) sits above them all and uses the
//! public API only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The top-level modules of `relay/src`, from the bottom up. The order is
/// the design: the event model and errors, then the store and the
/// publishers, then the sources and leases, then the batch loop, then
/// operator work and HTTP, then the relay's assembly, then configuration.
const LAYERS: &[&str] = &[
    "error", "tasks", "event", "store", "publish", "leases", "source", "batch", "operator", "http",
    "relay", "config", "service", "admin",
];

/// Crates only the binary may use: the library leaves them to the program
/// that embeds it.
const BINARY_ONLY_CRATES: &[&str] = &["clap::", "tracing_subscriber::", "mimalloc::"];

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a directory of relay/src") {
        let path = entry.expect("read a directory entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == "bin") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of the library belongs to (`None` for
/// `lib.rs`, which only declares and re-exports).
fn module_of(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(source_root()).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

/// The top-level modules a line of code names through `crate::`, in
/// either form: `crate::store::X` or `crate::{store::X, event::Y}`.
fn modules_named(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (start, _) in code.match_indices("crate::") {
        if code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        {
            continue;
        }
        let rest = &code[start + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        named.insert(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            named.insert(first_segment(&item));
        } else {
            named.insert(first_segment(rest));
        }
    }
    named.remove("");
    named
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Every `crate::` name of the library that breaks the layers, as
/// `file:line: module -> module`.
fn upward_imports() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&source_root(), &mut files);
    files.sort();
    let rank = |module: &str| LAYERS.iter().position(|layer| *layer == module);
    let mut broken = Vec::new();
    for file in files {
        let Some(module) = module_of(&file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let display = file
            .strip_prefix(source_root())
            .unwrap_or(&file)
            .display()
            .to_string();
        let Some(own_rank) = rank(&module) else {
            broken.push(format!("{display}: module `{module}` is not in LAYERS"));
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for named in modules_named(code) {
                if named == module || named == "self" {
                    continue;
                }
                // The crate root's re-exports (`crate::Error`) hide where a
                // name lives: the library names the module instead.
                match rank(&named) {
                    Some(named_rank) if named_rank < own_rank => {}
                    Some(_) => broken.push(format!(
                        "{display}:{}: `{module}` imports `{named}`, a layer above or beside it",
                        number + 1
                    )),
                    None => broken.push(format!(
                        "{display}:{}: `{module}` names `crate::{named}`, not a module of LAYERS",
                        number + 1
                    )),
                }
            }
            for crate_name in BINARY_ONLY_CRATES {
                if code.contains(crate_name) {
                    broken.push(format!(
                        "{display}:{}: the library uses `{crate_name}`, which only the binary may",
                        number + 1
                    ));
                }
            }
        }
    }
    broken
}

#[test]
fn library_modules_import_only_the_layers_below_them() {
    let broken = upward_imports();
    assert!(
        broken.is_empty(),
        "imports against the layers of relay/src (see LAYERS in {}):\n{}",
        file!(),
        broken.join("\n")
    );
}

#[test]
fn every_top_level_module_is_in_a_layer() {
    let mut modules = BTreeSet::new();
    let mut files = Vec::new();
    rust_files(&source_root(), &mut files);
    for file in files {
        if let Some(module) = module_of(&file) {
            modules.insert(module);
        }
    }
    let layered: BTreeSet<String> = LAYERS.iter().map(|layer| (*layer).to_owned()).collect();
    assert_eq!(
        modules, layered,
        "the top-level modules of relay/src against LAYERS"
    );
}

/// The check itself catches what it is for: an upward import, a circle
/// through the grouped form, a root re-export.
#[test]
fn the_check_reads_every_form_of_crate_path() {
    assert_eq!(
        modules_named("use crate::{store::Lease, event::{A, B}};"),
        BTreeSet::from(["event".to_owned(), "store".to_owned()])
    );
    assert_eq!(
        modules_named("    let x = crate::source::logical::DEFAULT_SLOT;"),
        BTreeSet::from(["source".to_owned()])
    );
    assert_eq!(
        modules_named("use outbox_relay::crate_like::x; use mycrate::y;"),
        BTreeSet::new()
    );
    assert_eq!(
        modules_named("use crate::Error;"),
        BTreeSet::from(["Error".to_owned()])
    );
}
