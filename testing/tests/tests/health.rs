//! Health that tells the truth: `GET /health` (liveness), `GET /ready` and
//! `ctl health` follow a real sink (the loopback HTTP receiver) as it starts
//! failing and recovers.

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

/// Polls `/ready` until it answers `code`; how long that took.
fn wait_ready(port: u16, code: u16, within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let (got, body) = ready_json(port);
        if got == code {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "/ready still {got} after {within:?}, waiting for {code}: {body}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn ready_follows_the_sink_and_health_stays_up() {
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
    assert_eq!(body["failing"], serde_json::json!([]));
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

    // The sink starts failing: /ready says so within 2 s, naming it.
    rx.set_status(503);
    c.push(Tier::Sync, b"second").unwrap();
    let took = wait_ready(port, 503, Duration::from_secs(2));
    eprintln!("/ready turned 503 {took:?} after the push");
    let (_, body) = ready_json(port);
    assert_eq!(body["ready"], false);
    let failing = &body["failing"][0];
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
        health.contains("not ready: sink default of shard 0 retrying"),
        "{health}"
    );
    // Exit 1: running, not ready (`health()` checked the text's).
    let v = d.health_json();
    assert_eq!(v["ready"], false, "{v}");

    // It recovers: /ready is 200 again once the batch is delivered.
    rx.set_status(200);
    wait_ready(port, 200, Duration::from_secs(10));
    rx.wait_for_payloads(&[b"second".to_vec()], Duration::from_secs(10));
    assert!(d.health().ends_with("ready\n"));
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
