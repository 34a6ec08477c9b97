//! Runbook links: each alert's `runbook_url` must point at a heading of
//! docs/operations.md in the project's repository.

use std::collections::BTreeSet;

use super::rules::{RulesFile, alerts};

/// The anchors GitHub gives the headings of a Markdown document (outside
/// code fences).
pub fn heading_anchors(markdown: &str) -> BTreeSet<String> {
    let mut in_fence = false;
    let mut anchors = BTreeSet::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let title = heading.trim_start_matches('#');
        if title.starts_with(' ') {
            anchors.insert(anchor(title.trim()));
        }
    }
    anchors
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens,
/// punctuation other than `-` and `_` dropped.
pub fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|character| match character {
            ' ' => Some('-'),
            '-' | '_' => Some(character),
            _ if character.is_alphanumeric() => Some(character.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// Every alert whose `runbook_url` is not `{document_url}#anchor` with an
/// anchor among `anchors`.
pub fn runbook_problems(
    rules: &RulesFile,
    document_url: &str,
    anchors: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in alerts(rules) {
        let name = rule.alert.as_deref().unwrap_or_default();
        let Some(url) = rule.annotations.get("runbook_url") else {
            problems.push(format!("{name}: no runbook_url"));
            continue;
        };
        match url
            .strip_prefix(document_url)
            .and_then(|rest| rest.strip_prefix('#'))
        {
            Some(fragment) if anchors.contains(fragment) => {}
            Some(fragment) => problems.push(format!(
                "{name}: runbook anchor #{fragment} is no heading of docs/operations.md"
            )),
            None => problems.push(format!(
                "{name}: runbook_url {url} is not under {document_url}"
            )),
        }
    }
    problems
}
