//! Hot reload of the `[sink]` table end to end: `spillway ctl reload`,
//! SIGHUP and `--watch-config` switch a running daemon between two real
//! HTTP receivers and the file plugin under load; broken files are refused
//! with a message naming the problem while delivery goes on; a sink whose
//! endpoint is down is applied with a warning and retries; changes outside
//! `[sink]` are reported as needing a restart; a daemon on the embedded
//! default has no file to reload.
//!
//! Timing is only ever bounded from above by generous liveness bounds.

use std::collections::HashSet;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::plugins::*;
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// Upper bound for "eventually delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after `ctl reload` returned a new record must go to the new sink.
const SWITCH_GRACE: Duration = Duration::from_millis(500);

/// A `[sink]` table for an HTTP receiver, with quick retries.
fn http_sink(rx: &HttpReceiver) -> String {
    format!("[sink]\ntype = \"http\"\nurl = \"{}\"\nlinger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 300\n", rx.url())
}

/// Payloads `rx` accepted (answered 2xx) so far.
fn http_payloads(rx: &HttpReceiver) -> HashSet<String> {
    rx.accepted_records().iter().map(|r| r.text()).collect()
}

/// Lines of an NDJSON output file as text.
fn file_payloads(path: &Path) -> HashSet<String> {
    ndjson_lines(path)
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

/// Push `"{tag}:{i}"` for `i in 0..n` at Sync; each must be acked.
fn push_tagged(d: &Daemon, tag: &str, n: usize) -> Vec<String> {
    let mut c = d.client();
    (0..n)
        .map(|i| {
            let p = format!("{tag}:{i}");
            c.push(Tier::Sync, p.as_bytes())
                .unwrap_or_else(|e| panic!("push {p}: {e}; log:\n{}", d.stderr()));
            p
        })
        .collect()
}

/// Wait until every payload of `want` is in `have()`; panics with `what` after the timeout.
fn wait_delivered(
    d: &Daemon,
    want: &[String],
    what: &str,
    mut have: impl FnMut() -> HashSet<String>,
) {
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        let h = have();
        want.iter().all(|p| h.contains(p))
    });
    if !ok {
        let h = have();
        let missing: Vec<&String> = want.iter().filter(|p| !h.contains(*p)).take(10).collect();
        panic!(
            "{what}: never delivered (first few): {missing:?}; ctl stats:\n{}\nlog:\n{}",
            stats(d),
            d.stderr()
        );
    }
}

// ---------------------------------------------------------------- 1. A -> B -> plugin -> A under load

/// What one continuous producer did.
struct AckLog {
    tag: String,
    /// (payload, when the push was sent, when its ack arrived)
    acks: Vec<(String, Instant, Instant)>,
    overloaded: u64,
    error: Option<String>,
}

