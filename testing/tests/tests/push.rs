//! `spillway push` end to end: the real binary reads records from stdin or
//! its arguments and pushes them to a real daemon; the records are read
//! back from the daemon's data folder. Bad input, fatal and retryable nacks
//! each end with the line that was not acked.

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// What one `spillway push` run printed and how it exited.
struct Pushed {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn push(args: &[&str], stdin: &[u8]) -> Pushed {
    let mut child = Command::new(spillway_bin())
        .arg("push")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let writer = thread::spawn(move || {
        // A push that stops early closes its stdin: that is not an error here.
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    Pushed {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn config_args(d: &Daemon) -> Vec<String> {
    vec!["--config".into(), d.config_path().display().to_string()]
}

fn with<'a>(base: &'a [String], more: &[&'a str]) -> Vec<&'a str> {
    base.iter()
        .map(String::as_str)
        .chain(more.iter().copied())
        .collect()
}

fn stored(d: &Daemon) -> Vec<String> {
    texts(&d.read_all_records())
}

#[test]
fn stdin_lines_become_batches_acked_in_order() {
    let d = Daemon::start("");
    let lines: Vec<String> = (1..=10_000).map(|i| format!("line-{i:05}")).collect();
    let input = lines.join("\n") + "\n";
    let base = config_args(&d);
    let p = push(
        &with(
            &base,
            &["--tier", "sync", "--batch", "100", "--window", "4"],
        ),
        input.as_bytes(),
    );
    assert!(p.ok, "{}{}", p.stdout, p.stderr);
    assert!(
        p.stdout
            .starts_with("acked 10000 records (sync) in 100 frames"),
        "{}",
        p.stdout
    );
    assert_eq!(stored(&d), lines);
}

#[test]
fn arguments_nul_separated_and_raw_input() {
    // One shard: the runs' records, one connection each, read back in order.
    let d = Daemon::start("[server]\nshards = 1\n");
    let base = config_args(&d);
    let p = push(&with(&base, &["one", "two", "three"]), b"ignored");
    assert!(p.ok, "{}", p.stderr);
    let p = push(
        &with(&base, &["--null", "--tier", "buffered"]),
        b"a\nb\0c\0",
    );
    assert!(p.ok, "{}", p.stderr);
    assert!(
        p.stdout.starts_with("acked 2 records (buffered)"),
        "{}",
        p.stdout
    );
    let p = push(&with(&base, &["--raw", "--json"]), b"x\ny\n");
    assert!(p.ok, "{}", p.stderr);
    let summary: serde_json::Value = serde_json::from_str(&p.stdout).unwrap();
    assert_eq!(summary["acked"], 1);
    assert_eq!(summary["ok"], true);
    assert_eq!(stored(&d), ["one", "two", "three", "a\nb", "c", "x\ny\n"]);
}

#[test]
fn an_empty_line_stops_the_run_after_what_came_before_is_acked() {
    let d = Daemon::start("[server]\nshards = 1\n");
    let base = config_args(&d);
    let p = push(
        &base.iter().map(String::as_str).collect::<Vec<_>>(),
        b"a\nb\n\nc\n",
    );
    assert!(!p.ok);
    assert!(p.stderr.contains("line 3 is empty"), "{}", p.stderr);
    assert!(p.stdout.starts_with("acked 2 records"), "{}", p.stdout);
    assert_eq!(stored(&d), ["a", "b"]);
    let p = push(&with(&base, &["--skip-empty"]), b"\nd\n\ne\n");
    assert!(p.ok, "{}", p.stderr);
    assert!(p.stdout.contains("2 empty lines skipped"), "{}", p.stdout);
    assert_eq!(stored(&d), ["a", "b", "d", "e"]);
}

#[test]
fn a_record_over_the_daemons_cap_is_refused_locally_naming_its_line() {
    let d = Daemon::start("[server]\npayload_bytes_max = 1024\n");
    let base = config_args(&d);
    let input = format!("ok\n{}\nafter\n", "x".repeat(2000));
    let p = push(&with(&base, &["--batch", "1"]), input.as_bytes());
    assert!(!p.ok);
    assert!(
        // Read no further than the cap allows (1024 - 8 + 1 bytes).
        p.stderr
            .contains("line 2 is over 1016 bytes (read no further)")
            && p.stderr.contains("cap of 1024"),
        "{}",
        p.stderr
    );
    assert_eq!(stored(&d), ["ok"]);
    // A batch is cut before it would pass the cap: 10 records of 300 bytes
    // go as 4 frames (3 + 3 + 3 + 1) however large --batch is.
    let input: String = (0..10)
        .map(|i| format!("{i}{}\n", "y".repeat(299)))
        .collect();
    let p = push(&with(&base, &["--batch", "256"]), input.as_bytes());
    assert!(p.ok, "{}", p.stderr);
    assert!(
        p.stdout.starts_with("acked 10 records (sync) in 4 frames"),
        "{}",
        p.stdout
    );
}

#[test]
fn a_fatal_nack_prints_its_reason_and_the_first_line_it_covered() {
    let d = Daemon::start("[server]\npayload_bytes_max = 1024\n");
    // With --socket the daemon's cap is unknown: the daemon itself refuses.
    let socket = d.socket_path().display().to_string();
    let input = format!("ok\n{}\nafter\n", "x".repeat(2000));
    let p = push(&["--socket", &socket, "--batch", "1"], input.as_bytes());
    assert!(!p.ok);
    assert!(
        p.stderr.contains("payload_too_large") && p.stderr.contains("from line 2 on"),
        "{}",
        p.stderr
    );
    assert!(p.stdout.starts_with("acked 1 records"), "{}", p.stdout);
}

/// 64 KiB records into a 4 MiB WAB whose sink holds everything.
fn overloading_input(n: usize) -> Vec<u8> {
    let mut input = Vec::new();
    for i in 0..n {
        let mut r = format!("big-{i}-").into_bytes();
        r.resize(64 * 1024, b'b');
        input.extend_from_slice(&r);
        input.push(b'\n');
    }
    input
}

const SMALL_WAB: &str =
    "[server]\nshards = 1\n[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 1048576\n";

#[test]
fn overloaded_is_retried_until_retry_for_then_reported() {
    let d = Daemon::start(SMALL_WAB);
    let base = config_args(&d);
    let p = push(
        &with(&base, &["--batch", "1", "--retry-for", "1"]),
        &overloading_input(200),
    );
    assert!(!p.ok, "{}", p.stdout);
    assert!(
        p.stderr.contains("overloaded") && p.stderr.contains("gave up after --retry-for 1.0 s"),
        "{}",
        p.stderr
    );
    assert!(
        p.stdout.contains("frames resent after retryable nacks"),
        "{}",
        p.stdout
    );
}

#[test]
fn overloaded_batches_go_through_once_delivery_frees_space() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let d = Daemon::start(&format!(
        "{SMALL_WAB}[sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 200\n",
        rx.url()
    ));
    let base = config_args(&d);
    let p = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(1500));
            rx.set_status(200);
        });
        push(
            &with(&base, &["--batch", "1", "--retry-for", "60"]),
            &overloading_input(150),
        )
    });
    assert!(p.ok, "{}{}", p.stdout, p.stderr);
    assert!(p.stdout.starts_with("acked 150 records"), "{}", p.stdout);
    assert!(
        p.stdout.contains("frames resent after retryable nacks"),
        "{}",
        p.stdout
    );
}

#[test]
fn no_daemon_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("absent.sock").display().to_string();
    let p = push(&["--socket", &socket, "x"], b"");
    assert!(!p.ok);
    assert!(
        p.stderr.contains("absent.sock") && p.stderr.contains("is the daemon running"),
        "{}",
        p.stderr
    );
}
