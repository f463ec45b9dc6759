//! Batches in flight, against the real binary and a loopback HTTP
//! receiver: `batches_in_flight = N` overlaps up to N requests of a slow
//! downstream; `"adaptive"` learns how many a downstream takes (one that
//! answers 429 past 4 at once keeps it at or below 4, nothing lost) and
//! keeps what it learned across a restart; answers that come back out of
//! order move the checkpoint only over the contiguous prefix, so a SIGKILL
//! redelivers only what was not confirmed, and no more than
//! `batches_in_flight` batches are unsettled at once (out, or answered
//! behind one still out), so that is all a crash redelivers.
//!
//! Timing is only ever bounded from above by generous liveness timeouts.

use std::collections::HashSet;
use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Push `n` records `"{tag}:{i}"` at Sync; every one must be acked.
fn push_tagged(d: &Daemon, tag: &str, n: u64) -> Vec<String> {
    let mut c = d.client();
    (0..n)
        .map(|i| {
            let p = format!("{tag}:{i}");
            c.push(Tier::Sync, p.as_bytes())
                .unwrap_or_else(|e| panic!("push {p}: {e}"));
            p
        })
        .collect()
}

/// `sink{sink="default",shard="0"}.KEY` of `ctl stats`.
fn shard0_stat(d: &Daemon, key: &str) -> u64 {
    let stats = d.ctl(&["stats", "--flat"]);
    let prefix = format!("sink{{sink=\"default\",shard=\"0\"}}.{key} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in ctl stats:\n{stats}"))
}

fn sink_table(rx: &HttpReceiver, extra: &str) -> String {
    format!(
        "[server]\nshards = 1\n[sink]\ntype = \"http\"\nurl = \"{}\"\nbatch_records_max = 20\nlinger_ms = 1\nretry_initial_ms = 20\nretry_max_ms = 200\n{extra}",
        rx.url()
    )
}

/// Hold the sink (`ctl sink pause`) while `n` records are pushed, so its
/// backlog is there at once when it resumes.
fn push_backlog(d: &Daemon, tag: &str, n: u64) -> Vec<String> {
    d.ctl(&["sink", "pause", "default"]);
    let sent = push_tagged(d, tag, n);
    d.ctl(&["sink", "resume", "default"]);
    sent
}

/// A receiver that answers after 50 ms: four batches overlap (never
/// more), and every record arrives.
#[test]
fn a_fixed_limit_overlaps_that_many_batches_of_a_slow_receiver() {
    let rx = HttpReceiver::start();
    rx.set_delay(Duration::from_millis(50));
    let d = Daemon::start(&sink_table(&rx, "batches_in_flight = 4\n"));
    let sent = push_backlog(&d, "slow", 600);
    rx.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert_eq!(
        rx.in_flight_max(),
        4,
        "requests answered at once with batches_in_flight = 4\n{}",
        rx.summary()
    );
    assert_eq!(shard0_stat(&d, "batches_in_flight_limit"), 4);
    assert!(wait_until(DELIVERY_TIMEOUT, || shard0_stat(
        &d,
        "checkpoint"
    ) >= 600));
}

/// A downstream that answers 429 to whatever finds 4 requests in progress:
/// the adaptive limit grows past 1, spends most of the run at or below 4,
/// nothing is lost; the limit it learned is kept across a restart.
#[test]
fn adaptive_settles_at_or_below_a_receivers_cap_and_keeps_it_across_a_restart() {
    let rx = HttpReceiver::start();
    rx.set_delay(Duration::from_millis(50));
    rx.set_cap_in_flight(Some(4));
    let mut d = Daemon::start(&sink_table(&rx, "batches_in_flight = \"adaptive\"\n"));
    let sent = push_backlog(&d, "capped", 1500);
    let mut limits = Vec::new();
    let started = Instant::now();
    while shard0_stat(&d, "checkpoint") < 1500 {
        assert!(
            started.elapsed() < DELIVERY_TIMEOUT,
            "delivery did not finish; limits seen {limits:?}\n{}",
            rx.summary()
        );
        limits.push(shard0_stat(&d, "batches_in_flight_limit"));
        thread::sleep(Duration::from_millis(50));
    }
    rx.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    eprintln!("adaptive limit, sampled every 50 ms: {limits:?}");
    let mut sorted = limits.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    assert!(
        median <= 4,
        "median limit {median} over the run; seen {limits:?}"
    );
    assert!(
        sorted.last().copied().unwrap_or(0) >= 3,
        "the limit never grew: {limits:?}"
    );
    let refused = rx
        .requests()
        .iter()
        .filter(|r| r.status == Some(429))
        .count();
    assert!(refused > 0, "the limit never reached the receiver's cap");

    // What it learned is kept: the next run starts there, not at 1.
    let learned_at_stop = shard0_stat(&d, "batches_in_flight_limit");
    d.terminate();
    let file = d.data_dir().join("sinks/default/in-flight-000");
    let kept: u64 = fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(kept, learned_at_stop, "the learned limit on disk");
    d.spawn();
    assert!(
        wait_until(DELIVERY_TIMEOUT, || shard0_stat(
            &d,
            "batches_in_flight_limit"
        ) == kept),
        "the restarted daemon's limit is {}, not the {kept} it learned",
        shard0_stat(&d, "batches_in_flight_limit")
    );
}