/// Pushes `"{tag}:{n}"` at Sync, one at a time, until `stop`.
fn spawn_producer(d: &Daemon, tag: &str, stop: Arc<AtomicBool>) -> thread::JoinHandle<AckLog> {
    let mut c = d.client();
    let tag = tag.to_string();
    thread::spawn(move || {
        let mut log = AckLog {
            tag: tag.clone(),
            acks: Vec::new(),
            overloaded: 0,
            error: None,
        };
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let p = format!("{tag}:{n}");
            n += 1;
            let sent = Instant::now();
            match c.push(Tier::Sync, p.as_bytes()) {
                Ok(()) => log.acks.push((p, sent, Instant::now())),
                Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => log.overloaded += 1,
                Err(e) => {
                    log.error = Some(e.to_string());
                    break;
                }
            }
            // Continuous but not a flood: a few thousand records a second.
            thread::sleep(Duration::from_micros(200));
        }
        log
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    A,
    B,
    Plugin,
}

#[test]
fn ctl_reload_under_load_switches_a_to_b_to_plugin_and_back_without_losing_a_record() {
    let rx_a = HttpReceiver::start();
    let rx_b = HttpReceiver::start();
    let out = tempfile::tempdir().unwrap();
    let pfile = out.path().join("plugin.ndjson");
    let sink_a = http_sink(&rx_a);
    let sink_b = http_sink(&rx_b);
    let sink_p = file_plugin_sink(
        &pfile,
        "linger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 300",
        "",
    );
    let mut d = Daemon::start(&sink_a);

    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..2)
        .map(|i| spawn_producer(&d, &format!("load{i}"), stop.clone()))
        .collect();
    let t0 = Instant::now();
    thread::sleep(Duration::from_millis(1000));

    // (destination, first send time that must land there, last send time that must)
    let mut windows: Vec<(Dest, Instant, Instant)> = Vec::new();
    let mut reloads: Vec<(Dest, Instant, Instant)> = Vec::new();
    let (mut dest, mut from) = (Dest::A, t0);
    let steps = [
        (
            Dest::B,
            &sink_b,
            vec!["sink default switched to http".to_string(), rx_b.url()],
        ),
        (
            Dest::Plugin,
            &sink_p,
            vec!["sink default switched to plugin spillway-plugin-file".to_string()],
        ),
        (
            Dest::A,
            &sink_a,
            vec!["sink default switched to http".to_string(), rx_a.url()],
        ),
    ];
    for (next, cfg, expect) in steps {
        let started = Instant::now();
        // Records sent in the last moments before a reload may still be
        // queued for delivery when it lands: they may go either way.
        windows.push((dest, from, started - Duration::from_millis(300)));
        d.reconfigure(cfg);
        let f = ctl_config(&d, &["reload"]);
        let done = Instant::now();
        assert!(
            f.status.success(),
            "ctl reload to {next:?} exited with {}: {}{}\nlog:\n{}",
            f.status,
            f.stdout,
            f.stderr,
            d.stderr()
        );
        for e in &expect {
            assert!(
                f.stdout.contains(e.as_str()),
                "ctl reload to {next:?} should say {e:?}, said:\n{}",
                f.stdout
            );
        }
        reloads.push((next, started, done));
        dest = next;
        from = done + SWITCH_GRACE;
        thread::sleep(Duration::from_millis(1500));
    }
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<AckLog> = producers
        .into_iter()
        .map(|h| h.join().expect("producer panicked"))
        .collect();
    windows.push((dest, from, Instant::now()));

    for log in &logs {
        assert!(
            log.error.is_none(),
            "producer {} failed: {:?}; log:\n{}",
            log.tag,
            log.error,
            d.stderr()
        );
        assert_eq!(
            log.overloaded, 0,
            "producer {} got Overloaded nacks during the reloads",
            log.tag
        );
    }
    let s = stats(&d);
    assert_eq!(stat(&s, "reloads_succeeded"), 3, "ctl stats:\n{s}");
    assert_eq!(stat(&s, "reloads_failed"), 0, "ctl stats:\n{s}");

    // Every acked record was delivered somewhere (at least once).
    let acked: Vec<&(String, Instant, Instant)> = logs.iter().flat_map(|l| &l.acks).collect();
    let all = || -> HashSet<String> {
        let mut h = http_payloads(&rx_a);
        h.extend(http_payloads(&rx_b));
        h.extend(file_payloads(&pfile));
        h
    };
    let wanted: Vec<String> = acked.iter().map(|a| a.0.clone()).collect();
    wait_delivered(&d, &wanted, "acked records after the reloads", all);
    let (in_a, in_b, in_p) = (
        http_payloads(&rx_a),
        http_payloads(&rx_b),
        file_payloads(&pfile),
    );
    let set = |dest: Dest| match dest {
        Dest::A => &in_a,
        Dest::B => &in_b,
        Dest::Plugin => &in_p,
    };

    // Records sent well after a reload went to the new sink, and only there.
    for (i, (dest, from, to)) in windows.iter().enumerate() {
        let inside: Vec<&String> = acked
            .iter()
            .filter(|a| a.1 >= *from && a.1 < *to)
            .map(|a| &a.0)
            .collect();
        assert!(
            inside.len() >= 20,
            "window {i} ({dest:?}) holds only {} records: the producers stalled?",
            inside.len()
        );
        for p in &inside {
            assert!(
                set(*dest).contains(*p),
                "window {i}: {p} was sent while {dest:?} was the sink but did not reach it"
            );
            for other in [Dest::A, Dest::B, Dest::Plugin]
                .into_iter()
                .filter(|o| o != dest)
            {
                assert!(
                    !set(other).contains(*p),
                    "window {i}: {p} was sent ≥ {SWITCH_GRACE:?} after the switch to {dest:?} but reached {other:?}"
                );
            }
        }
    }

    // The longest pause of the producers (a generous liveness bound only).
    let mut worst = (Duration::ZERO, String::new(), Duration::ZERO);
    for log in &logs {
        for w in log.acks.windows(2) {
            let gap = w[1].2 - w[0].2;
            if gap > worst.0 {
                worst = (gap, log.tag.clone(), w[0].2 - t0);
            }
        }
    }
    // Per reload: the longest gap between acks that overlaps the reload
    // (from 100 ms before `ctl reload` started to 500 ms after it returned).
    let reload_times: Vec<String> = reloads
        .iter()
        .map(|(to, s, e)| {
            let (lo, hi) = (*s - Duration::from_millis(100), *e + SWITCH_GRACE);
            let near = logs
                .iter()
                .flat_map(|l| {
                    l.acks
                        .windows(2)
                        .filter(|w| w[1].2 >= lo && w[0].2 <= hi)
                        .map(|w| w[1].2 - w[0].2)
                })
                .max()
                .unwrap_or_default();
            format!(
                "to {to:?} at {:.3}s (ctl took {} ms, longest gap around it {:.1} ms)",
                (*s - t0).as_secs_f64(),
                (*e - *s).as_millis(),
                near.as_secs_f64() * 1000.0
            )
        })
        .collect();
    say(&format!(
        "reload under load: {} acks; longest gap between consecutive acks {:.3} ms (producer {}, at {:.3}s); reloads: {}\n",
        acked.len(),
        worst.0.as_secs_f64() * 1000.0,
        worst.1,
        worst.2.as_secs_f64(),
        reload_times.join(", ")
    ));
    assert!(
        worst.0 < Duration::from_secs(2),
        "producers stalled for {:?} during the reloads",
        worst.0
    );
    d.terminate();
}

