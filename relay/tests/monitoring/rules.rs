//! The alert rules file and its promtool tests, read as YAML: the alerts
//! with their labels and annotations, and which tests fire each alert or
//! keep it quiet.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// A Prometheus rules file.
#[derive(Debug, Deserialize)]
pub struct RulesFile {
    /// Its rule groups.
    pub groups: Vec<RuleGroup>,
}

/// One group of rules.
#[derive(Debug, Deserialize)]
pub struct RuleGroup {
    /// Alerting and recording rules.
    pub rules: Vec<Rule>,
}

/// An alerting (or recording) rule.
#[derive(Debug, Deserialize)]
pub struct Rule {
    /// The alert's name; `None` for a recording rule.
    pub alert: Option<String>,
    /// Its PromQL expression.
    pub expr: String,
    /// Its labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// A promtool unit test file.
#[derive(Debug, Deserialize)]
pub struct TestFile {
    /// Its tests.
    pub tests: Vec<UnitTest>,
}

/// One promtool unit test.
#[derive(Debug, Deserialize)]
pub struct UnitTest {
    /// Its alert evaluations.
    #[serde(default)]
    pub alert_rule_test: Vec<AlertRuleTest>,
}

/// One evaluation of one alert.
#[derive(Debug, Deserialize)]
pub struct AlertRuleTest {
    /// The alert evaluated.
    pub alertname: String,
    /// The alerts expected to fire; empty for "quiet".
    #[serde(default)]
    pub exp_alerts: Vec<serde_norway::Value>,
}

/// Parse a rules file.
pub fn parse_rules(text: &str) -> Result<RulesFile, String> {
    serde_norway::from_str(text).map_err(|error| format!("rules file: {error}"))
}

/// Parse a promtool test file.
pub fn parse_tests(text: &str) -> Result<TestFile, String> {
    serde_norway::from_str(text).map_err(|error| format!("rules test file: {error}"))
}

/// The alerting rules of `rules`.
pub fn alerts(rules: &RulesFile) -> Vec<&Rule> {
    rules
        .groups
        .iter()
        .flat_map(|group| &group.rules)
        .filter(|rule| rule.alert.is_some())
        .collect()
}

/// Every alert without a test that fires it or without one that keeps it
/// quiet, and every test of an alert the rules do not define.
pub fn coverage_problems(rules: &RulesFile, tests: &TestFile) -> Vec<String> {
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for evaluation in tests.tests.iter().flat_map(|test| &test.alert_rule_test) {
        let name = evaluation.alertname.as_str();
        if evaluation.exp_alerts.is_empty() {
            quiet.insert(name);
        } else {
            fired.insert(name);
        }
    }
    let defined: BTreeSet<&str> = alerts(rules)
        .iter()
        .filter_map(|rule| rule.alert.as_deref())
        .collect();
    let mut problems = Vec::new();
    for name in &defined {
        if !fired.contains(name) {
            problems.push(format!("{name}: no test fires it"));
        }
        if !quiet.contains(name) {
            problems.push(format!("{name}: no test keeps it quiet"));
        }
    }
    for name in fired.union(&quiet) {
        if !defined.contains(name) {
            problems.push(format!("{name}: tested but not defined"));
        }
    }
    problems
}

/// Every alert whose name, `severity` or `summary`/`description`/
/// `runbook_url` annotations break the mixin conventions.
pub fn convention_problems(rules: &RulesFile) -> Vec<String> {
    let mut problems = Vec::new();
    for rule in alerts(rules) {
        let name = rule.alert.as_deref().unwrap_or_default();
        if !name.starts_with("OutboxRelay") {
            problems.push(format!("{name}: alert names start with OutboxRelay"));
        }
        match rule.labels.get("severity").map(String::as_str) {
            Some("warning" | "critical") => {}
            other => problems.push(format!(
                "{name}: severity is {other:?}, not warning or critical"
            )),
        }
        for annotation in ["summary", "description", "runbook_url"] {
            if rule
                .annotations
                .get(annotation)
                .is_none_or(|text| text.trim().is_empty())
            {
                problems.push(format!("{name}: no {annotation} annotation"));
            }
        }
    }
    problems
}
