//! The monitoring kit in `deploy/` checked against the real daemon: every
//! metric that the Prometheus alert rules
//! (`deploy/prometheus/spillway-alerts.yml`) and the Grafana dashboard
//! (`deploy/grafana/spillway-dashboard.json`) name is served on `/metrics`;
//! the rules pass `promtool check rules` and their unit tests
//! (`promtool test rules`), the dashboard's queries parse as PromQL, and
//! every alert carries `for:`, a severity, its annotations and a runbook
//! link that resolves to a heading of `deploy/README.md`.
//!
//! promtool comes from Debian's prometheus package (`.ci/promtool.sh`).
//! Without it the promtool checks fail under CI (`CI` set) and are skipped,
//! with the reason printed, elsewhere; the metric-name check always runs.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use spillway_tests::{http_get, Daemon, Tier, METRICS_ON_ANY_PORT};

const RULES: &str = "deploy/prometheus/spillway-alerts.yml";
const RULES_TESTS: &str = "deploy/prometheus/spillway-alerts.test.yml";
const DASHBOARD: &str = "deploy/grafana/spillway-dashboard.json";
const RUNBOOK: &str = "deploy/README.md";
const RUNBOOK_URL_PREFIX: &str =
    "https://github.com/spillway-rs/spillway/blob/main/deploy/README.md#";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root, two folders above testing/tests/")
}

fn read(rel: &str) -> String {
    let path = repo_root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

// ------------------------------------------------------------ the rules file

/// The `expr:` of each rule, with its line number (1-based). Only what the
/// rules file uses is understood: `expr: <PromQL>` on one line, or a block
/// scalar (`expr: |` / `expr: >`) whose lines are indented deeper.
fn rule_exprs(yaml: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        if let Some(value) = line.trim_start().strip_prefix("expr:") {
            let value = value.trim();
            if value.starts_with(['|', '>']) {
                let mut block = Vec::new();
                while i + 1 < lines.len() {
                    let next = lines[i + 1];
                    let next_indent = next.len() - next.trim_start().len();
                    if !next.trim().is_empty() && next_indent <= indent {
                        break;
                    }
                    block.push(next.trim());
                    i += 1;
                }
                out.push((i + 1, block.join(" ")));
            } else {
                out.push((i + 1, unquote(value).to_string()));
            }
        }
        i += 1;
    }
    out
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// Each alert's name and the text of its list item (`- alert:` up to the
/// next one).
fn alert_blocks(yaml: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in yaml.lines() {
        if let Some(name) = line.trim_start().strip_prefix("- alert:") {
            out.push((name.trim().to_string(), String::new()));
        } else if let Some((_, block)) = out.last_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    out
}

/// The value of the first `key:` line in `block`, unquoted.
fn field<'a>(block: &'a str, key: &str) -> Option<&'a str> {
    block.lines().find_map(|l| {
        l.trim_start()
            .strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| unquote(v.trim()))
    })
}

// -------------------------------------------------------- the dashboard file

/// Every PromQL query of the dashboard: each `expr` field anywhere (panel
/// targets), and each templating variable's query, named by where it is.
fn dashboard_queries(dash: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    let here = format!("{at}.{k}");
                    if k == "expr" {
                        let expr = child
                            .as_str()
                            .unwrap_or_else(|| panic!("{DASHBOARD}: {here} is not a string"));
                        out.push((here, expr.to_string()));
                    } else {
                        walk(child, &here, out);
                    }
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(child, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], "panels", &mut out);
    let vars = dash["templating"]["list"]
        .as_array()
        .unwrap_or_else(|| panic!("{DASHBOARD}: templating.list is not a list"));
    for var in vars {
        if var["type"] != "query" {
            continue;
        }
        let name = var["name"].as_str().unwrap_or("?");
        let query = match &var["query"] {
            Value::String(s) => s.clone(),
            q => q["query"]
                .as_str()
                .unwrap_or_else(|| panic!("{DASHBOARD}: variable {name} has no query"))
                .to_string(),
        };
        out.push((format!("templating variable {name}"), query));
    }
    out
}

