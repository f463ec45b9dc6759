//! Every `spillway ctl` subcommand against a running daemon, as prose and
//! with `--json`: the JSON parses and has the documented fields.

use serde_json::Value;
use spillway_tests::*;

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = d.ctl(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ctl {args:?} --json: {e}: {out}"))
}

#[test]
fn every_subcommand_answers_in_prose_and_in_json() {
    let d = Daemon::start("[server]\nshards = 2\n");
    let mut c = d.client();
    for i in 0..5 {
        c.push(Tier::Sync, format!("r{i}").as_bytes()).unwrap();
    }

    let health = d.health();
    assert!(health.contains("shard 0 Running"), "{health}");
    let h = d.health_json();
    assert_eq!(h["shards"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["shards"][0]["state"], "running", "{h}");
    for field in ["state", "since", "reason", "last_delivery"] {
        assert!(
            h["shards"][0]["sinks"]["default"].get(field).is_some(),
            "{field}: {h}"
        );
    }
    assert!(h["ready"].is_boolean() && h["failing"].is_array(), "{h}");

    let stats = d.ctl(&["stats", "--flat"]);
    assert!(stats.contains("connections_accepted "), "{stats}");
    // For people: grouped, with units, the five records counted.
    let view = d.ctl(&["stats"]);
    for section in [
        "\nINGEST\n",
        "\nWAB  ",
        "\nDELIVERY\n",
        "\nDEAD LETTERS\n",
        "\nRELOADS  ",
    ] {
        assert!(view.contains(section), "no {section:?} in:\n{view}");
    }
    assert!(view.starts_with("spillway: up "), "{view}");
    assert!(view.contains("  records       5 written"), "{view}");
    assert!(view.contains("  default: "), "{view}");
    assert!(view.contains(" B "), "no byte unit in:\n{view}");
    let s = json(&d, &["stats"]);
    assert!(
        s["global"]["connections_accepted"].as_u64().unwrap() >= 1,
        "{s}"
    );
    assert_eq!(s["nacks"]["bad_magic"], 0, "{s}");
    let written: u64 = s["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sh| sh["records_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 5, "{s}");
    assert!(s["shards"][0]["pending_records"].is_u64(), "{s}");
    assert!(
        s["reloads"]["failed"].is_u64() && s["sinks"]["default"]["description"].is_string(),
        "{s}"
    );

    let segments = d.ctl(&["segments"]);
    assert!(segments.contains("shard 0: "), "{segments}");
    assert!(segments.contains(".open "), "{segments}");
    let g = json(&d, &["segments"]);
    let seg = &g["shards"][0]["segments"][0];
    for field in ["id", "state", "bytes", "first_seq", "confirmed"] {
        assert!(seg.get(field).is_some(), "{field}: {g}");
    }
    let durable: u64 = g["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sh| sh["durable_next_seq"].as_u64().unwrap())
        .sum();
    assert_eq!(durable, 5, "{g}");
    // The held sink confirms nothing: every segment with records is pending.
    assert!(
        g["shards"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|sh| sh["segments"].as_array().unwrap())
            .all(|s| s["confirmed"] == "pending" || s["confirmed"] == "empty"),
        "{g}"
    );

    let metrics = d.ctl(&["metrics"]);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    let m = json(&d, &["metrics"]);
    let written: f64 = m["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["name"] == "spillway_records_written_total")
        .map(|x| x["value"].as_f64().unwrap())
        .sum();
    assert_eq!(written, 5.0, "{m}");

    assert!(d
        .ctl(&["dead-letter", "list"])
        .starts_with("0 dead letters"));
    let l = json(&d, &["dead-letter", "list"]);
    assert_eq!(l["count"], 0, "{l}");
    assert_eq!(l["dead_letters"], serde_json::json!([]));
    assert_eq!(d.ctl(&["dead-letter", "drop", "all"]), "dropped 0\n");
    assert_eq!(json(&d, &["dead-letter", "drop", "all"])["dropped"], 0);
    assert_eq!(d.ctl(&["dead-letter", "requeue", "all"]), "requeued 0\n");
    assert_eq!(json(&d, &["dead-letter", "requeue", "all"])["requeued"], 0);

    assert!(d.ctl(&["reload"]).contains("sinks unchanged"));
    let r = json(&d, &["reload"]);
    assert_eq!(r["report"], serde_json::json!(["sinks unchanged"]), "{r}");
}

#[test]
fn top_prints_one_plain_line_per_interval_off_a_terminal() {
    let d = Daemon::start("");
    let mut c = d.client();
    c.push(Tier::Sync, b"x").unwrap();
    let out = d.ctl(&["top", "--interval", "0.2", "--count", "3"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for l in lines {
        assert!(l.contains(" ingest ") && l.contains("/s delivered "), "{l}");
        assert!(l.contains(" backlog ") && l.contains(" fsync p99 "), "{l}");
        // The one record, held by the sink: 16 header bytes and 1 of payload.
        assert!(l.contains(" backlog 1 (17 B) "), "{l}");
        // The test harness's sink holds every batch: it may stall.
        assert!(
            l.ends_with("NOT READY") || l.ends_with("DEGRADED") || l.ends_with("ready"),
            "{l}"
        );
    }
}

#[test]
fn an_error_in_json_mode_is_a_json_object_and_a_failure() {
    let d = Daemon::start("");
    let config = d.config_path().as_os_str();
    let out = run_spillway(
        &[
            "ctl".as_ref(),
            "--config".as_ref(),
            config,
            "--json".as_ref(),
            "dead-letter".as_ref(),
            "drop".as_ref(),
            "nope".as_ref(),
        ],
        std::time::Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("\"nope\" is not SHARD:SEQ"),
        "{v}"
    );
}