// ---------------------------------------------------------------- 2. SIGHUP

#[test]
fn sighup_reloads_the_config_file() {
    let rx_a = HttpReceiver::start();
    let rx_b = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx_a));
    let before = push_tagged(&d, "before-hup", 10);
    wait_delivered(&d, &before, "records before SIGHUP", || {
        http_payloads(&rx_a)
    });
    let s = stats(&d);
    assert_eq!(stat(&s, "reloads_succeeded"), 0, "ctl stats:\n{s}");

    d.reconfigure(&http_sink(&rx_b));
    let pid = d.pid().unwrap() as libc::pid_t;
    // SAFETY: kill(2) on our own, unreaped child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let reloaded = wait_every(Duration::from_millis(50), Duration::from_secs(10), || {
        stat(&stats(&d), "reloads_succeeded") == 1
    });
    let s = stats(&d);
    assert!(
        reloaded,
        "reloads_succeeded did not reach 1 after SIGHUP; ctl stats:\n{s}\nlog:\n{}",
        d.stderr()
    );
    assert_eq!(stat(&s, "reloads_failed"), 0, "ctl stats:\n{s}");
    assert!(
        stat_sink(&s).contains(&rx_b.url()),
        "ctl stats names the new sink:\n{s}"
    );
    assert!(d.is_running(), "SIGHUP must not stop the daemon");
    assert!(
        d.stderr().contains("SIGHUP"),
        "the log mentions the SIGHUP:\n{}",
        d.stderr()
    );

    thread::sleep(SWITCH_GRACE);
    let after = push_tagged(&d, "after-hup", 20);
    wait_delivered(&d, &after, "records after SIGHUP, at B", || {
        http_payloads(&rx_b)
    });
    let in_a = http_payloads(&rx_a);
    let wrong: Vec<&String> = after.iter().filter(|p| in_a.contains(*p)).collect();
    assert!(
        wrong.is_empty(),
        "records pushed after the SIGHUP reload reached the old sink A: {wrong:?}"
    );
    d.terminate();
}

// ---------------------------------------------------------------- 3. --watch-config

/// A daemon started by hand with `run --config <file> --watch-config`
/// on a [`Daemon`]'s folder and config; SIGKILLed when dropped.
struct Watched {
    child: Option<Child>,
    log: PathBuf,
}

impl Watched {
    fn start(d: &Daemon) -> Watched {
        let log = d.dir().join("watch-stderr.log");
        let child = run_command(d.dir())
            .arg("--config")
            .arg(d.config_path())
            .arg("--watch-config")
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawning spillway");
        let mut w = Watched {
            child: Some(child),
            log,
        };
        let socket = d.socket_path().to_path_buf();
        let up = wait_until(START_TIMEOUT, || answers_health(&socket));
        assert!(
            up,
            "the daemon with --watch-config did not come up; log:\n{}",
            w.log_text()
        );
        assert!(w.child.as_mut().unwrap().try_wait().unwrap().is_none());
        w
    }

