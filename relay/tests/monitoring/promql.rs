//! The metric names a PromQL expression selects, read with a small
//! tokenizer: every identifier in a selector's position, leaving out
//! functions, aggregations, keywords, label matchers, label lists of
//! `by`/`on`/..., ranges, strings, numbers and Grafana's `$variables`.

use std::collections::BTreeSet;

/// Keywords that are never a metric name: aggregations, binary
/// operators, modifiers and literals.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "and",
    "or",
    "unless",
    "atan2",
    "offset",
    "bool",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LIST_KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names `expression` selects.
pub fn metric_names(expression: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expression.chars().collect();
    let mut names = BTreeSet::new();
    let mut at = 0;
    while at < chars.len() {
        let current = chars[at];
        match current {
            '"' | '\'' | '`' => at = after_string(&chars, at),
            '{' => at = after_group(&chars, at, '{', '}'),
            '[' => at = after_group(&chars, at, '[', ']'),
            '#' => {
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
            }
            '$' => {
                at += 1;
                if chars.get(at) == Some(&'{') {
                    at = after_group(&chars, at, '{', '}');
                } else {
                    while at < chars.len() && is_identifier_char(chars[at]) {
                        at += 1;
                    }
                }
            }
            _ if current.is_ascii_digit() || current == '.' => {
                while at < chars.len() && (chars[at].is_ascii_alphanumeric() || chars[at] == '.') {
                    at += 1;
                }
            }
            _ if current.is_ascii_alphabetic() || current == '_' || current == ':' => {
                let start = at;
                while at < chars.len() && is_identifier_char(chars[at]) {
                    at += 1;
                }
                let identifier: String = chars[start..at].iter().collect();
                let lower = identifier.to_ascii_lowercase();
                let next = next_non_space(&chars, at);
                if LABEL_LIST_KEYWORDS.contains(&lower.as_str()) {
                    if let Some(open) = next.filter(|&open| chars[open] == '(') {
                        at = after_group(&chars, open, '(', ')');
                    }
                } else if KEYWORDS.contains(&lower.as_str())
                    || next.is_some_and(|open| chars[open] == '(')
                {
                    // An aggregation, operator or function.
                } else {
                    names.insert(identifier);
                }
            }
            _ => at += 1,
        }
    }
    names
}

fn is_identifier_char(character: char) -> bool {
    character.is_ascii_alphanumeric() || character == '_' || character == ':'
}

fn next_non_space(chars: &[char], from: usize) -> Option<usize> {
    (from..chars.len()).find(|&at| !chars[at].is_whitespace())
}

/// The index after the string opening at `at`.
fn after_string(chars: &[char], at: usize) -> usize {
    let quote = chars[at];
    let mut at = at + 1;
    while at < chars.len() {
        match chars[at] {
            '\\' if quote != '`' => at += 2,
            character if character == quote => return at + 1,
            _ => at += 1,
        }
    }
    at
}

/// The index after the group opening at `at`, skipping strings and
/// nested groups.
fn after_group(chars: &[char], at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut at = at;
    while at < chars.len() {
        match chars[at] {
            '"' | '\'' | '`' => {
                at = after_string(chars, at);
                continue;
            }
            character if character == open => depth += 1,
            character if character == close => {
                depth -= 1;
                if depth == 0 {
                    return at + 1;
                }
            }
            _ => {}
        }
        at += 1;
    }
    at
}
