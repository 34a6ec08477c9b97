//! The Grafana board: its panels' queries, their data source, and a rules
//! file that lets promtool parse every query.

use serde_json::Value;

/// The name of the board's data source variable.
pub const DATASOURCE_VARIABLE: &str = "datasource";

/// Grafana's interval variables, and the range promtool sees for them.
const INTERVAL_VARIABLES: &[&str] = &["$__rate_interval", "$__interval", "$__range"];
const INTERVAL_STANDIN: &str = "5m";

/// One panel query.
#[derive(Debug)]
pub struct PanelQuery {
    /// The panel's title and the target's `refId`.
    pub source: String,
    /// The PromQL expression as Grafana sends it.
    pub expr: String,
}

/// Every panel of `board`, rows' nested panels included; rows themselves
/// are left out.
pub fn panels(board: &Value) -> Vec<&Value> {
    fn collect<'a>(panels: &'a Value, into: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            if panel["type"] != "row" {
                into.push(panel);
            }
            collect(&panel["panels"], into);
        }
    }
    let mut found = Vec::new();
    collect(&board["panels"], &mut found);
    found
}

fn title(panel: &Value) -> &str {
    panel["title"].as_str().unwrap_or("(untitled)")
}

/// Every target's query.
pub fn queries(board: &Value) -> Vec<PanelQuery> {
    panels(board)
        .into_iter()
        .flat_map(|panel| {
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |target| PanelQuery {
                    source: format!(
                        "{} ({})",
                        title(panel),
                        target["refId"].as_str().unwrap_or("?")
                    ),
                    expr: target["expr"].as_str().unwrap_or_default().to_owned(),
                })
        })
        .collect()
}

/// Whether `datasource` names the board's data source variable.
fn uses_variable(datasource: &Value) -> bool {
    let wanted = [
        format!("${DATASOURCE_VARIABLE}"),
        format!("${{{DATASOURCE_VARIABLE}}}"),
    ];
    let named = datasource
        .as_str()
        .or_else(|| datasource["uid"].as_str())
        .unwrap_or_default();
    wanted.iter().any(|wanted| wanted == named)
}

/// The board's structural problems: no stable `uid`, no `datasource`
/// variable of type `datasource` for Prometheus, a panel or target that
/// does not use it, a panel without a query.
pub fn structure_problems(board: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if board["uid"].as_str().is_none_or(str::is_empty) {
        problems.push("the board has no uid".to_owned());
    }
    let variable = board["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|variable| variable["name"] == DATASOURCE_VARIABLE);
    match variable {
        Some(variable) if variable["type"] == "datasource" && variable["query"] == "prometheus" => {
        }
        Some(_) => problems.push(format!(
            "the ${DATASOURCE_VARIABLE} variable is not of type datasource for prometheus"
        )),
        None => problems.push(format!("the board has no ${DATASOURCE_VARIABLE} variable")),
    }
    for panel in panels(board) {
        let title = title(panel);
        if !uses_variable(&panel["datasource"]) {
            problems.push(format!(
                "panel {title}: datasource is not ${DATASOURCE_VARIABLE}"
            ));
        }
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title}: no query"));
        }
        for target in targets {
            let reference = target["refId"].as_str().unwrap_or("?");
            if !target["datasource"].is_null() && !uses_variable(&target["datasource"]) {
                problems.push(format!(
                    "panel {title} ({reference}): datasource is not ${DATASOURCE_VARIABLE}"
                ));
            }
            if target["expr"]
                .as_str()
                .is_none_or(|expr| expr.trim().is_empty())
            {
                problems.push(format!("panel {title} ({reference}): empty expr"));
            }
        }
    }
    problems
}

/// `expr` with Grafana's interval variables replaced by a range promtool
/// accepts.
pub fn as_promql(expr: &str) -> String {
    INTERVAL_VARIABLES
        .iter()
        .fold(expr.to_owned(), |expr, variable| {
            expr.replace(variable, INTERVAL_STANDIN)
        })
}

/// A rules file recording every query, for `promtool check rules` to
/// parse them.
pub fn recording_rules(queries: &[PanelQuery]) -> String {
    let mut text = String::from("groups:\n  - name: board-queries\n    rules:\n");
    for (index, query) in queries.iter().enumerate() {
        let expr =
            serde_json::to_string(&as_promql(&query.expr)).expect("a string serializes to JSON");
        text.push_str(&format!(
            "      - record: board:query_{index}\n        expr: {expr}\n"
        ));
    }
    text
}