/// Batches answered out of order: the oldest one is held by the receiver
/// while the later ones are answered, so the checkpoint stays before it.
/// A SIGKILL then redelivers from the checkpoint: the held batch and those
/// answered after it come again, and nothing confirmed before does.
#[test]
fn a_sigkill_with_batches_answered_out_of_order_redelivers_only_the_unconfirmed() {
    let rx = HttpReceiver::start();
    // The held request must not time out at the sink meanwhile.
    let mut d = Daemon::start(&sink_table(
        &rx,
        "batches_in_flight = 4\ntimeout_ms = 600000\n",
    ));
    let confirmed = push_tagged(&d, "confirmed", 100);
    rx.wait_for_payloads(&confirmed, DELIVERY_TIMEOUT);
    assert!(wait_until(DELIVERY_TIMEOUT, || shard0_stat(
        &d,
        "checkpoint"
    ) >= 100));

    // The first batch of the next records hangs; the three after it are
    // answered, and no more are offered: a batch answered behind one still
    // out keeps its slot until it is settled, so a crash redelivers at most
    // batches_in_flight batches (4 × 20 records).
    rx.hold_next(b"later:", Duration::from_secs(600));
    let later = push_backlog(&d, "later", 200);
    let answered_later = || {
        let got: HashSet<String> = rx.accepted_records().iter().map(|r| r.text()).collect();
        later.iter().filter(|p| got.contains(*p)).count()
    };
    assert!(
        wait_until(DELIVERY_TIMEOUT, || answered_later() >= 60),
        "the batches after the held one were not answered\n{}",
        rx.summary()
    );
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        answered_later(),
        60,
        "batches were offered past batches_in_flight unsettled ones\n{}",
        rx.summary()
    );
    assert_eq!(
        shard0_stat(&d, "checkpoint"),
        100,
        "the checkpoint moved past a batch still in flight"
    );
    let before = rx.requests().len();
    d.kill9();
    d.spawn();
    rx.wait_for_payloads(&later, DELIVERY_TIMEOUT);
    let again: Vec<String> = rx.requests()[before..]
        .iter()
        .enumerate()
        .filter(|(_, r)| r.accepted())
        .flat_map(|(i, r)| spillway_tests::receiver::decode_request(r, before + i).unwrap())
        .map(|r| r.text())
        .collect();
    assert!(
        again.iter().all(|p| p.starts_with("later:")),
        "records confirmed before the kill were delivered again: {:?}",
        &again[..again.len().min(10)]
    );
    let mut copies: std::collections::HashMap<&String, usize> = Default::default();
    for p in &again {
        *copies.entry(p).or_default() += 1;
    }
    assert!(
        later.iter().all(|p| copies.contains_key(p)),
        "an unconfirmed record was not redelivered after the kill"
    );
    // Before the kill the receiver took 60 of them (the held request was
    // never answered): those are the duplicates, within 4 batches of 20.
    let before_kill: HashSet<String> = rx.requests()[..before]
        .iter()
        .enumerate()
        .filter(|(_, r)| r.accepted())
        .flat_map(|(i, r)| spillway_tests::receiver::decode_request(r, i).unwrap())
        .map(|r| r.text())
        .collect();
    let duplicates = later.iter().filter(|p| before_kill.contains(*p)).count();
    assert!(
        duplicates <= 80,
        "{duplicates} records delivered again after the kill, more than batches_in_flight × max_records"
    );
}
