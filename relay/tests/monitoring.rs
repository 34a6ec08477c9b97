//! The relay's monitoring files: the alert rules and their promtool tests
//! (`deploy/prometheus/`), the Grafana board (`deploy/grafana/`) and the
//! runbooks in docs/operations.md. promtool (Debian: `prometheus`) must be
//! installed: without it these tests fail.

mod monitoring {
    pub mod board;
    pub mod exported;
    pub mod promql;
    pub mod promtool;
    pub mod rules;
    pub mod runbooks;
    pub mod scratch;
}

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use monitoring::board::{self, PanelQuery};
use monitoring::exported::{exported_metric_names, series_names, unknown_metric_problems};
use monitoring::promql::metric_names;
use monitoring::promtool::{check_rules, promtool, promtool_among, test_rules};
use monitoring::rules::{self, convention_problems, coverage_problems, parse_rules, parse_tests};
use monitoring::runbooks::{anchor, heading_anchors, runbook_problems};
use monitoring::scratch::Scratch;

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the relay crate sits in the workspace")
        .to_path_buf()
}

fn rules_path() -> PathBuf {
    repository_root().join("deploy/prometheus/outbox-relay.rules.yml")
}

fn rule_tests_path() -> PathBuf {
    repository_root().join("deploy/prometheus/outbox-relay.rules.test.yml")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// The operations guide's address on the project's repository, which the
/// runbook links point into.
fn operations_guide_url() -> String {
    format!(
        "{}/blob/main/docs/operations.md",
        env!("CARGO_PKG_REPOSITORY")
    )
}

fn board_json() -> serde_json::Value {
    serde_json::from_str(&read(
        &repository_root().join("deploy/grafana/outbox-relay.json"),
    ))
    .expect("the board is JSON")
}

fn assert_none(problems: Vec<String>, what: &str) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let promtool = promtool();
    if let Err(output) = check_rules(&promtool, &rules_path()) {
        panic!("{output}");
    }
    if let Err(output) = test_rules(&promtool, &rule_tests_path()) {
        panic!("{output}");
    }
}

#[test]
fn every_alert_has_a_test_that_fires_it_and_one_that_keeps_it_quiet() {
    let rules = parse_rules(&read(&rules_path())).expect("parse the rules");
    let tests = parse_tests(&read(&rule_tests_path())).expect("parse the rule tests");
    assert!(
        !rules::alerts(&rules).is_empty(),
        "the rules file has no alert"
    );
    assert_none(coverage_problems(&rules, &tests), "alerts not covered");
    assert_none(convention_problems(&rules), "alerts off the conventions");
}

#[test]
fn every_runbook_url_points_at_a_heading_of_the_operations_guide() {
    let rules = parse_rules(&read(&rules_path())).expect("parse the rules");
    let anchors = heading_anchors(&read(&repository_root().join("docs/operations.md")));
    assert_none(
        runbook_problems(&rules, &operations_guide_url(), &anchors),
        "runbook links",
    );
}

#[test]
fn every_alert_selects_only_metrics_the_relay_exports() {
    let rules = parse_rules(&read(&rules_path())).expect("parse the rules");
    let alerts = rules::alerts(&rules);
    let queries = alerts.iter().map(|rule| {
        (
            rule.alert.as_deref().unwrap_or_default(),
            rule.expr.as_str(),
        )
    });
    assert_none(
        unknown_metric_problems(queries, &exported_metric_names()),
        "alerts on metrics the relay does not export",
    );
}

#[test]
fn the_board_uses_its_datasource_variable_in_every_panel() {
    let board = board_json();
    assert!(!board::panels(&board).is_empty(), "the board has no panel");
    assert_none(board::structure_problems(&board), "board structure");
}

#[test]
fn every_board_query_parses_and_selects_only_metrics_the_relay_exports() {
    let queries = board::queries(&board_json());
    assert!(!queries.is_empty(), "the board has no query");
    let scratch = Scratch::new("board-queries");
    let recorded = scratch.file("board.rules.yml", &board::recording_rules(&queries));
    if let Err(output) = check_rules(&promtool(), &recorded) {
        panic!("a board query is not valid PromQL: {output}");
    }
    let named = queries
        .iter()
        .map(|query| (query.source.as_str(), query.expr.as_str()));
    assert_none(
        unknown_metric_problems(named, &exported_metric_names()),
        "board queries on metrics the relay does not export",
    );
}

