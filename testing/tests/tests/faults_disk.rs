//! Disk and sink faults operators actually meet (issue 7), end to end
//! against the real binary: a disk that fills up and frees again (by
//! delivery, or because another program's file goes away), a full disk with
//! a backlog, a restart on a full disk, a disk smaller than the default
//! settings assume, sink outages of 5 s and 60 s, and small records queued
//! behind 16 MiB ones.
//!
//! The disk tests put the daemon's data folder on a size-limited tmpfs
//! (real ENOSPC). They need root to mount it: in CI (`CI=true`) a test that
//! cannot mount fails; elsewhere it prints why it skips.
//!
//! What they hold the daemon to (docs/configuration.md, `fsync_failures_max`
//! and `wab_bytes_max`): a full disk gives the retryable Overloaded nack,
//! never InternalError and never an ack that is lost later; a shard that
//! cannot write is `Unwritable` in `ctl health` and the wire HealthCheck
//! answers a nack; it turns `Running` again by itself (no restart) within
//! about a second of space being back; delivery frees space even on a disk
//! with 0 bytes left; the daemon starts on a full disk; preallocation never
//! leaves `.open.tmp` files; `spillway run` warns when `wab_bytes_max`
//! exceeds the free space; a backing-off drain probes the sink once a
//! second, so delivery resumes within about 2 s of the sink's return.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::disk::{
    allocated_bytes, files_ending_with, fill_until_enospc, tail, write_filler, DiskDaemon,
    SwitchProxy, Tmpfs,
};
use spillway_tests::receiver::{duplicates, HttpReceiver, Received};
use spillway_tests::*;

/// The latency test runs alone (it loads both cores); the others share.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner())
}

use sink_sdk::units::MIB;
/// Size of one test record (the WAB fills in a few thousand pushes).
const REC_BYTES: usize = 4096;
/// Records per PushBatch while filling the disk.
const BATCH: usize = 16;
/// Upper bound for "every acked record was delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(90);
/// The log line `spillway run` writes when the disk is smaller than the budget.
const DISK_WARNING: &str = "wab.wab_bytes_max is larger than the free space of the data folder";

/// A `[sink]` table posting to `url`, plus extra `key = value` lines.
fn http_sink(url: &str, extra: &str) -> String {
    format!("[sink]\ntype = \"http\"\nurl = \"{url}\"\n{extra}\n")
}

/// `"{tag}:{n};"` padded with `x` to [`REC_BYTES`].
fn payload(tag: &str, n: u64) -> Vec<u8> {
    let mut p = format!("{tag}:{n};").into_bytes();
    p.resize(REC_BYTES, b'x');
    p
}

/// The `"{tag}:{n}"` identity of a [`payload`].
fn key(p: &[u8]) -> String {
    let end = p.iter().position(|b| *b == b';').unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

/// What one push got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Got {
    Acked,
    Overloaded,
}

/// One producer connection (pinned to one shard), numbering its records
/// and remembering every one that was acknowledged.
struct Producer {
    tag: String,
    client: Client,
    next: u64,
    acked: Vec<u64>,
    overloaded: u64,
}

impl Producer {
    fn new(dd: &DiskDaemon, tag: &str) -> Producer {
        Producer {
            tag: tag.to_string(),
            client: dd.client(),
            next: 0,
            acked: Vec::new(),
            overloaded: 0,
        }
    }

    /// Push `records` records in one PushBatch at Sync. An ack or the
    /// retryable Overloaded are the only acceptable answers.
    fn push(&mut self, records: usize, log: &dyn Fn() -> String) -> Got {
        let ns = self.next..self.next + records as u64;
        self.next += records as u64;
        let recs: Vec<Vec<u8>> = ns.clone().map(|n| payload(&self.tag, n)).collect();
        match self.client.push_batch(Tier::Sync, &recs) {
            Ok(k) => {
                assert_eq!(k as usize, records, "{}: AckBatch count", self.tag);
                self.acked.extend(ns);
                Got::Acked
            }
            Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {
                self.overloaded += 1;
                Got::Overloaded
            }
            Err(e) => panic!(
                "{}: pushing {}..{} got `{e}`; a full disk must give the retryable Overloaded, never anything else; daemon log (tail):\n{}",
                self.tag,
                ns.start,
                ns.end,
                tail(&log(), 40)
            ),
        }
    }

