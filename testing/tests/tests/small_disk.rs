//! A disk with room for one segment only (issue 17, item 5), end to end
//! against the real binary: 4 MiB segments on a 6 MiB tmpfs, one shard;
//! and its twin, a WAB budget of one segment (`wab.wab_bytes_max` =
//! `wab.segment_bytes_max`, the least the config allows).
//!
//! Once the active segment is full there is no room for the next one. The
//! full segment must then be sealed and handed to the drain, which deletes
//! it once everything in it is confirmed, so the shard writes again in a
//! fresh segment by itself. Before the fix the full segment stayed active
//! for good (only sealed segments were deleted) and every push got
//! Overloaded until a restart, although the sink had confirmed everything.
//!
//! At the budget, pushes are refused before they reach the flusher, so no
//! full segment ever made it rotate: the drain, once everything is
//! delivered, asks the flusher to seal the active segment so it can be
//! deleted.
//!
//! The tmpfs tests need root to mount it: in CI (`CI=true`) it fails without;
//! elsewhere it prints why it skips.

use std::collections::HashSet;
use std::thread;
use std::time::{Duration, Instant};

use sink_sdk::units::MIB;
use spillway_tests::disk::{tail, DiskDaemon, Tmpfs};
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

const SEGMENT_BYTES: u64 = 4 * MIB;
/// Room for one segment and a half: never two.
const DISK_BYTES: u64 = 6 * MIB;
const REC_BYTES: usize = 4096;
/// Records per PushBatch (64 KiB a push).
const BATCH: usize = 16;
/// A push refused with Overloaded must be acked within this once the
/// sink confirms what the shard holds (a rotation waits for one delivery,
/// one checkpoint and one deletion, and the flusher retries at least once
/// a second).
const ACKED_WITHIN: Duration = Duration::from_secs(15);

fn payload(n: u64) -> Vec<u8> {
    let mut p = format!("sd:{n};").into_bytes();
    p.resize(REC_BYTES, b'x');
    p
}

fn key(p: &[u8]) -> String {
    let end = p.iter().position(|b| *b == b';').unwrap_or(p.len());
    String::from_utf8_lossy(&p[..end]).into_owned()
}

/// One producer connection numbering its records.
struct Producer {
    client: Client,
    next: u64,
    acked: HashSet<String>,
    overloaded: u64,
}

impl Producer {
    /// Push one batch at Sync: Some(true) acked, Some(false) Overloaded;
    /// anything else fails the test.
    fn push(&mut self, dd: &DiskDaemon) -> bool {
        let ns = self.next..self.next + BATCH as u64;
        self.next += BATCH as u64;
        let recs: Vec<Vec<u8>> = ns.clone().map(payload).collect();
        match self.client.push_batch(Tier::Sync, &recs) {
            Ok(k) => {
                assert_eq!(k as usize, BATCH, "AckBatch count");
                self.acked.extend(recs.iter().map(|r| key(r)));
                true
            }
            Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {
                self.overloaded += 1;
                false
            }
            Err(e) => panic!(
                "pushing {ns:?} got `{e}`; a full disk must give the retryable Overloaded only; daemon log (tail):\n{}",
                tail(&dd.stderr(), 40)
            ),
        }
    }

    /// Push until one batch is acked, retrying every 20 ms after
    /// Overloaded; panics after [`ACKED_WITHIN`].
    fn push_until_acked(&mut self, dd: &DiskDaemon, context: &str) {
        let start = Instant::now();
        while !self.push(dd) {
            if start.elapsed() >= ACKED_WITHIN {
                panic!(
                    "{context}: pushes still refused with Overloaded {ACKED_WITHIN:?} later although the sink confirms everything (no restart); {} KiB free on the tmpfs; ctl health:\n{}daemon log (tail):\n{}",
                    dd.fs.as_ref().map_or(0, Tmpfs::free_bytes) / 1024,
                    dd.health_text(),
                    tail(&dd.stderr(), 40)
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

fn small_disk_daemon(test: &str, rx: &HttpReceiver) -> Option<DiskDaemon> {
    let fs = Tmpfs::mount_or_skip(DISK_BYTES, test)?;
    let mut dd = DiskDaemon::configure(
        Some(fs),
        &format!(
            "[server]\nshards = 1\n[wab]\nsegment_bytes_max = {SEGMENT_BYTES}\n[sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 100\nretry_max_ms = 500\nlinger_ms = 5\n",
            rx.url()
        ),
    );
    dd.spawn();
    Some(dd)
}

/// Every acked record reaches the receiver within 60 s.
fn wait_delivered(rx: &HttpReceiver, p: &Producer, dd: &DiskDaemon) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let have: HashSet<String> = rx
            .accepted_records()
            .iter()
            .map(|r| key(&r.payload))
            .collect();
        let missing = p.acked.iter().filter(|k| !have.contains(*k)).count();
        if missing == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} acked records never delivered; {}daemon log (tail):\n{}",
            p.acked.len(),
            rx.summary(),
            tail(&dd.stderr(), 40)
        );
        thread::sleep(Duration::from_millis(100));
    }
}

/// The sink confirms everything as it comes: pushing four segments' worth
/// onto a disk with room for one and a half keeps being acked, each push
/// within [`ACKED_WITHIN`] of its first try, without a restart.
#[test]
fn a_disk_with_room_for_one_segment_keeps_taking_pushes_once_all_is_confirmed() {
    let rx = HttpReceiver::start();
    let Some(mut dd) = small_disk_daemon(
        "a_disk_with_room_for_one_segment_keeps_taking_pushes_once_all_is_confirmed",
        &rx,
    ) else {
        return;
    };
    let mut p = Producer {
        client: dd.client(),
        next: 0,
        acked: HashSet::new(),
        overloaded: 0,
    };
    let pushes = 4 * SEGMENT_BYTES / (REC_BYTES * BATCH) as u64;
    let start = Instant::now();
    for i in 0..pushes {
        p.push_until_acked(&dd, &format!("push {i} of {pushes}"));
    }
    eprintln!(
        "{pushes} pushes ({} MiB) acked on a {} MiB disk in {:?}; Overloaded {} times meanwhile",
        pushes * (REC_BYTES * BATCH) as u64 / MIB,
        DISK_BYTES / MIB,
        start.elapsed(),
        p.overloaded
    );
    wait_delivered(&rx, &p, &dd);
    let stats = dd.ctl(&["stats", "--flat"]);
    let sealed: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("shard{shard=\"0\"}.sealed_without_successor "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!("ctl stats has no sealed_without_successor for shard 0:\n{stats}")
        });
    assert!(
        sealed >= 3,
        "four segments' worth on a disk with room for one: expected at least 3 segments sealed without a successor, ctl stats says {sealed}"
    );
    dd.terminate();
}