// The checks above, each shown failing on a broken input.

#[test]
fn a_board_query_on_an_unknown_metric_is_reported() {
    let board = serde_json::json!({
        "panels": [{
            "title": "Renamed",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "targets": [{"refId": "A", "expr": "sum(rate(outbox_relay_events_sent_total[5m]))"}],
        }],
    });
    let queries = board::queries(&board);
    let named = queries
        .iter()
        .map(|query| (query.source.as_str(), query.expr.as_str()));
    let problems = unknown_metric_problems(named, &exported_metric_names());
    assert_eq!(
        problems,
        ["Renamed (A): outbox_relay_events_sent_total is not a metric the relay exports"]
    );
}

#[test]
fn a_panel_off_the_datasource_variable_is_reported() {
    let board = serde_json::json!({
        "uid": "outbox-relay",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": [
            {"type": "row", "title": "Row", "panels": [{
                "title": "Fixed source",
                "datasource": {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"},
                "targets": [{"refId": "A", "expr": "outbox_relay_pending_events"}],
            }]},
            {
                "title": "Fixed target",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "targets": [{"refId": "B", "datasource": "Prometheus", "expr": "outbox_relay_dead_events"}],
            },
            {"title": "No query", "datasource": "$datasource", "targets": []},
        ],
    });
    assert_eq!(
        board::structure_problems(&board),
        [
            "panel Fixed source: datasource is not $datasource",
            "panel Fixed target (B): datasource is not $datasource",
            "panel No query: no query",
        ]
    );
    let untemplated = serde_json::json!({"uid": "", "panels": []});
    assert_eq!(
        board::structure_problems(&untemplated),
        [
            "the board has no uid",
            "the board has no $datasource variable"
        ]
    );
}

#[test]
fn a_board_query_that_does_not_parse_fails_promtool() {
    let queries = [
        PanelQuery {
            source: "Fine".to_owned(),
            expr: "sum by (topic) (rate(outbox_relay_events_published_total[$__rate_interval]))"
                .to_owned(),
        },
        PanelQuery {
            source: "Broken".to_owned(),
            expr: "sum(rate(outbox_relay_events_published_total[5m])".to_owned(),
        },
    ];
    let scratch = Scratch::new("broken-query");
    let recorded = scratch.file("board.rules.yml", &board::recording_rules(&queries));
    let output = check_rules(&promtool(), &recorded).expect_err("an unclosed parenthesis");
    assert!(output.contains("board:query_1"), "{output}");
    assert!(!output.contains("board:query_0"), "{output}");
}

#[test]
fn an_alert_missing_a_firing_or_quiet_test_is_reported() {
    let rules = parse_rules(
        r"
groups:
  - name: g
    rules:
      - alert: OutboxRelayOne
        expr: vector(1)
        labels: {severity: warning}
        annotations: {summary: s, description: d, runbook_url: u}
      - alert: OutboxRelayTwo
        expr: vector(1)
        labels: {severity: page}
        annotations: {summary: s, description: d}
      - alert: Unprefixed
        expr: vector(1)
        labels: {severity: critical}
        annotations: {summary: s, description: d, runbook_url: u}
",
    )
    .expect("parse the rules");
    let tests = parse_tests(
        r"
tests:
  - name: fires one
    alert_rule_test:
      - {eval_time: 1m, alertname: OutboxRelayOne, exp_alerts: [{exp_labels: {severity: warning}}]}
      - {eval_time: 1m, alertname: OutboxRelayTwo, exp_alerts: []}
      - {eval_time: 1m, alertname: OutboxRelayGone, exp_alerts: []}
",
    )
    .expect("parse the tests");
    assert_eq!(
        coverage_problems(&rules, &tests),
        [
            "OutboxRelayOne: no test keeps it quiet",
            "OutboxRelayTwo: no test fires it",
            "Unprefixed: no test fires it",
            "Unprefixed: no test keeps it quiet",
            "OutboxRelayGone: tested but not defined",
        ]
    );
    assert_eq!(
        convention_problems(&rules),
        [
            "OutboxRelayTwo: severity is Some(\"page\"), not warning or critical",
            "OutboxRelayTwo: no runbook_url annotation",
            "Unprefixed: alert names start with OutboxRelay",
        ]
    );
}