    fn log_text(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(
            &fs::read(&self.log).unwrap_or_default(),
        ))
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn watch_config_switches_the_sink_when_the_file_changes() {
    let rx_a = HttpReceiver::start();
    let rx_b = HttpReceiver::start();
    let mut d = Daemon::configure(&http_sink(&rx_a));
    let w = Watched::start(&d);
    let mut c = Client::connect(d.socket_path()).unwrap();
    c.set_timeout(Some(IO_TIMEOUT)).unwrap();
    c.push(Tier::Sync, b"watch-before").unwrap();
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        http_payloads(&rx_a).contains("watch-before")
    });
    assert!(ok, "nothing reached A; log:\n{}", w.log_text());

    // Edit the file (no ctl, no signal), then push a record every 100 ms
    // until one reaches B.
    thread::sleep(Duration::from_millis(50));
    d.reconfigure(&http_sink(&rx_b));
    let edited = Instant::now();
    let mut i = 0;
    let switched = wait_every(Duration::from_millis(100), Duration::from_secs(10), || {
        c.push(Tier::Sync, format!("watch-probe:{i}").as_bytes())
            .unwrap();
        i += 1;
        !rx_b.accepted_records().is_empty()
    });
    let took = edited.elapsed();
    assert!(
        switched,
        "the sink did not switch to B within 10 s of the edit; log:\n{}",
        w.log_text()
    );
    say(&format!(
        "--watch-config: the first record reached B {} ms after the edit\n",
        took.as_millis()
    ));
    assert!(
        took < Duration::from_secs(5),
        "the switch took {took:?}; expected within a few seconds"
    );
    let s = ctl_socket(&admin_socket(&d), &["stats", "--flat"]).stdout;
    assert_eq!(stat(&s, "reloads_succeeded"), 1, "ctl stats:\n{s}");
    assert!(
        w.log_text().contains("config reloaded"),
        "log:\n{}",
        w.log_text()
    );

    thread::sleep(SWITCH_GRACE);
    let after: Vec<String> = (0..20).map(|i| format!("watch-after:{i}")).collect();
    for p in &after {
        c.push(Tier::Sync, p.as_bytes()).unwrap();
    }
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        let h = http_payloads(&rx_b);
        after.iter().all(|p| h.contains(p))
    });
    assert!(
        ok,
        "records after the edit did not all reach B; log:\n{}",
        w.log_text()
    );
    let in_a = http_payloads(&rx_a);
    assert!(
        after.iter().all(|p| !in_a.contains(p)),
        "records after the switch reached the old sink A"
    );
    drop(w);
    drop(d);
}

// ---------------------------------------------------------------- 4. broken files are refused

/// Starts a daemon delivering to A, breaks its config file with `breaker`
/// (which returns what the error must name; the broken file always points
/// at B), and checks: `ctl reload` exits non-zero naming the problem,
/// `reloads_failed` counts it, the running sink is still A, and records
/// pushed afterwards reach A (and nothing reaches B).
fn check_rejected_reload(what: &str, breaker: impl Fn(&mut Daemon, &HttpReceiver) -> Vec<String>) {
    let rx_a = HttpReceiver::start();
    let rx_b = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx_a));
    let before = push_tagged(&d, "before", 5);
    wait_delivered(&d, &before, "records before the reload", || {
        http_payloads(&rx_a)
    });

    let names = breaker(&mut d, &rx_b);
    let mut unnamed: Vec<String> = Vec::new();
    // Through the admin socket directly, so what is checked is the daemon's
    // own verdict (`ctl --config` with a broken file also asks the daemon,
    // see testing/tests/tests/check.rs, but first warns that the file did not load).
    for attempt in 1..=2u64 {
        let f = ctl_socket(&admin_socket(&d), &["reload"]);
        assert!(
            !f.status.success(),
            "{what}: ctl reload should fail, it exited {} saying:\n{}{}\nconfig:\n{}",
            f.status,
            f.stdout,
            f.stderr,
            d.config_text()
        );
        let message = format!("{}{}", f.stdout, f.stderr);
        assert!(
            message.contains("reload rejected"),
            "{what}: ctl reload said:\n{message}"
        );
        // Checked last, so a poor message does not hide the other checks.
        for name in &names {
            if !message.contains(name.as_str()) {
                unnamed.push(format!("{name:?} missing from: {}", message.trim()));
            }
        }
        let s = stats(&d);
        assert_eq!(
            stat(&s, "reloads_failed"),
            attempt,
            "{what}: ctl stats:\n{s}"
        );
        assert_eq!(stat(&s, "reloads_succeeded"), 0, "{what}: ctl stats:\n{s}");
        assert!(
            stat_sink(&s).contains(&rx_a.url()),
            "{what}: the running sink is still A:\n{s}"
        );
        assert!(d.is_running(), "{what}: the daemon stopped");
        let after = push_tagged(&d, &format!("after{attempt}"), 10);
        wait_delivered(
            &d,
            &after,
            &format!("{what}: records after the rejected reload"),
            || http_payloads(&rx_a),
        );
    }
    assert_eq!(
        rx_b.request_count(),
        0,
        "{what}: nothing may reach B: the config naming it was rejected"
    );
    assert!(
        unnamed.is_empty(),
        "{what}: the ctl reload message does not name the problem:\n{}\ndaemon log (tail):\n{}",
        unnamed.join("\n"),
        log_tail(&d, 8)
    );
    d.terminate();
}