// ---------------------------------------------------------- metric names

/// The `spillway_*` identifiers of a PromQL expression (string literals,
/// such as label values, skipped).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = expr.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            let mut escaped = false;
            for (_, d) in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if d == '\\' {
                    escaped = true;
                } else if d == c {
                    break;
                }
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    end = i + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let ident = &expr[start..end];
            if ident.starts_with("spillway_") {
                names.insert(ident.to_string());
            }
        }
    }
    names
}

/// The sample names of an OpenMetrics exposition: what PromQL can select
/// (a histogram's `_bucket`, `_sum` and `_count`, a counter's `_total`).
fn exposed_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            l[..end].to_string()
        })
        .collect()
}

#[test]
fn every_metric_the_rules_and_the_dashboard_name_is_on_the_endpoint() {
    let rules = read(RULES);
    let exprs = rule_exprs(&rules);
    let alerts = alert_blocks(&rules);
    assert_eq!(
        exprs.len(),
        alerts.len(),
        "{RULES}: {} `expr:` lines for {} alerts",
        exprs.len(),
        alerts.len()
    );
    let dash: Value = serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"));
    let queries = dashboard_queries(&dash);

    // Where each name is used, to say so when it is missing.
    let mut uses: Vec<(String, String)> = Vec::new();
    for (line, expr) in &exprs {
        for name in metric_names(expr) {
            uses.push((name, format!("{RULES} line {line}")));
        }
    }
    for (at, expr) in &queries {
        for name in metric_names(expr) {
            uses.push((name, format!("{DASHBOARD} {at}")));
        }
    }
    let named: BTreeSet<&str> = uses.iter().map(|(n, _)| n.as_str()).collect();
    // The parser found what is surely there (a guard against a parser
    // that finds nothing and so passes).
    for must in [
        "spillway_shard_up",
        "spillway_fsync_seconds_bucket",
        "spillway_records_written_total",
    ] {
        assert!(
            named.contains(must),
            "{must} not found in the rules or dashboard: {named:?}"
        );
    }

    let d = Daemon::start(&format!(
        "[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n[sink]\ntype = \"noop\"\n"
    ));
    let port = d.metrics_port();
    d.client().push(Tier::Sync, b"deploy-rules").unwrap();
    let reply = http_get(port, "/metrics");
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let exposed = exposed_names(body);
    assert!(exposed.contains("spillway_records_written_total"), "{body}");

    let missing: Vec<String> = uses
        .iter()
        .filter(|(name, _)| !exposed.contains(name))
        .map(|(name, at)| format!("{name} (used in {at})"))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics named in deploy/ but not on /metrics:\n  {}\nthe endpoint serves:\n  {}",
        missing.join("\n  "),
        exposed.iter().cloned().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn every_alert_has_for_a_severity_its_annotations_and_a_runbook_heading() {
    let rules = read(RULES);
    let alerts = alert_blocks(&rules);
    assert!(alerts.len() >= 12, "{RULES}: only {} alerts", alerts.len());
    let runbook = read(RUNBOOK);
    let anchors: BTreeSet<String> = runbook
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| github_anchor(l.trim_start_matches('#')))
        .collect();
    let mut problems = Vec::new();
    for (name, block) in &alerts {
        if field(block, "for").is_none() {
            problems.push(format!("{name}: no `for:`"));
        }
        match field(block, "severity") {
            Some("page" | "ticket") => {}
            other => problems.push(format!("{name}: severity {other:?}, not page or ticket")),
        }
        for key in ["summary", "description"] {
            if field(block, key).is_none_or(str::is_empty) {
                problems.push(format!("{name}: no annotation `{key}`"));
            }
        }
        match field(block, "runbook_url").and_then(|u| u.strip_prefix(RUNBOOK_URL_PREFIX)) {
            None => problems.push(format!(
                "{name}: runbook_url does not start with {RUNBOOK_URL_PREFIX}"
            )),
            Some(anchor) if !anchors.contains(anchor) => problems.push(format!(
                "{name}: runbook_url anchor #{anchor} is no heading of {RUNBOOK}"
            )),
            Some(_) => {}
        }
    }
    assert!(problems.is_empty(), "{RULES}:\n  {}", problems.join("\n  "));
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to hyphens,
/// punctuation other than `-` and `_` dropped.
fn github_anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------- promtool

/// Run `promtool <args>` in the repository root: `None` when promtool is
/// not installed (a failure under CI), else its exit status and output.
fn promtool(args: &[&str]) -> Option<(bool, String)> {
    match Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .output()
    {
        Ok(o) => Some((
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var_os("CI").is_none(),
                "promtool is missing in CI (.ci/promtool.sh installs it)"
            );
            // Straight to stderr, past the test harness's capture of
            // eprintln!, so the skip shows in a passing run.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED promtool {}: promtool is not on PATH (run .ci/promtool.sh to install it)",
                args.join(" ")
            );
            None
        }
        Err(e) => panic!("running promtool: {e}"),
    }
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some((ok, out)) = promtool(&["check", "rules", RULES]) else {
        return;
    };
    assert!(ok, "promtool check rules {RULES} failed:\n{out}");
    let (ok, out) = promtool(&["test", "rules", RULES_TESTS]).expect("promtool ran just now");
    assert!(ok, "promtool test rules {RULES_TESTS} failed:\n{out}");
}