/// The sink is down: the first segment fills, the shard is Unwritable and
/// says why (no room for the next segment, waiting for delivery), pushes
/// get Overloaded. The sink comes back: pushes are acked again without a
/// restart, and everything acked is delivered.
#[test]
fn a_full_small_disk_heals_once_the_sink_confirms() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let Some(mut dd) = small_disk_daemon("a_full_small_disk_heals_once_the_sink_confirms", &rx)
    else {
        return;
    };
    let mut p = Producer {
        client: dd.client(),
        next: 0,
        acked: HashSet::new(),
        overloaded: 0,
    };
    let frames_max = 2 * SEGMENT_BYTES / (REC_BYTES * BATCH) as u64;
    let mut refused = false;
    for _ in 0..frames_max {
        if !p.push(&dd) {
            refused = true;
            break;
        }
    }
    assert!(
        refused,
        "{frames_max} pushes (two segments' worth) onto a {} MiB disk with the sink down and never Overloaded",
        DISK_BYTES / MIB
    );
    dd.wait_all_shards("Unwritable", Duration::from_secs(5));
    let health = dd.health_text();
    eprintln!("disk full, sink down: ctl health:\n{health}");
    assert!(
        health.contains("waiting for delivery"),
        "ctl health does not say the shard waits for delivery to free its full segment:\n{health}"
    );
    assert!(
        !p.push(&dd),
        "a push was acked while the disk is still full"
    );

    rx.set_status(200);
    p.push_until_acked(&dd, "sink back");
    dd.wait_all_shards("Running", Duration::from_secs(5));
    for i in 0..8 {
        p.push_until_acked(&dd, &format!("after healing, push {i}"));
    }
    wait_delivered(&rx, &p, &dd);
    dd.terminate();
}

/// The WAB budget holds one segment (on an ordinary disk): four segments'
/// worth is acked, each push within [`ACKED_WITHIN`] of its first try,
/// while the sink confirms everything.
#[test]
fn a_budget_of_one_segment_keeps_taking_pushes_once_all_is_confirmed() {
    let rx = HttpReceiver::start();
    let mut dd = DiskDaemon::configure(
        None,
        &format!(
            "[server]\nshards = 1\n[wab]\nsegment_bytes_max = {SEGMENT_BYTES}\nwab_bytes_max = {SEGMENT_BYTES}\n[sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 100\nretry_max_ms = 500\nlinger_ms = 5\n",
            rx.url()
        ),
    );
    dd.spawn();
    let mut p = Producer {
        client: dd.client(),
        next: 0,
        acked: HashSet::new(),
        overloaded: 0,
    };
    let pushes = 4 * SEGMENT_BYTES / (REC_BYTES * BATCH) as u64;
    let start = Instant::now();
    for i in 0..pushes {
        p.push_until_acked(&dd, &format!("push {i} of {pushes}"));
    }
    eprintln!(
        "{pushes} pushes acked with a one-segment budget in {:?}; Overloaded {} times meanwhile",
        start.elapsed(),
        p.overloaded
    );
    assert!(
        p.overloaded > 0,
        "four segments' worth through a one-segment budget and never Overloaded: the budget was not reached"
    );
    wait_delivered(&rx, &p, &dd);
    dd.terminate();
}
