//! Prometheus metrics: `admin.metrics_address` serves `GET /metrics`, and
//! `spillway ctl metrics` prints the same exposition. The counters follow
//! what the daemon did (records written, fsyncs, nacks).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use spillway_client::Tier;
use spillway_tests::plugins::{admin_socket, ctl_socket};
use spillway_tests::{http_get, Daemon, METRICS_ON_ANY_PORT};

/// Sum of every sample of `name` (over its labels).
fn sum(exposition: &str, name: &str) -> u64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

#[test]
fn metrics_endpoint_and_ctl_metrics_report_what_happened() {
    let d = Daemon::start(&format!(
        "[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n"
    ));
    let port = d.metrics_port();
    let before = http_get(port, "/metrics");
    let accepted_before = sum(&before, "spillway_connections_accepted_total");
    let mut c = d.client();
    for i in 0..25 {
        c.push(Tier::Sync, format!("r{i}").as_bytes()).unwrap();
    }
    c.push_batch(Tier::Sync, &[b"a".as_slice(), b"b", b"c"])
        .unwrap();

    let reply = http_get(port, "/metrics");
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(sum(body, "spillway_records_written_total"), 28, "{body}");
    assert!(
        body.contains("# TYPE spillway_fsync_seconds histogram"),
        "{body}"
    );
    let fsyncs = sum(body, "spillway_fsync_seconds_count");
    assert!(
        (1..=26).contains(&fsyncs),
        "one fsync per group at most: {fsyncs}"
    );
    // The +Inf bucket of each shard equals its count.
    assert_eq!(
        body.lines()
            .filter(|l| l.starts_with("spillway_fsync_seconds_bucket") && l.contains("le=\"+Inf\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>(),
        fsyncs
    );
    assert_eq!(sum(body, "spillway_shard_up"), 2, "both shards running");
    assert_eq!(
        sum(body, "spillway_connections_accepted_total"),
        accepted_before + 1
    );

    // A bad frame shows up as a nack by reason.
    let mut raw = std::os::unix::net::UnixStream::connect(d.socket_path()).unwrap();
    raw.write_all(b"NOPE0123456789ab").unwrap();
    let mut buf = [0u8; 64];
    let _ = raw.read(&mut buf);
    std::thread::sleep(Duration::from_millis(100));
    let body = http_get(port, "/metrics");
    assert!(
        body.contains("spillway_nacks_total{reason=\"bad_magic\"} 1"),
        "{body}"
    );

    assert!(http_get(port, "/other").starts_with("HTTP/1.1 404"));

    let ctl = ctl_socket(&admin_socket(&d), &["metrics"]);
    assert!(ctl.status.success());
    assert_eq!(sum(&ctl.stdout, "spillway_records_written_total"), 28);
}

#[test]
fn a_bad_metrics_address_is_refused_naming_the_key() {
    let d = Daemon::configure("[admin]\nmetrics_address = \"localhost-9187\"\n");
    let finished = d.run_to_exit(Duration::from_secs(20));
    assert!(!finished.status.success());
    assert!(
        finished.stderr.contains("admin.metrics_address"),
        "{}",
        finished.stderr
    );
}

/// What the metrics server answers `raw` with, up to its close.
fn http_raw(port: u16, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(raw);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_metrics_server_answers_only_get_metrics_and_drops_slow_or_huge_requests() {
    let d = Daemon::start(&format!(
        "[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n"
    ));
    let port = d.metrics_port();
    let other = http_raw(
        port,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
    );
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    assert!(
        other.ends_with("\r\n\r\ntry GET /metrics, /health or /ready\n"),
        "{other}"
    );
    let query = http_raw(port, b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(query.starts_with("HTTP/1.1 404"), "{query}");

    // One request per connection: the second of two pipelined is not answered.
    let two = http_raw(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /other HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert!(two.starts_with("HTTP/1.1 200"), "{two}");
    assert!(
        two.to_ascii_lowercase().contains("connection: close"),
        "{two}"
    );
    assert!(!two.contains("HTTP/1.1 404"), "{two}");

    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
        "x".repeat(9000)
    );
    let refused = http_raw(port, huge.as_bytes());
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");

    // A client that connects and says nothing is dropped (after 5 s),
    // well before our 10 s read timeout.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(matches!(silent.read(&mut buf), Ok(0)), "not closed");
}

/// The value of the one sample of `name` with `labels` (e.g. `shard="0"`).
fn value(exposition: &str, name: &str, labels: &str) -> f64 {
    let prefix = format!("{name}{{{labels}}} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no sample {prefix:?} in:\n{exposition}"))
        .parse()
        .unwrap()
}

/// Every backlog metric is on the endpoint and moves when its event
/// happens: records pushed while the sink fails are pending and age; once
/// the sink recovers, pending falls to 0.
#[test]
fn backlog_metrics_follow_a_sink_outage() {
    let rx = spillway_tests::receiver::HttpReceiver::start();
    rx.set_status(503);
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n\
         [sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 300\n",
        rx.url()
    ));
    let port = d.metrics_port();
    let before = http_get(port, "/metrics");
    for family in [
        "spillway_build_info",
        "spillway_pending_records",
        "spillway_oldest_pending_age_seconds",
        "spillway_sink_up",
        "spillway_sink_backlog_records",
        "spillway_sink_backlog_bytes",
        "spillway_sink_oldest_age_seconds",
        "spillway_sink_checkpoint_seq",
        "spillway_sink_errors",
        "spillway_dead_letter_bytes",
        "spillway_group_commit_seconds",
        "spillway_group_commit_records",
        "spillway_sink_request_seconds",
        "spillway_fsync_seconds",
        "spillway_wab_bytes",
    ] {
        assert!(
            before.contains(&format!("# TYPE {family} ")),
            "{family} missing:\n{before}"
        );
    }
    assert!(
        before.contains("spillway_build_info{version=\""),
        "{before}"
    );
    // Built from this checkout: the label is its commit.
    let head = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) if std::env::var_os("SPILLWAY_GIT_COMMIT").is_none() => assert!(
            before.contains(&format!("git_commit=\"{head}\"")),
            "spillway_build_info does not name HEAD {head}:\n{}",
            before
                .lines()
                .find(|l| l.starts_with("spillway_build_info"))
                .unwrap_or("")
        ),
        _ => eprintln!("not a git checkout (or SPILLWAY_GIT_COMMIT set): git_commit not compared"),
    }
    let mut c = d.client();
    let records: Vec<String> = (0..10).map(|i| format!("held-{i}")).collect();
    for r in &records {
        c.push(Tier::Sync, r.as_bytes()).unwrap();
    }
    std::thread::sleep(Duration::from_millis(2200));
    let held = http_get(port, "/metrics");
    assert_eq!(sum(&held, "spillway_records_written_total"), 10, "{held}");
    assert_eq!(
        value(&held, "spillway_pending_records", "shard=\"0\""),
        10.0
    );
    assert!(
        value(&held, "spillway_oldest_pending_age_seconds", "shard=\"0\"") >= 2.0,
        "{held}"
    );
    assert_eq!(
        value(&held, "spillway_sink_up", "sink=\"default\",shard=\"0\""),
        0.0
    );
    assert!(
        value(
            &held,
            "spillway_sink_errors_total",
            "sink=\"default\",shard=\"0\",kind=\"transient\""
        ) >= 1.0,
        "{held}"
    );
    assert!(
        value(
            &held,
            "spillway_sink_request_seconds_count",
            "sink=\"default\",shard=\"0\""
        ) >= 1.0
    );
    assert!(value(&held, "spillway_group_commit_records_count", "shard=\"0\"") >= 1.0);

    rx.set_status(200);
    rx.wait_for_payloads(&records, Duration::from_secs(20));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let after = http_get(port, "/metrics");
        if value(&after, "spillway_pending_records", "shard=\"0\"") == 0.0 {
            assert_eq!(
                value(&after, "spillway_oldest_pending_age_seconds", "shard=\"0\""),
                0.0
            );
            assert_eq!(
                value(&after, "spillway_sink_up", "sink=\"default\",shard=\"0\""),
                1.0
            );
            assert_eq!(sum(&after, "spillway_delivered_records_total"), 10);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pending never fell to 0:\n{after}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The recovery figures: what the last start found. A fresh folder has
/// nothing; after a restart, every record written before is found again.
#[test]
fn recovery_figures_say_what_the_last_start_found() {
    let mut d = Daemon::start(&format!(
        "[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n"
    ));
    let port = d.metrics_port();
    let body = http_get(port, "/metrics");
    assert_eq!(sum(&body, "spillway_recovered_records"), 0, "{body}");
    assert_eq!(sum(&body, "spillway_quarantined_files"), 0, "{body}");
    let mut c = d.client();
    for i in 0..20 {
        c.push(Tier::Sync, format!("r{i}").as_bytes()).unwrap();
    }
    drop(c);
    d.restart();
    let body = http_get(d.metrics_port(), "/metrics");
    assert_eq!(sum(&body, "spillway_recovered_records"), 20, "{body}");
    assert_eq!(sum(&body, "spillway_quarantined_files"), 0, "{body}");
}

/// `spillway_pending_bytes` counts the record bytes (16-byte header plus
/// payload) the sink has still to confirm, exactly, across a restart whose
/// segment holds delivered records below the checkpoint too; and
/// `spillway_segments` counts the files by state, a quarantined one and a
/// free one included.
#[test]
fn pending_bytes_and_segment_states_follow_the_backlog_across_a_restart() {
    let rx = spillway_tests::receiver::HttpReceiver::start();
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n\
         [sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 300\n",
        rx.url()
    ));
    // A restart binds a port of its own.
    let port = std::cell::Cell::new(d.metrics_port());
    let metric = |name: &str| value(&http_get(port.get(), "/metrics"), name, "shard=\"0\"");
    let settled = |name: &str, want: f64| {
        let mut last = f64::NAN;
        let reached = spillway_tests::wait_until(Duration::from_secs(10), || {
            last = metric(name);
            last == want
        });
        assert!(reached, "{name} stayed {last}, not {want}");
    };
    let mut c = d.client();
    let delivered: Vec<String> = (0..5).map(|i| format!("delivered-{i}")).collect();
    for r in &delivered {
        c.push(Tier::Sync, r.as_bytes()).unwrap();
    }
    rx.wait_for_payloads(&delivered, Duration::from_secs(10));
    settled("spillway_pending_bytes", 0.0);
    // The checkpoint on disk passes them (written once the drain is idle).
    settled("spillway_checkpoint_seq", 5.0);

    rx.set_status(503);
    let held: Vec<String> = (0..10)
        .map(|i| format!("{i:03}{}", "x".repeat(97)))
        .collect();
    for r in &held {
        c.push(Tier::Sync, r.as_bytes()).unwrap();
    }
    drop(c);
    let want = (10 * (16 + 100)) as f64;
    settled("spillway_pending_bytes", want);
    assert_eq!(metric("spillway_pending_records"), 10.0);
    let segments = |body: &str, state: &str| {
        value(
            body,
            "spillway_segments",
            &format!("shard=\"0\",state=\"{state}\""),
        )
    };
    let body = http_get(port.get(), "/metrics");
    assert_eq!(segments(&body, "open"), 1.0, "{body}");
    assert_eq!(segments(&body, "quarantined"), 0.0, "{body}");
    assert_eq!(segments(&body, "free"), 0.0, "{body}");

    // A delivered segment set aside to be written over (planted: nothing
    // rotates here) counts as free until a start removes it.
    let shard = d.shard_dirs()[0].1.clone();
    std::fs::write(shard.join("00000000000000fe.free"), b"delivered records").unwrap();
    let body = http_get(port.get(), "/metrics");
    assert_eq!(segments(&body, "free"), 1.0, "{body}");

    // A file named like a sealed segment that is not one: recovery moves it
    // to quarantine/.
    std::fs::write(shard.join("00000000000000ff.sealed"), b"not a segment").unwrap();
    d.restart();
    port.set(d.metrics_port());
    // At the start the drain first reads past the 5 delivered records
    // (same segment, below the checkpoint): only the 10 held stay pending.
    settled("spillway_pending_bytes", want);
    let body = http_get(port.get(), "/metrics");
    assert_eq!(
        value(&body, "spillway_pending_records", "shard=\"0\""),
        10.0
    );
    assert_eq!(segments(&body, "sealed"), 1.0, "{body}");
    assert_eq!(segments(&body, "free"), 0.0, "{body}");
    assert_eq!(segments(&body, "quarantined"), 1.0, "{body}");
    assert_eq!(
        value(&body, "spillway_quarantined_files", "shard=\"0\""),
        1.0
    );

    rx.set_status(200);
    rx.wait_for_payloads(&held, Duration::from_secs(20));
    settled("spillway_pending_bytes", 0.0);
    settled("spillway_pending_records", 0.0);
}