#[test]
fn the_dashboard_queries_parse_as_promql() {
    let dash: Value = serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"));
    // Each panel query becomes a recording rule, so that promtool parses
    // it; Grafana's variables are replaced by what Grafana would send.
    let mut file = String::from("groups:\n  - name: dashboard\n    rules:\n");
    let mut n = 0;
    for (at, expr) in dashboard_queries(&dash) {
        if !at.starts_with("panels") {
            continue; // label_values() is Grafana's, not PromQL
        }
        let expr = expr
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$shard", ".*");
        assert!(
            !expr.contains('$'),
            "{DASHBOARD} {at}: unknown variable in {expr}"
        );
        n += 1;
        file.push_str(&format!(
            "      - record: dashboard:query_{n}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
    }
    assert!(n >= 14, "{DASHBOARD}: only {n} panel queries");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yml");
    std::fs::write(&path, &file).unwrap();
    let Some((ok, out)) = promtool(&["check", "rules", path.to_str().unwrap()]) else {
        return;
    };
    assert!(ok, "a query of {DASHBOARD} does not parse:\n{out}\n{file}");
}

#[test]
fn the_dashboard_has_its_variables_and_every_panel_its_queries() {
    let dash: Value = serde_json::from_str(&read(DASHBOARD))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"));
    assert!(
        dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "{DASHBOARD}: schemaVersion {}",
        dash["schemaVersion"]
    );
    let vars = dash["templating"]["list"].as_array().unwrap();
    let var = |name: &str| {
        vars.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("{DASHBOARD}: no templating variable {name}"))
    };
    assert_eq!(var("datasource")["type"], "datasource");
    assert_eq!(var("datasource")["query"], "prometheus");
    assert!(var("shard")["definition"]
        .as_str()
        .is_some_and(|d| d.starts_with("label_values(spillway_shard_up")));

    let mut ids = BTreeSet::new();
    for panel in dash["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap_or("?");
        let id = panel["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("panel {title}: no id"));
        assert!(ids.insert(id), "panel {title}: id {id} used twice");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title} does not use the datasource variable"
        );
        let targets = panel["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("panel {title}: no targets"));
        assert!(!targets.is_empty(), "panel {title}: no targets");
        for t in targets {
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "panel {title}: a target without expr"
            );
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {title}");
        }
    }
}
