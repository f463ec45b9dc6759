//! Health that tells the truth: `GET /health` (liveness), `GET /ready` and
//! `ctl health` follow a real sink (the loopback HTTP receiver) as it starts
//! failing and recovers. Ready means "takes writes": a failing sink makes
//! the daemon degraded (still ready, and loud about it), unless
//! `admin.ready_requires_sinks` says a failing sink is not ready.

use std::time::{Duration, Instant};

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// (status code, body) of one GET.
fn get(port: u16, path: &str) -> (u16, String) {
    let out = http_get(port, path);
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

fn ready_json(port: u16) -> (u16, serde_json::Value) {
    let (code, body) = get(port, "/ready");
    let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (code, v)
}

#[test]
fn a_failing_sink_degrades_the_daemon_which_stays_ready_and_takes_writes() {
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n\
         [sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 400\n",
        rx.url()
    ));
    let port = d.metrics_port();
    assert_eq!(get(port, "/health"), (200, "{\"status\":\"ok\"}\n".into()));
    let (code, body) = ready_json(port);
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["ready"], true);
    assert_eq!(body["status"], "ready");
    assert_eq!(body["failing"], serde_json::json!([]));
    assert_eq!(body["degraded"], serde_json::json!([]));
    let mut c = d.client();
    c.push(Tier::Sync, b"first").unwrap();
    rx.wait_for_payloads(&[b"first".to_vec()], Duration::from_secs(10));
    let health = d.health();
    assert!(health.contains("shard 0 Running"), "{health}");
    assert!(
        health.contains("sink default of shard 0 Running (last delivery 20"),
        "{health}"
    );
    assert!(health.ends_with("ready\n"), "{health}");
    assert_eq!(d.health_json()["ready"], true);

    // The sink starts failing: /ready says degraded within 2 s, naming it,
    // and stays 200.
    rx.set_status(503);
    c.push(Tier::Sync, b"second").unwrap();
    let t0 = Instant::now();
    let body = loop {
        let (code, body) = ready_json(port);
        assert_eq!(code, 200, "a failing sink must not fail readiness: {body}");
        if body["status"] == "degraded" {
            break body;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "/ready not degraded 2 s after the push: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("/ready said degraded {:?} after the push", t0.elapsed());
    assert_eq!(body["ready"], true);
    assert_eq!(body["failing"], serde_json::json!([]), "{body}");
    let failing = &body["degraded"][0];
    assert_eq!(failing["what"], "sink", "{body}");
    assert_eq!(failing["shard"], 0, "{body}");
    assert_eq!(failing["state"], "retrying", "{body}");
    assert!(
        failing["reason"].as_str().unwrap().contains("503"),
        "{body}"
    );
    assert!(
        failing["since"].as_str().unwrap().starts_with("20"),
        "{body}"
    );
    assert_eq!(get(port, "/health").0, 200, "liveness stays up");
    // The warning names the shard and the sink.
    let logged = || {
        d.stderr()
            .lines()
            .find(|l| l.contains("delivery failed (transient); retrying"))
            .map(str::to_string)
    };
    assert!(wait_until(Duration::from_secs(5), || logged().is_some()));
    let line = logged().unwrap();
    assert!(
        line.contains("shard=0") && line.contains("sink=") && line.contains(&rx.url()),
        "{line}"
    );
    let health = d.health();
    assert!(
        health.contains("sink default of shard 0 Retrying since 20"),
        "{health}"
    );
    assert!(health.contains("503"), "{health}");
    assert!(
        health.contains("\ndegraded: sink default of shard 0 retrying"),
        "{health}"
    );
    // Exit 3: ready but degraded (`health()` checked the text's).
    let v = d.health_json();
    assert_eq!(
        (&v["ready"], &v["status"]),
        (&serde_json::json!(true), &serde_json::json!("degraded")),
        "{v}"
    );
    // Degraded, it takes writes at every tier: the outage is when
    // producers need the buffer.
    for tier in [Tier::Buffered, Tier::Batched, Tier::Sync] {
        c.push(tier, format!("during-{tier:?}").as_bytes())
            .unwrap_or_else(|e| panic!("a {tier:?} push while degraded: {e}"));
    }
    // The metric and the alert's input say so.
    let metrics = get(port, "/metrics").1;
    assert!(
        metrics.contains("spillway_sink_up{sink=\"default\",shard=\"0\"} 0"),
        "spillway_sink_up while retrying:\n{metrics}"
    );

    // It recovers: /ready says ready again once the batch is delivered.
    rx.set_status(200);
    let t0 = Instant::now();
    while ready_json(port).1["status"] != "ready" {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{}",
            ready_json(port).1
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rx.wait_for_payloads(&[b"second".to_vec()], Duration::from_secs(10));
    assert!(d.health().ends_with("\nready\n"));
    assert_eq!(get(port, "/nope").0, 404);

    // Exit 2: no daemon to ask, with and without --json.
    let config = d.config_path().to_path_buf();
    d.terminate();
    for json in [false, true] {
        let mut argv: Vec<&std::ffi::OsStr> =
            vec!["ctl".as_ref(), "--config".as_ref(), config.as_os_str()];
        if json {
            argv.push("--json".as_ref());
        }
        argv.push("health".as_ref());
        let f = run_spillway(&argv, Duration::from_secs(20));
        assert_eq!(f.status.code(), Some(2), "no daemon (json {json}): {f:?}");
        assert!(f.stderr.contains("is the daemon running?"), "{f:?}");
    }
}

/// A WAB at `wab.wab_bytes_max` takes no writes (pushes get Overloaded)
/// although every shard runs: not ready, saying so, and ready again once
/// the sink delivers and the segments go.
#[test]
fn a_full_wab_is_not_ready_until_the_sink_frees_it() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 1048576\n\
         [admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n\
         [sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 200\n",
        rx.url()
    ));
    let port = d.metrics_port();
    let mut c = d.client();
    let record = vec![b'w'; 64 * 1024];
    let mut pushed = 0;
    loop {
        match c.push(Tier::Sync, &record) {
            Ok(()) => pushed += 1,
            Err(ClientError::Nack(NackReason::Overloaded)) => break,
            Err(e) => panic!("push {pushed}: expected Ack or Overloaded, got {e}"),
        }
        assert!(pushed < 1000, "64 MiB into a 4 MiB WAB and no Overloaded");
    }
    let (code, body) = ready_json(port);
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["status"], "not ready", "{body}");
    assert_eq!(body["failing"][0]["what"], "wab", "{body}");
    assert!(
        body["failing"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("wab.wab_bytes_max = 4194304"),
        "{body}"
    );
    assert_eq!(body["degraded"][0]["sink"], "default", "{body}");
    let health = d.health();
    assert!(
        health
            .lines()
            .last()
            .unwrap()
            .starts_with("not ready: wab full: "),
        "{health}"
    );
    // The sink answers: delivered segments go, and writes are taken again.
    rx.set_status(200);
    let t0 = Instant::now();
    while ready_json(port).1["status"] != "ready" {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{}",
            ready_json(port).1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.push(Tier::Sync, b"after").unwrap();
}
