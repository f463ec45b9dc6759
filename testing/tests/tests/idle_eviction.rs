//! Idle connections cannot lock producers out (issue 17, item 6), end to
//! end against the real binary: with `connections_max` idle sockets open,
//! a new producer's connection closes the one idle longest
//! (`server.evict_idle_connections`, on by default) and gets its Sync ack
//! at once, not after the idle timeout; the eviction is counted in `ctl
//! stats`. A connection with something in flight (here a frame half
//! received) is never evicted: the newcomer is refused instead.

use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::*;

/// Idle sockets held open (the daemon's `connections_max`).
const IDLE: usize = 300;

/// Wait until the daemon has no producer connection open. The start's
/// readiness probes are connections too: with room for two, a holder that
/// came while the daemon had not yet seen the last probe close was
/// refused, or evicted the probe (CI, under load).
fn no_connections_open(d: &Daemon) {
    assert!(
        wait_until(Duration::from_secs(10), || {
            stat(&d.ctl(&["stats", "--flat"]), "connections_open") == 0
        }),
        "connections still open after the start:\n{}",
        d.ctl(&["stats", "--flat"])
    );
}

/// A raw connection the daemon has accepted and answered once (so it is
/// counted and registered), then left idle.
fn idle_connection(d: &Daemon) -> RawConn {
    let mut c = d.raw();
    c.send(&health_frame());
    c.expect_frame(
        &expected_health_response(),
        "health check of an idle holder",
    );
    c
}

#[test]
fn idle_holders_are_evicted_so_a_producer_gets_its_ack_promptly() {
    let d = Daemon::start(&format!(
        "[server]\nconnections_max = {IDLE}\nevict_idle_after_ms = 200\n"
    ));
    no_connections_open(&d);
    let mut idle: Vec<RawConn> = (0..IDLE).map(|_| idle_connection(&d)).collect();
    // Idle long enough to be evictable (a fresh one never is).
    thread::sleep(Duration::from_millis(400));

    let started = Instant::now();
    let mut producer = Client::connect(d.socket_path()).expect("connecting the producer");
    producer.set_timeout(Some(Duration::from_secs(5))).unwrap();
    producer
        .push(Tier::Sync, b"a well-behaved producer")
        .unwrap_or_else(|e| {
            panic!(
                "the producer was locked out by {IDLE} idle connections: {e}; daemon log:\n{}",
                d.stderr()
            )
        });
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the producer's Sync ack took {took:?} with {IDLE} idle connections open"
    );

    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(
        stat(&stats, "connections_evicted"),
        1,
        "one idle connection makes room for one producer:\n{stats}"
    );
    assert_eq!(stat(&stats, "connections_refused"), 0, "{stats}");
    let metrics = d.ctl(&["metrics"]);
    assert!(
        metrics.contains("spillway_connections_evicted_total 1"),
        "the eviction is not in the metrics:\n{metrics}"
    );

    // Exactly one holder was closed (EOF); the rest are still served.
    let mut closed = 0;
    for c in idle.iter_mut() {
        if let ReadOutcome::Closed = c.read_frame_within(Duration::from_millis(5)) {
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "idle connections closed to let one producer in");
    let log = d.stderr();
    assert!(
        log.contains("closed the longest-idle connection"),
        "the eviction was not logged:\n{log}"
    );
    let mut survivor = idle
        .into_iter()
        .find_map(|mut c| {
            c.try_send(&health_frame()).ok()?;
            match c.read_frame_within(Duration::from_secs(2)) {
                ReadOutcome::Frame(f) => Some((c, f)),
                _ => None,
            }
        })
        .expect("the idle connections not evicted are still served");
    assert_eq!(survivor.1, expected_health_response());
    survivor.0.send(&health_frame());
    survivor.0.expect_health();
}

#[test]
fn a_connection_with_a_frame_in_flight_is_never_evicted() {
    let d = Daemon::start(
        "[server]\nconnections_max = 2\nevict_idle_after_ms = 0\nconnection_read_timeout_ms = 60000\n",
    );
    no_connections_open(&d);
    let frame = push_frame(Tier::Sync, b"half now, half later");
    let (first, rest) = frame.split_at(frame.len() / 2);
    let mut holders: Vec<RawConn> = (0..2).map(|_| idle_connection(&d)).collect();
    for h in holders.iter_mut() {
        h.send(first);
    }
    // Wait until the daemon itself holds both halves (a sleep guessed it,
    // and under load the daemon had not read one yet: it was evicted).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = d.ctl(&["stats", "--flat"]);
        if stat(&stats, "connections_mid_frame") == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "never mid-frame: {stats}");
        thread::sleep(Duration::from_millis(10));
    }

    // Both hold a frame in flight: the newcomer is refused, not let in.
    let mut newcomer = d.raw();
    let _ = newcomer.try_send(&health_frame());
    newcomer.expect_closed_within(Duration::from_secs(5));

    for h in holders.iter_mut() {
        h.send(rest);
        h.expect_frame(&expected_ack(), "the rest of a frame that was in flight");
    }
    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(stat(&stats, "connections_evicted"), 0, "{stats}");
    assert!(stat(&stats, "connections_refused") >= 1, "{stats}");
}

#[test]
fn eviction_can_be_turned_off() {
    let d = Daemon::start(
        "[server]\nconnections_max = 2\nevict_idle_connections = false\nevict_idle_after_ms = 0\n",
    );
    no_connections_open(&d);
    let _holders: Vec<RawConn> = (0..2).map(|_| idle_connection(&d)).collect();
    thread::sleep(Duration::from_millis(200));
    let mut newcomer = d.raw();
    let _ = newcomer.try_send(&health_frame());
    newcomer.expect_closed_within(Duration::from_secs(5));
    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(stat(&stats, "connections_evicted"), 0, "{stats}");
}