    fn keys(&self) -> impl Iterator<Item = String> + '_ {
        self.acked.iter().map(|n| format!("{}:{n}", self.tag))
    }
}

fn acked_keys(ps: &[Producer]) -> HashSet<String> {
    ps.iter().flat_map(|p| p.keys()).collect()
}

/// One producer per shard (connections are spread round-robin).
fn producers(dd: &DiskDaemon, prefix: &str, n: usize) -> Vec<Producer> {
    (0..n)
        .map(|i| Producer::new(dd, &format!("{prefix}{i}")))
        .collect()
}

/// Every producer pushes (concurrently) until the daemon refuses with
/// Overloaded; returns them with their acks. Bounded in frames and time.
fn fill_until_overloaded(dd: &DiskDaemon, ps: Vec<Producer>, disk_bytes: u64) -> Vec<Producer> {
    let frames_max = 4 * disk_bytes / (REC_BYTES * BATCH) as u64 + 100;
    let log = || dd.stderr();
    let started = Instant::now();
    let out: Vec<Producer> = thread::scope(|s| {
        let handles: Vec<_> = ps
            .into_iter()
            .map(|mut p| {
                let log = &log;
                s.spawn(move || {
                    let t0 = Instant::now();
                    for _ in 0..frames_max {
                        if p.push(BATCH, log) == Got::Overloaded {
                            return p;
                        }
                        assert!(
                            t0.elapsed() < Duration::from_secs(60),
                            "{}: still no Overloaded after 60 s ({} records acked)",
                            p.tag,
                            p.acked.len()
                        );
                    }
                    panic!(
                        "{}: {frames_max} frames ({} records acked) onto a {} MiB disk and never Overloaded",
                        p.tag,
                        p.acked.len(),
                        disk_bytes / MIB
                    );
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "filled the disk in {:?}: acked {:?} records; {} bytes free",
        started.elapsed(),
        out.iter().map(|p| p.acked.len()).collect::<Vec<_>>(),
        dd.fs.as_ref().map_or(0, Tmpfs::free_bytes)
    );
    out
}

/// Assert that every shard is `Unwritable` (saying pushes get Overloaded),
/// that a raw HealthCheck is answered with the Overloaded nack, and that
/// each producer's next push and health check are refused the same way.
fn assert_refusing(dd: &DiskDaemon, ps: &mut [Producer], context: &str) {
    dd.wait_all_shards("Unwritable", Duration::from_secs(5));
    for (n, _, line) in dd.health() {
        assert!(
            line.to_ascii_lowercase().contains("pushes get overloaded"),
            "{context}: shard {n} is Unwritable but does not say its pushes get Overloaded: {line:?}"
        );
        eprintln!("{context}: ctl health: {line}");
    }
    let mut raw = dd.raw();
    raw.send(&health_frame());
    raw.expect_frame(
        &expected_nack(NackReason::Overloaded),
        &format!("{context}: a wire HealthCheck while the disk is full"),
    );
    let log = || dd.stderr();
    for p in ps.iter_mut() {
        match p.client.health() {
            Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {}
            other => panic!(
                "{context}: {}: health check on a full disk: expected the Overloaded nack, got {other:?}",
                p.tag
            ),
        }
        assert_eq!(
            p.push(1, &log),
            Got::Overloaded,
            "{context}: {}: a push was acked although the disk is still full",
            p.tag
        );
    }
}

/// Push one record on every producer every 20 ms until each is acked
/// again. Returns, per producer, how long after the call its first ack
/// came, and when (after the call) `free` first showed two segments' worth
/// of space. Panics after `timeout`.
fn wait_acked_again(
    dd: &DiskDaemon,
    ps: &mut [Producer],
    segment_bytes: u64,
    timeout: Duration,
) -> (Vec<Duration>, Option<Duration>) {
    let start = Instant::now();
    let log = || dd.stderr();
    let mut healed: Vec<Option<Duration>> = vec![None; ps.len()];
    let mut space_at = None;
    while healed.iter().any(Option::is_none) {
        if space_at.is_none() && dd.tmpfs().free_bytes() >= 2 * segment_bytes {
            space_at = Some(start.elapsed());
        }
        for (p, h) in ps.iter_mut().zip(healed.iter_mut()) {
            if h.is_none() && p.push(1, &log) == Got::Acked {
                *h = Some(start.elapsed());
            }
        }
        if start.elapsed() >= timeout {
            let health = dd.health_text();
            panic!(
                "pushes still refused {timeout:?} later (no restart): acked again {healed:?}; free space {} bytes (first seen {space_at:?}); ctl health:\n{health}daemon log (tail):\n{}",
                dd.tmpfs().free_bytes(),
                tail(&dd.stderr(), 40)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    (healed.into_iter().map(Option::unwrap).collect(), space_at)
}

/// Wait (polling every 250 ms) until every key in `expected` was accepted
/// by the receiver at least once; returns the accepted records.
fn wait_delivered(
    rx: &HttpReceiver,
    expected: &HashSet<String>,
    timeout: Duration,
    log: &dyn Fn() -> String,
) -> Vec<Received> {
    let start = Instant::now();
    loop {
        let recs = rx.accepted_records();
        let have: HashSet<String> = recs.iter().map(|r| key(&r.payload)).collect();
        let missing: Vec<&String> = expected.iter().filter(|k| !have.contains(*k)).collect();
        if missing.is_empty() {
            eprintln!(
                "all {} acked records delivered after {:?}",
                expected.len(),
                start.elapsed()
            );
            return recs;
        }
        if start.elapsed() >= timeout {
            let mut sample: Vec<&&String> = missing.iter().take(10).collect();
            sample.sort();
            panic!(
                "{} of {} ACKED records were never delivered within {timeout:?} (some: {sample:?});\n{}daemon log (tail):\n{}",
                missing.len(),
                expected.len(),
                rx.summary(),
                tail(&log(), 40)
            );
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// A clean stop (exit 0) leaves no preallocation behind.
fn stop_cleanly_without_leftovers(dd: &mut DiskDaemon) {
    dd.terminate();
    let root = dd
        .fs
        .as_ref()
        .map_or(dd.data_dir(), Tmpfs::path)
        .to_path_buf();
    let leftovers = files_ending_with(&root, ".open.tmp");
    assert!(
        leftovers.is_empty(),
        "preallocation left partial files behind after a clean stop: {leftovers:?}"
    );
    let log = dd.stderr();
    assert!(
        !log.contains("panicked"),
        "the daemon panicked:\n{}",
        tail(&log, 60)
    );
}

fn assert_warned_about_free_space(dd: &DiskDaemon) {
    let log = dd.stderr();
    assert!(
        log.contains(DISK_WARNING),
        "`spillway run` did not warn that wab.wab_bytes_max exceeds the free space of the data folder; log:\n{}",
        tail(&log, 40)
    );
}

// ------------------------------------------------------ 1. transient ENOSPC

/// The disk fills while the sink is down; delivery frees it again. Pushes
/// get Overloaded meanwhile and are acked again without a restart.
#[test]
fn transient_enospc_heals_without_a_restart() {
    let _g = shared();
    let disk = 64 * MIB;
    let Some(fs) = Tmpfs::mount_or_skip(disk, "transient_enospc_heals_without_a_restart") else {
        return;
    };
    let rx = HttpReceiver::start();
    rx.set_status(503);
    // wab_bytes_max stays at its 4 GiB default: the disk fills first.
    let mut dd = DiskDaemon::configure(Some(fs), &http_sink(&rx.url(), ""));
    dd.spawn();
    assert_warned_about_free_space(&dd);

    let ps = producers(&dd, "t", 2);
    let mut ps = fill_until_overloaded(&dd, ps, disk);
    assert_refusing(&dd, &mut ps, "disk full");

    // Delivery frees the space; the shards must notice by themselves.
    rx.set_status(200);
    let (healed, space_at) = wait_acked_again(&dd, &mut ps, MIB, Duration::from_secs(30));
    eprintln!(
        "transient ENOSPC: sink up; two segments free after {space_at:?}; pushes acked again after {healed:?} (per shard)"
    );
    if let Some(space) = space_at {
        for h in &healed {
            assert!(
                h.saturating_sub(space) <= Duration::from_secs(3),
                "a shard took {:?} to write again after space was back (promised: about 1-2 s); log:\n{}",
                h.saturating_sub(space),
                tail(&dd.stderr(), 40)
            );
        }
    }
    let t = dd.wait_all_shards("Running", Duration::from_secs(5));
    eprintln!("transient ENOSPC: ctl health all Running {t:?} after the first acks");
    dd.raw().expect_health();
    let log = || dd.stderr();
    for p in ps.iter_mut() {
        p.client.health().expect("health check after healing");
        for _ in 0..10 {
            assert_eq!(
                p.push(BATCH, &log),
                Got::Acked,
                "{}: push after healing",
                p.tag
            );
        }
    }
    wait_delivered(&rx, &acked_keys(&ps), DELIVERY_TIMEOUT, &log);
    stop_cleanly_without_leftovers(&mut dd);
}

/// The disk fills because of another program's file; deleting it is all
/// it takes (the sink stays down throughout).
#[test]
fn transient_enospc_heals_without_a_restart_when_another_file_is_removed() {
    let _g = shared();
    let disk = 64 * MIB;
    let Some(fs) = Tmpfs::mount_or_skip(
        disk,
        "transient_enospc_heals_without_a_restart_when_another_file_is_removed",
    ) else {
        return;
    };
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let mut dd = DiskDaemon::configure(Some(fs), &http_sink(&rx.url(), ""));
    dd.spawn();
    let filler = dd.tmpfs().path().join("someone-elses-file");
    write_filler(&filler, 40 * MIB);

    let ps = producers(&dd, "f", 2);
    let mut ps = fill_until_overloaded(&dd, ps, disk);
    assert_refusing(&dd, &mut ps, "disk full (filler)");

    std::fs::remove_file(&filler).unwrap();
    let (healed, _) = wait_acked_again(&dd, &mut ps, MIB, Duration::from_secs(15));
    eprintln!("filler removed: pushes acked again after {healed:?} (per shard), sink still down");
    for h in &healed {
        assert!(
            *h <= Duration::from_secs(3),
            "a shard took {h:?} to write again after 40 MiB were freed (promised: about 1-2 s); log:\n{}",
            tail(&dd.stderr(), 40)
        );
    }
    dd.wait_all_shards("Running", Duration::from_secs(5));
    dd.raw().expect_health();

    rx.set_status(200);
    let log = || dd.stderr();
    wait_delivered(&rx, &acked_keys(&ps), DELIVERY_TIMEOUT, &log);
    stop_cleanly_without_leftovers(&mut dd);
}

// ------------------------------------------------------ 2. no livelock

/// A backlog fills the disk, another file takes the last byte, then the
/// sink comes back: delivery must still make progress (the checkpoint is
/// updated in place, delivered segments are deleted), free the disk, and
/// not resend the same batch over and over.
#[test]
fn a_full_disk_with_a_backlog_does_not_livelock_delivery() {
    let _g = shared();
    let disk = 64 * MIB;
    let Some(fs) = Tmpfs::mount_or_skip(
        disk,
        "a_full_disk_with_a_backlog_does_not_livelock_delivery",
    ) else {
        return;
    };
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let mut dd = DiskDaemon::configure(Some(fs), &http_sink(&rx.url(), ""));
    dd.spawn();
    let ps = producers(&dd, "l", 2);
    let mut ps = fill_until_overloaded(&dd, ps, disk);
    let filler = dd.tmpfs().path().join("filler");
    let filled = fill_until_enospc(&filler);
    let free = dd.tmpfs().free_bytes();
    assert_eq!(free, 0, "the filler left {free} bytes free");
    let wab_full = allocated_bytes(dd.data_dir());
    eprintln!(
        "no livelock: backlog {} records, WAB {} KiB, filler {} KiB, 0 bytes free",
        acked_keys(&ps).len(),
        wab_full / 1024,
        filled / 1024
    );
    assert_refusing(&dd, &mut ps, "0 bytes free");

    let requests_before = rx.request_count();
    rx.set_status(200);
    let up = Instant::now();
    let log = || dd.stderr();
    let expected = acked_keys(&ps);
    wait_delivered(&rx, &expected, DELIVERY_TIMEOUT, &log);
    let delivered_in = up.elapsed();

    // The WAB shrinks and the space comes back (bounded).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let wab = allocated_bytes(dd.data_dir());
        let free = dd.tmpfs().free_bytes();
        if wab <= wab_full / 2 && free >= 16 * MIB {
            eprintln!(
                "no livelock: WAB {} KiB -> {} KiB, {} KiB free, {:?} after the sink came back",
                wab_full / 1024,
                wab / 1024,
                free / 1024,
                up.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "everything was delivered but the WAB still holds {} KiB (was {} KiB) and only {free} bytes are free: delivered segments are not deleted; files: {:?}\nlog (tail):\n{}",
            wab / 1024,
            wab_full / 1024,
            files_ending_with(dd.data_dir(), ""),
            tail(&dd.stderr(), 40)
        );
        thread::sleep(Duration::from_millis(100));
    }

    // Watch a little longer: a livelocked drain keeps resending.
    thread::sleep(Duration::from_secs(3));
    let recs = rx.accepted_records();
    let dups = duplicates(&recs);
    let worst = dups.values().copied().max().unwrap_or(1);
    let reqs = rx.requests();
    let after: Vec<_> = reqs[requests_before..].iter().collect();
    eprintln!(
        "no livelock: delivered in {delivered_in:?}; {} requests after the sink came back ({} accepted); {} distinct records, {} delivered more than once, worst {worst} times",
        after.len(),
        after.iter().filter(|r| r.accepted()).count(),
        recs.iter().map(Received::id).collect::<HashSet<_>>().len(),
        dups.len()
    );
    assert!(
        worst <= 2,
        "a record was delivered {worst} times (a livelocked drain resends its batch); {} records delivered more than once;\n{}",
        dups.len(),
        rx.summary()
    );

    // And the producers are accepted again.
    let (healed, _) = wait_acked_again(&dd, &mut ps, MIB, Duration::from_secs(15));
    eprintln!("no livelock: pushes acked again {healed:?} after the WAB shrank");
    wait_delivered(&rx, &acked_keys(&ps), DELIVERY_TIMEOUT, &log);
    stop_cleanly_without_leftovers(&mut dd);
}

// ------------------------------------------------------ 3. restart when full

/// SIGKILL on a full disk (backlog plus 0 bytes free), then start again:
/// the daemon starts, keeps every acked record, says it cannot write, and
/// delivers and heals once the sink frees space.
#[test]
fn restart_on_a_full_disk_recovers() {
    let _g = shared();
    let disk = 64 * MIB;
    let Some(fs) = Tmpfs::mount_or_skip(disk, "restart_on_a_full_disk_recovers") else {
        return;
    };
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let mut dd = DiskDaemon::configure(Some(fs), &http_sink(&rx.url(), ""));
    dd.spawn();
    let ps = producers(&dd, "r", 2);
    let mut ps = fill_until_overloaded(&dd, ps, disk);
    let _filler = fill_until_enospc(&dd.tmpfs().path().join("filler"));
    assert_eq!(dd.tmpfs().free_bytes(), 0);
    dd.kill9();
    let expected = acked_keys(&ps);

    // `spawn` panics with the log if the daemon exits during start-up.
    dd.spawn();
    let log = dd.stderr();
    assert!(!log.contains("panicked"), "panicked at start:\n{log}");
    thread::sleep(Duration::from_millis(500));
    assert!(
        dd.is_running(),
        "the daemon exited after starting on a full disk:\n{}",
        dd.stderr()
    );
    eprintln!(
        "restart on a full disk: started; {}",
        dd.stdout()
            .lines()
            .find(|l| l.contains("listening on"))
            .unwrap_or("")
    );

    // Nothing acked is lost by the kill or by recovery on a full disk.
    let on_disk: HashSet<String> = dd
        .read_wab()
        .iter()
        .flat_map(|(_, recs)| recs.iter().map(|r| key(&r.payload)))
        .collect();
    let lost: Vec<&String> = expected.iter().filter(|k| !on_disk.contains(*k)).collect();
    assert!(
        lost.is_empty(),
        "{} acked records are not in the WAB after a restart on a full disk (some: {:?})",
        lost.len(),
        &lost[..lost.len().min(10)]
    );

    // It says it cannot write, and refuses with Overloaded.
    let mut ps2 = producers(&dd, "r2-", 2);
    assert_refusing(&dd, &mut ps2, "restarted on a full disk");
    for p in ps.iter_mut() {
        // The old connections died with the first process.
        p.client = dd.client();
    }

    rx.set_status(200);
    let log = || dd.stderr();
    wait_delivered(&rx, &expected, DELIVERY_TIMEOUT, &log);
    let (healed, space_at) = wait_acked_again(&dd, &mut ps2, MIB, Duration::from_secs(15));
    eprintln!("restart on a full disk: all delivered; space seen after {space_at:?}; pushes acked again after {healed:?}");
    dd.wait_all_shards("Running", Duration::from_secs(5));
    for p in ps.iter_mut() {
        assert_eq!(
            p.push(BATCH, &log),
            Got::Acked,
            "{}: push after healing",
            p.tag
        );
    }
    let mut all = acked_keys(&ps);
    all.extend(acked_keys(&ps2));
    wait_delivered(&rx, &all, DELIVERY_TIMEOUT, &log);
    stop_cleanly_without_leftovers(&mut dd);
}

// ------------------------------------------------------ 4. small disk

/// A disk smaller than two default segments, two shards, default WAB
/// settings: the daemon starts (no panic), warns, acks or refuses with
/// Overloaded, and a clean stop leaves no partial preallocation.
#[test]
fn a_small_disk_with_default_settings() {
    let _g = shared();
    let disk = 100 * MIB;
    let Some(fs) = Tmpfs::mount_or_skip(disk, "a_small_disk_with_default_settings") else {
        return;
    };
    // The test harness shrinks segments to 1 MiB; put the default back.
    let mut dd = DiskDaemon::configure(
        Some(fs),
        "[server]\nshards = 2\n[wab]\nsegment_bytes_max = 67108864\n",
    );
    dd.spawn();
    let log = dd.stderr();
    assert!(
        !log.contains("panicked") && !log.contains("no reactor running"),
        "the daemon panicked at start on a small disk:\n{log}"
    );
    assert_warned_about_free_space(&dd);
    for (_, _, line) in dd.health() {
        eprintln!("small disk: ctl health: {line}");
    }

    // Four connections (two per shard) push up to 32 MiB each, or until
    // refused three times.
    let ps = producers(&dd, "s", 4);
    let log = || dd.stderr();
    let ps: Vec<Producer> = thread::scope(|s| {
        let hs: Vec<_> = ps
            .into_iter()
            .map(|mut p| {
                let log = &log;
                s.spawn(move || {
                    let frames = 32 * MIB / (REC_BYTES * BATCH) as u64;
                    for _ in 0..frames {
                        if p.push(BATCH, log) == Got::Overloaded {
                            if p.overloaded >= 3 {
                                break;
                            }
                            thread::sleep(Duration::from_millis(50));
                        }
                    }
                    p
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "small disk: acked {:?} records, Overloaded {:?} times; {} KiB free",
        ps.iter().map(|p| p.acked.len()).collect::<Vec<_>>(),
        ps.iter().map(|p| p.overloaded).collect::<Vec<_>>(),
        dd.tmpfs().free_bytes() / 1024
    );
    assert!(
        ps.iter().any(|p| !p.acked.is_empty()),
        "no push was acked on a 100 MiB disk (one 64 MiB segment fits)"
    );
    stop_cleanly_without_leftovers(&mut dd);
}

// ------------------------------------------------------ 5. sink outages

/// Take the sink down (listener closed: connection refused) for `outage`
/// while producers keep pushing, bring it back, and return how long after
/// its return the first request was accepted.
fn outage_recovery_delay(rx: &HttpReceiver, proxy: &SwitchProxy, outage: Duration) -> Duration {
    proxy.down();
    thread::sleep(outage);
    let up_at = Instant::now();
    proxy.up();
    loop {
        if let Some(r) = rx.requests().iter().find(|r| r.accepted() && r.at >= up_at) {
            return r.at - up_at;
        }
        assert!(
            up_at.elapsed() < Duration::from_secs(40),
            "nothing delivered 40 s after a {outage:?} outage ended:\n{}",
            rx.summary()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn delivery_resumes_promptly_after_a_5s_and_a_60s_sink_outage() {
    let _g = shared();
    let rx = HttpReceiver::start();
    let proxy = SwitchProxy::start(rx.addr());
    // Default retry_initial_ms (100) and retry_max_ms (30 s): the backoff
    // really grows to 30 s during the long outage.
    let mut dd = DiskDaemon::configure(None, &http_sink(&proxy.url(), ""));
    dd.spawn();

    let stop = Arc::new(AtomicBool::new(false));
    let trickle = {
        let mut c = dd.client();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut acked = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Acquire) {
                let p = format!("trickle:{n}");
                match c.push(Tier::Sync, p.as_bytes()) {
                    Ok(()) => acked.push(p),
                    Err(e) => panic!("trickle push {n}: {e}"),
                }
                n += 1;
                thread::sleep(Duration::from_millis(20));
            }
            acked
        })
    };
    // Warm up: records flow before the first outage.
    let warm = Instant::now();
    while rx.accepted_records().is_empty() {
        assert!(
            warm.elapsed() < Duration::from_secs(10),
            "nothing delivered before any outage:\n{}",
            rx.summary()
        );
        thread::sleep(Duration::from_millis(10));
    }

    let after_5s = outage_recovery_delay(&rx, &proxy, Duration::from_secs(5));
    eprintln!("sink outage of 5 s: first record accepted {after_5s:?} after the sink came back");
    // Let the backoff settle back to normal delivery before the next one.
    thread::sleep(Duration::from_secs(1));
    let after_60s = outage_recovery_delay(&rx, &proxy, Duration::from_secs(60));
    eprintln!("sink outage of 60 s: first record accepted {after_60s:?} after the sink came back");

    stop.store(true, Ordering::Release);
    let acked: HashSet<String> = trickle
        .join()
        .expect("trickle producer")
        .into_iter()
        .collect();
    let recs = rx.wait_for_payloads(&acked.iter().collect::<Vec<_>>(), Duration::from_secs(30));
    eprintln!(
        "sink outages: {} trickle records acked, all delivered ({} deliveries); delays {after_5s:?} (5 s outage), {after_60s:?} (60 s outage)",
        acked.len(),
        recs.len()
    );
    let bound = Duration::from_millis(2500);
    assert!(
        after_5s <= bound && after_60s <= bound,
        "delivery resumed {after_5s:?} after a 5 s outage and {after_60s:?} after a 60 s one (promised: within about 2 s of the sink's return)"
    );
    dd.terminate();
}

// ------------------------------------------------------ 6. huge records

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Up to `n` Sync pushes of 100 B, one at a time, for at most `budget`;
/// each latency from the first attempt to the ack (Overloaded answers are
/// retried and counted). A push still unacked when the budget runs out
/// counts with the time it has waited, and ends the measurement.
fn small_latencies(c: &mut Client, tag: &str, n: usize, budget: Duration) -> (Vec<Duration>, u64) {
    let mut out = Vec::with_capacity(n);
    let mut overloaded = 0;
    let deadline = Instant::now() + budget;
    'pushes: for i in 0..n {
        let mut p = format!("{tag}:{i};").into_bytes();
        p.resize(100, b's');
        let t0 = Instant::now();
        loop {
            match c.push(Tier::Sync, &p) {
                Ok(()) => break,
                Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {
                    overloaded += 1;
                    thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("small push {i}: {e}"),
            }
            if Instant::now() >= deadline {
                out.push(t0.elapsed());
                break 'pushes;
            }
        }
        out.push(t0.elapsed());
        if Instant::now() >= deadline {
            break;
        }
    }
    out.sort();
    (out, overloaded)
}

#[test]
fn small_records_are_not_stuck_behind_huge_ones() {
    let _g = exclusive();
    let Some(fs) = Tmpfs::mount_or_skip(2048 * MIB, "small_records_are_not_stuck_behind_huge_ones")
    else {
        return;
    };
    // One shard, so every huge record lands in the small producer's group
    // commits; the budget stays below the tmpfs so the disk never fills.
    let mut dd = DiskDaemon::configure(
        Some(fs),
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 67108864\nwab_bytes_max = 1073741824\n[sink]\ntype = \"noop\"\n",
    );
    dd.spawn();
    let mut small = dd.client();
    small_latencies(&mut small, "warm", 50, Duration::from_secs(10));
    let (alone, _) = small_latencies(&mut small, "alone", 300, Duration::from_secs(10));

    let huge = Arc::new(vec![b'H'; 16 * MIB as usize]);
    let stop = Arc::new(AtomicBool::new(false));
    let huge_acks = Arc::new(AtomicU64::new(0));
    let huge_overloaded = Arc::new(AtomicU64::new(0));
    let pushers: Vec<_> = (0..32)
        .map(|i| {
            let mut c = dd.client();
            c.set_timeout(Some(Duration::from_secs(60))).unwrap();
            let (huge, stop, acks, over) = (
                huge.clone(),
                stop.clone(),
                huge_acks.clone(),
                huge_overloaded.clone(),
            );
            thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match c.push(Tier::Sync, &huge) {
                        Ok(()) => {
                            acks.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {
                            over.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => panic!("huge pusher {i}: {e}"),
                    }
                }
            })
        })
        .collect();
    let load_start = Instant::now();
    while huge_acks.load(Ordering::Relaxed) < 32 {
        assert!(
            load_start.elapsed() < Duration::from_secs(60),
            "32 huge pushers got only {} acks in 60 s",
            huge_acks.load(Ordering::Relaxed)
        );
        thread::sleep(Duration::from_millis(10));
    }
    let acks_before = huge_acks.load(Ordering::Relaxed);
    let measure_start = Instant::now();
    let (loaded, small_overloaded) =
        small_latencies(&mut small, "loaded", 300, Duration::from_secs(60));
    let measured = measure_start.elapsed();
    let huge_during = huge_acks.load(Ordering::Relaxed) - acks_before;
    stop.store(true, Ordering::Release);
    for p in pushers {
        p.join().expect("huge pusher");
    }

    let (a50, a99) = (percentile(&alone, 0.5), percentile(&alone, 0.99));
    let (l50, l99) = (percentile(&loaded, 0.5), percentile(&loaded, 0.99));
    eprintln!(
        "small behind huge: alone p50 {a50:?} p99 {a99:?}; with 32 x 16 MiB Sync pushers p50 {l50:?} p99 {l99:?} (max {:?}, {} pushes measured); ratio p50 {:.1}x p99 {:.1}x; {huge_during} huge records ({:.0} MiB/s) during the {measured:?} of measurement; Overloaded: small {small_overloaded}, huge {}",
        loaded.last().unwrap(),
        loaded.len(),
        l50.as_secs_f64() / a50.as_secs_f64(),
        l99.as_secs_f64() / a99.as_secs_f64(),
        (huge_during * 16) as f64 / measured.as_secs_f64(),
        huge_overloaded.load(Ordering::Relaxed)
    );
    assert!(
        huge_during > 0,
        "no huge record was acked while the small producer was measured: not a loaded measurement"
    );
    assert_eq!(
        loaded.len(),
        300,
        "only {} of 300 small Sync pushes were acked within 60 s behind 16 MiB records (p50 {l50:?})",
        loaded.len()
    );
    assert!(
        l99 <= Duration::from_millis(500),
        "small Sync records wait behind 16 MiB ones: p99 {l99:?} under load (alone {a99:?})"
    );
    dd.terminate();
}