#[test]
fn reload_rejects_a_toml_syntax_error_and_keeps_delivering() {
    check_rejected_reload("TOML syntax error", |d, rx_b| {
        d.reconfigure(&http_sink(rx_b));
        let mut text = d.config_text();
        text.push_str("\nlinger_ms = = 5\n");
        fs::write(d.config_path(), &text).unwrap();
        let line = text
            .lines()
            .position(|l| l.starts_with("linger_ms = = 5"))
            .unwrap()
            + 1;
        vec![
            d.config_path().display().to_string(),
            format!("line {line}"),
        ]
    });
}

#[test]
fn reload_rejects_a_negative_linger_ms_naming_the_key() {
    check_rejected_reload("linger_ms = -1", |d, rx_b| {
        d.reconfigure(&format!("{}linger_ms = -1\n", http_sink(rx_b)));
        vec!["linger_ms".to_string()]
    });
}

#[test]
fn reload_rejects_max_records_zero_naming_the_key() {
    check_rejected_reload("batch_records_max = 0", |d, rx_b| {
        d.reconfigure(&format!("{}batch_records_max = 0\n", http_sink(rx_b)));
        vec!["sink.batch_records_max = 0".to_string()]
    });
}

#[test]
fn reload_rejects_a_plugin_path_that_does_not_exist_naming_the_path() {
    check_rejected_reload("missing plugin", |d, _| {
        let missing = d.dir().join("plugins").join("libgone.so");
        d.reconfigure(&format!(
            "[sink]\ntype = \"plugin\"\npath = {}\n",
            toml_str(missing.display().to_string())
        ));
        vec![missing.display().to_string()]
    });
}

// ---------------------------------------------------------------- 5. a reload during the outage

