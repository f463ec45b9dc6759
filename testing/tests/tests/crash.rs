//! Crash safety of the real binary: producers push while the daemon is
//! SIGKILLed at seeded points; after a restart on the same data folder every
//! acknowledged record is there, each producer's records are in push order,
//! and sequence numbers keep increasing for what is pushed afterwards.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use spillway_tests::*;

const PRODUCERS: usize = 4;

fn identity(recs: &[StoredRecord]) -> Vec<(u64, Vec<u8>, u8, u64)> {
    recs.iter()
        .map(|r| {
            (
                r.seq,
                r.payload.to_vec(),
                r.meta.tier,
                r.meta.arrival_unix_us,
            )
        })
        .collect()
}

fn start_producers(
    d: &Daemon,
    prefix: &str,
    mode: Mode,
    limit: u64,
) -> (Arc<Barrier>, Vec<thread::JoinHandle<ProducerOutcome>>) {
    let ready = Arc::new(Barrier::new(PRODUCERS + 1));
    let handles = (0..PRODUCERS)
        .map(|p| {
            let mut client = d.client();
            client.health().unwrap();
            let ready = ready.clone();
            let tag = format!("{prefix}{p}");
            thread::spawn(move || {
                ready.wait();
                produce(&mut client, &tag, mode, limit)
            })
        })
        .collect();
    (ready, handles)
}

fn crash_run(seed: u64, base_ms: u64, mode: Mode) {
    let mut rng = Rng::new(seed);
    let kill_after = Duration::from_millis(base_ms + rng.below(base_ms / 4 + 1));
    let context = format!("seed {seed:#x}, kill after {kill_after:?}, {mode:?}");
    let mut d = Daemon::start("");

    // Phase 1: push until SIGKILL.
    let (ready, handles) = start_producers(&d, "p", mode, u64::MAX);
    ready.wait();
    thread::sleep(kill_after);
    d.kill9();
    let outcomes: Vec<ProducerOutcome> = handles
        .into_iter()
        .map(|h| h.join().expect("producer thread"))
        .collect();
    for o in &outcomes {
        assert!(
            !o.error.is_empty(),
            "{context}: producer {} ended without an error: {o:?}",
            o.tag
        );
    }
    eprintln!(
        "{context}: {:?}",
        outcomes
            .iter()
            .map(|o| (o.acked, o.sent))
            .collect::<Vec<_>>()
    );

    let before = d.read_shards();
    check_producers(&before, &outcomes, &format!("{context}, after SIGKILL"));
    check_seqs(&before, &context);
    let before_total: usize = before.iter().map(|(_, r)| r.len()).sum();

    // Phase 2: restart on the same data; recovery keeps exactly what the reader saw.
    d.restart();
    let out = d.stdout();
    let kept = kept_at_start(&out).map(|(pending, delivered)| pending + delivered);
    assert_eq!(
        kept,
        Some(before_total as u64),
        "{context}: restart should report {before_total} records kept; stdout:\n{out}"
    );
    let recovered = d.read_shards();
    check_producers(&recovered, &outcomes, &format!("{context}, after restart"));
    let before_map: BTreeMap<u32, _> = before.iter().map(|(s, r)| (*s, identity(r))).collect();
    let recovered_map: BTreeMap<u32, _> =
        recovered.iter().map(|(s, r)| (*s, identity(r))).collect();
    assert!(
        before_map == recovered_map,
        "{context}: recovery changed the records the segment reader saw before it"
    );
    let max_seq_before: BTreeMap<u32, u64> = before
        .iter()
        .filter_map(|(s, r)| r.last().map(|l| (*s, l.seq)))
        .collect();

    // Phase 3: push more after the restart; all acked, in order, new sequence numbers.
    let (ready, handles) = start_producers(&d, "q", mode, 40);
    ready.wait();
    let after: Vec<ProducerOutcome> = handles
        .into_iter()
        .map(|h| h.join().expect("producer thread"))
        .collect();
    for o in &after {
        assert!(
            o.error.is_empty() && o.acked == o.sent && o.sent >= 40,
            "{context}: after restart: {o:?}"
        );
    }
    let shards = d.read_shards();
    check_producers(&shards, &outcomes, &format!("{context}, after more pushes"));
    check_producers(&shards, &after, &format!("{context}, pushes after restart"));
    check_seqs(&shards, &context);
    for (shard, recs) in &shards {
        let old = &before_map.get(shard).cloned().unwrap_or_default();
        let now = identity(recs);
        assert!(
            now.len() >= old.len() && now[..old.len()] == old[..],
            "{context}: shard {shard} lost or changed old records"
        );
        for r in &recs[old.len()..] {
            let tag = parse_tagged(&r.payload).map(|(t, _)| t).unwrap_or_default();
            assert!(
                tag.starts_with('q'),
                "{context}: unexpected new record {:?}",
                text(r)
            );
            if let Some(max) = max_seq_before.get(shard) {
                assert!(
                    r.seq > *max,
                    "{context}: shard {shard} reused sequence number {} (max before {max})",
                    r.seq
                );
            }
        }
    }
    d.terminate();
}

#[test]
fn crash_at_20ms_sync_pushes() {
    crash_run(0xC0FF_EE01, 20, Mode::Single(Tier::Sync));
}

#[test]
fn crash_at_50ms_batched_tier() {
    crash_run(0xC0FF_EE02, 50, Mode::Single(Tier::Batched));
}

#[test]
fn crash_at_120ms_push_batch() {
    crash_run(0xC0FF_EE03, 120, Mode::Batch(Tier::Sync, 10));
}

#[test]
fn crash_at_300ms_sync_pushes() {
    crash_run(0xC0FF_EE04, 300, Mode::Single(Tier::Sync));
}

#[test]
fn crash_at_700ms_pipelined_sync() {
    crash_run(0xC0FF_EE05, 700, Mode::Pipelined(Tier::Sync, 32));
}

#[test]
fn crash_at_200ms_buffered_push_batch() {
    // Buffered acks promise survival of a daemon crash (page cache), not of a power cut.
    crash_run(0xC0FF_EE06, 200, Mode::Batch(Tier::Buffered, 3));
}

#[test]
fn crash_twice_in_a_row_keeps_everything_acked() {
    // Kill, restart, push, kill again, restart: acks from both lives survive.
    let mut d = Daemon::start("");
    let mut all = Vec::new();
    for (life, ms) in [(0u32, 80u64), (1, 150)] {
        let (ready, handles) =
            start_producers(&d, &format!("l{life}p"), Mode::Single(Tier::Sync), u64::MAX);
        ready.wait();
        thread::sleep(Duration::from_millis(ms));
        d.kill9();
        all.extend(handles.into_iter().map(|h| h.join().unwrap()));
        let shards = d.read_shards();
        check_producers(&shards, &all, &format!("life {life}"));
        check_seqs(&shards, &format!("life {life}"));
        d.restart();
    }
    let shards = d.read_shards();
    check_producers(&shards, &all, "final");
    check_seqs(&shards, "final");
    d.terminate();
}