#[test]
fn a_runbook_anchor_missing_from_the_guide_is_reported() {
    let guide = "https://github.com/outbox-rs/outbox/blob/main/docs/operations.md";
    let rules = parse_rules(&format!(
        r"
groups:
  - name: g
    rules:
      - alert: OutboxRelayDocumented
        expr: vector(1)
        annotations: {{runbook_url: '{guide}#outboxrelaydocumented'}}
      - alert: OutboxRelayUndocumented
        expr: vector(1)
        annotations: {{runbook_url: '{guide}#outboxrelayundocumented'}}
      - alert: OutboxRelayElsewhere
        expr: vector(1)
        annotations: {{runbook_url: 'https://example.org/runbook#outboxrelaydocumented'}}
"
    ))
    .expect("parse the rules");
    let anchors = heading_anchors(
        "# Guide\n\n### OutboxRelayDocumented\n\n```sh\n# OutboxRelayUndocumented\n```\n",
    );
    assert_eq!(
        runbook_problems(&rules, guide, &anchors),
        [
            "OutboxRelayUndocumented: runbook anchor #outboxrelayundocumented is no heading of docs/operations.md",
            "OutboxRelayElsewhere: runbook_url https://example.org/runbook#outboxrelaydocumented is not under https://github.com/outbox-rs/outbox/blob/main/docs/operations.md",
        ]
    );
    assert_eq!(
        anchor("Reading the WAL: `--source logical`"),
        "reading-the-wal---source-logical"
    );
}

#[test]
fn a_failing_promtool_unit_test_is_reported() {
    let scratch = Scratch::new("failing-unit-test");
    let rules = scratch.file(
        "always.rules.yml",
        "groups:\n  - name: g\n    rules:\n      - alert: Always\n        expr: vector(1)\n",
    );
    let tests = scratch.file(
        "always.rules.test.yml",
        &format!(
            "rule_files:\n  - {}\ntests:\n  - interval: 1m\n    input_series: []\n    alert_rule_test:\n      - eval_time: 1m\n        alertname: Always\n        exp_alerts: []\n",
            rules.display()
        ),
    );
    let output = test_rules(&promtool(), &tests).expect_err("Always fires");
    assert!(output.contains("Always"), "{output}");
}

#[test]
fn a_missing_promtool_fails_naming_the_debian_package() {
    let message =
        promtool_among(&[PathBuf::from("/nonexistent/promtool")]).expect_err("no promtool there");
    assert!(message.contains("`prometheus`"), "{message}");
}

#[test]
fn metric_names_leave_out_functions_labels_ranges_and_variables() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le, topic) (rate(outbox_relay_commit_to_ack_seconds_bucket{topic=~"orders|by"}[$__rate_interval])))
          / on (instance) group_left (job) max without (topic) (outbox_relay_pending_events offset 5m)
          or absent(outbox_relay_leases_held) and count(up) > bool 1e3 unless ${datasource} + $__range"#,
    );
    let expected: BTreeSet<String> = [
        "outbox_relay_commit_to_ack_seconds_bucket",
        "outbox_relay_pending_events",
        "outbox_relay_leases_held",
        "up",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(names, expected);
}

#[test]
fn the_exported_names_are_read_from_the_relay_itself() {
    let exported = exported_metric_names();
    for name in [
        "outbox_relay_ready",
        "outbox_relay_events_published_total",
        "outbox_relay_batch_publish_seconds_bucket",
        "outbox_relay_slot_retained_wal_bytes",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
    assert_eq!(
        series_names("# TYPE a counter\na_total{x=\"1\"} 2\nb 1\n"),
        ["a_total", "b"].map(str::to_owned).into()
    );
}