/// The operator re-points a sink during the outage it is meant to fix:
/// A goes down with records pending; a reload to B, which is down too, is
/// applied (exit 0) with the health check's answer as a warning, and the
/// sink retries against B; a reload to C, which is up, delivers every
/// record acked since A went down, none lost. Only a file that does not
/// load or a sink that cannot be built is refused (section 4).
#[test]
fn a_reload_to_an_endpoint_that_is_down_is_applied_with_a_warning_and_retries() {
    let rx_a = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx_a));
    let before = push_tagged(&d, "before", 5);
    wait_delivered(&d, &before, "records before the outage", || {
        http_payloads(&rx_a)
    });
    drop(rx_a);
    let during = push_tagged(&d, "during", 20);
    // B: an address nothing listens on (a receiver started and stopped).
    let dead_url = {
        let rx_b = HttpReceiver::start();
        rx_b.url()
    };
    d.reconfigure(&format!(
        "[sink]\ntype = \"http\"\nurl = \"{dead_url}\"\nlinger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 300\n"
    ));
    let f = ctl_socket(&admin_socket(&d), &["reload"]);
    let said = format!("{}{}", f.stdout, f.stderr);
    assert!(
        f.status.success(),
        "a reload to a sink whose endpoint is down was refused: {said}"
    );
    assert!(
        said.contains("warning: sink default (")
            && said.contains("fails its health check")
            && said.contains("applied all the same"),
        "the reload did not pass on the health check's answer: {said}"
    );
    assert!(
        d.stderr().contains("fails its health check"),
        "the warning is not in the log:\n{}",
        log_tail(&d, 20)
    );
    let s = stats(&d);
    assert_eq!(stat(&s, "reloads_succeeded"), 1, "ctl stats:\n{s}");
    assert_eq!(stat(&s, "reloads_failed"), 0, "ctl stats:\n{s}");
    // The new sink retries against B, saying why; the daemon takes writes.
    assert!(
        wait_until(DELIVERY_TIMEOUT, || {
            let h = d.health();
            h.contains("Retrying since")
                && h.lines()
                    .last()
                    .is_some_and(|l| l.starts_with("degraded: "))
        }),
        "the sink on B never said it retries:\n{}",
        d.health()
    );
    let on_b = push_tagged(&d, "on-b", 10);

    let rx_c = HttpReceiver::start();
    d.reconfigure(&http_sink(&rx_c));
    let f = ctl_socket(&admin_socket(&d), &["reload"]);
    let said = format!("{}{}", f.stdout, f.stderr);
    assert!(f.status.success(), "the reload to C: {said}");
    assert!(!said.contains("warning:"), "C is up, yet: {said}");
    let all: Vec<String> = during.iter().chain(&on_b).cloned().collect();
    wait_delivered(&d, &all, "records acked while A and B were down", || {
        http_payloads(&rx_c)
    });
    assert!(
        wait_until(DELIVERY_TIMEOUT, || d.health().ends_with("\nready\n")),
        "{}",
        d.health()
    );
    d.terminate();
}

fn log_tail(d: &Daemon, lines: usize) -> String {
    let log = d.stderr();
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------- 5. outside [sink]

#[test]
fn a_change_outside_the_sink_table_is_reported_as_needing_a_restart_and_not_applied() {
    let rx_a = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx_a));
    d.reconfigure(&format!(
        "[server]\nconnections_max = 3\n{}",
        http_sink(&rx_a)
    ));
    let f = ctl_config(&d, &["reload"]);
    assert!(
        f.status.success(),
        "ctl reload exited {}: {}{}",
        f.status,
        f.stdout,
        f.stderr
    );
    assert!(
        f.stdout
            .lines()
            .any(|l| l.contains("server.connections_max") && l.contains("restart")),
        "ctl reload should say server.connections_max needs a restart:\n{}",
        f.stdout
    );
    assert!(
        f.stdout.contains("sinks unchanged"),
        "the sink table did not change:\n{}",
        f.stdout
    );

    // Not applied: more than 3 connections are still served.
    let mut clients: Vec<Client> = (0..8).map(|_| d.client()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.health()
            .unwrap_or_else(|e| panic!("connection {i} of 8 was not served after the reload: {e}"));
    }
    let s = stats(&d);
    assert_eq!(stat(&s, "connections_refused"), 0, "ctl stats:\n{s}");
    drop(clients);

    let after = push_tagged(&d, "outside-sink", 10);
    wait_delivered(&d, &after, "records after the restart-only change", || {
        http_payloads(&rx_a)
    });
    d.terminate();
}

// ---------------------------------------------------------------- 6. embedded default

#[test]
fn reload_on_the_embedded_default_config_says_there_is_no_file() {
    let dir = tempfile::Builder::new().prefix("swrl").tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let child = spillway_tests::spawn_on_embedded_default(dir.path(), &log);
    let w = Watched {
        child: Some(child),
        log,
    };
    let socket = dir.path().join("spillway-data/spillway.sock");
    let admin = dir.path().join("spillway-data/admin.sock");
    let up = wait_until(START_TIMEOUT, || admin.exists() && answers_health(&socket));
    assert!(
        up,
        "the daemon on the embedded default did not come up; log:\n{}",
        w.log_text()
    );

    let f = ctl_socket(&admin, &["reload"]);
    assert!(
        !f.status.success(),
        "ctl reload should fail on the embedded default; it said:\n{}{}",
        f.stdout,
        f.stderr
    );
    assert!(
        f.stderr.contains("no file to reload"),
        "ctl reload should say there is no file to reload:\n{}",
        f.stderr
    );
    let s = ctl_socket(&admin, &["stats", "--flat"]);
    assert!(s.status.success(), "ctl stats: {}", s.stderr);
    assert_eq!(
        stat(&s.stdout, "reloads_failed"),
        1,
        "ctl stats:\n{}",
        s.stdout
    );
    drop(w);
}
