//! Recovery: a clean stop and restart keeps every record and says how many
//! it recovered; recovery after SIGKILL is idempotent (recovering twice gives
//! the same records as recovering once) and sequence numbers continue.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use spillway_tests::*;

type Snapshot = BTreeMap<u32, Vec<(u64, Vec<u8>, u8, u64)>>;

fn snapshot(d: &Daemon) -> Snapshot {
    d.read_shards()
        .into_iter()
        .map(|(s, recs)| {
            (
                s,
                recs.iter()
                    .map(|r| {
                        (
                            r.seq,
                            r.payload.to_vec(),
                            r.meta.tier,
                            r.meta.arrival_unix_us,
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

fn total(s: &Snapshot) -> usize {
    s.values().map(Vec::len).sum()
}

/// Records the start-up line says were kept (pending delivery plus already
/// delivered).
fn recovered_count(d: &Daemon) -> u64 {
    let out = d.stdout();
    let (pending, delivered) = kept_at_start(&out).unwrap_or_else(|| {
        panic!("no \"N records pending delivery, M already delivered\" in stdout:\n{out}")
    });
    pending + delivered
}

/// Pushes a known mix through three connections; returns each connection's
/// payloads in push order (all acked).
fn push_mix(d: &Daemon, tag: &str) -> Vec<Vec<String>> {
    let mut single = d.client();
    let mut batcher = d.client();
    let mut piped = d.client();
    let mut a = Vec::new();
    for i in 0..150 {
        let p = format!("{tag}-single:{i}");
        single
            .push(
                if i % 2 == 0 {
                    Tier::Sync
                } else {
                    Tier::Batched
                },
                p.as_bytes(),
            )
            .unwrap();
        a.push(p);
    }
    let mut b = Vec::new();
    for j in 0..15 {
        let recs: Vec<String> = (0..10)
            .map(|k| format!("{tag}-batch:{}", j * 10 + k))
            .collect();
        assert_eq!(batcher.push_batch(Tier::Batched, &recs).unwrap(), 10);
        b.extend(recs);
    }
    let mut c = Vec::new();
    {
        let mut p = piped.pipeline(32);
        for i in 0..200 {
            let s = format!("{tag}-piped:{i}");
            p.push(Tier::Buffered, s.as_bytes()).unwrap();
            c.push(s);
        }
        while p.outstanding() > 0 {
            assert_eq!(p.recv().unwrap(), Reply::Ack);
        }
    }
    vec![a, b, c]
}

/// Each connection's payloads appear, in order and complete, in one shard.
fn assert_contains_in_order(d: &Daemon, conns: &[Vec<String>], context: &str) {
    let shards = d.read_shards();
    for (i, expected) in conns.iter().enumerate() {
        let prefix = expected[0].split(':').next().unwrap().to_string() + ":";
        let found: Vec<(u32, Vec<String>)> = shards
            .iter()
            .map(|(s, recs)| {
                (
                    *s,
                    texts(recs)
                        .into_iter()
                        .filter(|t| t.starts_with(&prefix))
                        .collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{context}: connection {i} ({prefix}) found in shards {:?}",
            found.iter().map(|f| f.0).collect::<Vec<_>>()
        );
        assert_eq!(
            &found[0].1, expected,
            "{context}: connection {i} ({prefix})"
        );
    }
}

fn assert_nothing_quarantined(d: &Daemon, context: &str) {
    let log = d.stderr();
    assert!(
        !log.contains("quarantined a segment"),
        "{context}: a segment was quarantined:\n{log}"
    );
    assert!(
        !log.contains("cut a torn tail"),
        "{context}: a torn tail was cut:\n{log}"
    );
}

#[test]
fn clean_stop_and_restart_recovers_every_record_and_reports_the_count() {
    let mut d = Daemon::start("");
    let conns = push_mix(&d, "clean");
    let before = snapshot(&d);
    assert_eq!(total(&before), 500);
    assert_eq!(recovered_count(&d), 0);

    d.terminate();
    let stopped = snapshot(&d);
    assert!(
        stopped == before,
        "the records on disk changed during a clean stop"
    );
    d.restart();
    assert_eq!(recovered_count(&d), 500, "stdout:\n{}", d.stdout());
    assert!(
        d.stdout()
            .contains("; 500 records pending delivery, 0 already delivered, in "),
        "{}",
        d.stdout()
    );
    assert_nothing_quarantined(&d, "after a clean stop");
    let after = snapshot(&d);
    assert!(
        after == before,
        "recovery after a clean stop changed the records"
    );
    assert_contains_in_order(&d, &conns, "after restart");

    // A second clean cycle changes nothing either.
    d.restart();
    assert_eq!(recovered_count(&d), 500);
    assert!(
        snapshot(&d) == before,
        "a second clean restart changed the records"
    );

    // New records get new sequence numbers.
    let max_before: BTreeMap<u32, u64> = before
        .iter()
        .filter_map(|(s, r)| r.last().map(|l| (*s, l.0)))
        .collect();
    let more = push_mix(&d, "more");
    assert_contains_in_order(&d, &conns, "after more pushes");
    assert_contains_in_order(&d, &more, "after more pushes");
    let now = snapshot(&d);
    assert_eq!(total(&now), 1000);
    for (shard, recs) in &now {
        let old = before.get(shard).cloned().unwrap_or_default();
        assert!(
            recs[..old.len()] == old[..],
            "shard {shard}: old records changed"
        );
        for w in recs.windows(2) {
            assert!(
                w[0].0 < w[1].0,
                "shard {shard}: sequence {} then {}",
                w[0].0,
                w[1].0
            );
        }
        if let Some(max) = max_before.get(shard) {
            assert!(
                recs[old.len()..].iter().all(|r| r.0 > *max),
                "shard {shard}: a sequence number was reused"
            );
        }
    }
    d.terminate();
}

#[test]
fn recovery_after_kill9_is_idempotent() {
    // start -> push -> kill9 -> start -> kill9 -> start: the same records each time.
    let mut d = Daemon::start("");
    let conns = push_mix(&d, "idem");
    let pushed = snapshot(&d);
    assert_eq!(total(&pushed), 500);

    d.kill9();
    d.spawn();
    let first = snapshot(&d);
    assert_eq!(recovered_count(&d), 500);
    assert!(
        first == pushed,
        "the first recovery changed acknowledged records"
    );
    assert_contains_in_order(&d, &conns, "first recovery");
    assert_nothing_quarantined(&d, "first recovery (every write had completed)");

    d.kill9();
    d.spawn();
    assert_eq!(recovered_count(&d), 500);
    assert!(
        snapshot(&d) == first,
        "the second recovery differs from the first"
    );
    assert_nothing_quarantined(&d, "second recovery");

    d.kill9();
    d.spawn();
    assert_eq!(recovered_count(&d), 500);
    assert!(
        snapshot(&d) == first,
        "the third recovery differs from the first"
    );

    let more = push_mix(&d, "later");
    assert_contains_in_order(&d, &conns, "after pushing again");
    assert_contains_in_order(&d, &more, "after pushing again");
    check_seqs(&d.read_shards(), "after pushing again");
    d.terminate();
}

#[test]
fn recovery_of_a_torn_tail_is_idempotent() {
    // SIGKILL in the middle of a stream (possibly mid-write), then recover
    // twice: the second recovery must find nothing more to repair.
    let mut d = Daemon::start("");
    let ready = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let mut client = d.client();
            let ready = ready.clone();
            let mode = [
                Mode::Single(Tier::Sync),
                Mode::Batch(Tier::Batched, 20),
                Mode::Pipelined(Tier::Sync, 64),
            ][i];
            thread::spawn(move || {
                ready.wait();
                produce(&mut client, &format!("torn{i}"), mode, u64::MAX)
            })
        })
        .collect();
    ready.wait();
    thread::sleep(Duration::from_millis(150));
    d.kill9();
    let outcomes: Vec<ProducerOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let seen_before = snapshot(&d);

    d.spawn();
    let first = snapshot(&d);
    let n1 = recovered_count(&d);
    assert_eq!(n1 as usize, total(&first));
    assert!(
        first == seen_before,
        "recovery changed what the segment reader saw before it"
    );
    check_producers(&d.read_shards(), &outcomes, "first recovery");

    d.kill9();
    d.spawn();
    assert_eq!(recovered_count(&d), n1);
    assert!(
        snapshot(&d) == first,
        "the second recovery differs from the first"
    );
    assert_nothing_quarantined(
        &d,
        "second recovery (the first one already repaired everything)",
    );

    d.kill9();
    d.spawn();
    assert_eq!(recovered_count(&d), n1);
    assert!(
        snapshot(&d) == first,
        "the third recovery differs from the first"
    );
    check_producers(&d.read_shards(), &outcomes, "third recovery");
    d.terminate();
}

#[test]
fn records_and_batches_larger_than_a_segment_survive_restarts() {
    // 1 MiB segments; a 3 MB batch and a 2 MiB record each overflow one.
    let mut d = Daemon::start("[server]\nshards = 1\n");
    let mut client = d.client();
    let batch: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| {
            let mut r = format!("big-batch:{i}:").into_bytes();
            r.resize(1000, b'b');
            r
        })
        .collect();
    assert_eq!(client.push_batch(Tier::Sync, &batch).unwrap(), 3000);
    let mut huge = b"huge-record:".to_vec();
    huge.resize(2 * 1024 * 1024, b'h');
    client.push(Tier::Sync, &huge).unwrap();
    for i in 0..50 {
        client
            .push(Tier::Sync, format!("tail:{i}").as_bytes())
            .unwrap();
    }
    let check = |d: &Daemon, context: &str| {
        let recs = d.read_all_records();
        assert_eq!(recs.len(), 3051, "{context}");
        for (i, r) in recs[..3000].iter().enumerate() {
            assert!(r.payload[..] == batch[i][..], "{context}: batch record {i}");
        }
        assert!(
            recs[3000].payload[..] == huge[..],
            "{context}: the 2 MiB record"
        );
        assert_eq!(
            texts(&recs[3001..]),
            (0..50).map(|i| format!("tail:{i}")).collect::<Vec<_>>(),
            "{context}"
        );
        check_seqs(&d.read_shards(), context);
    };
    check(&d, "before restart");
    d.kill9();
    d.spawn();
    assert_eq!(recovered_count(&d), 3051);
    check(&d, "after kill9");
    d.restart();
    assert_eq!(recovered_count(&d), 3051);
    check(&d, "after a clean restart");
    d.client().push(Tier::Sync, b"tail:50").unwrap();
    assert_eq!(d.read_all_records().len(), 3052);
    d.terminate();
}

#[test]
fn lowering_the_shard_count_does_not_orphan_acknowledged_records() {
    // Records in shard-001 were acknowledged. Restarting with fewer shards
    // (`shards = 1`, or `shards = 0` on a machine with fewer cores) must
    // either keep them (recover and replay them) or refuse to start naming
    // the folder, never start and silently ignore them.
    let mut d = Daemon::start("[server]\nshards = 2\n");
    let mut a = d.client();
    let mut b = d.client();
    a.push(Tier::Sync, b"on-one-shard").unwrap();
    b.push(Tier::Sync, b"on-the-other-shard").unwrap();
    drop((a, b));
    let per_shard: Vec<usize> = d.read_shards().iter().map(|(_, r)| r.len()).collect();
    assert_eq!(per_shard, [1, 1], "two connections, two shards");
    d.terminate();

    d.reconfigure("[server]\nshards = 1\n");
    let out = d.run_to_exit_or_start(Duration::from_secs(20));
    match out {
        StartOrExit::Exited(f) => {
            assert!(!f.status.success());
            assert!(
                f.stderr.contains("shard-001"),
                "refused to start without naming shard-001:\n{}",
                f.stderr
            );
        }
        StartOrExit::Started => {
            assert_eq!(
                recovered_count(&d),
                2,
                "started with shards = 1 and silently left the acknowledged record in shard-001 behind; stdout:\n{}\nstderr:\n{}",
                d.stdout(),
                d.stderr()
            );
        }
    }
    assert_eq!(
        d.read_all_records().len(),
        2,
        "the records are still on disk"
    );
}

#[test]
fn raising_the_shard_count_keeps_old_records() {
    let mut d = Daemon::start("[server]\nshards = 1\n");
    let mut c = d.client();
    for i in 0..10 {
        c.push(Tier::Sync, format!("old:{i}").as_bytes()).unwrap();
    }
    drop(c);
    d.terminate();
    d.reconfigure("[server]\nshards = 3\n");
    d.spawn();
    assert_eq!(recovered_count(&d), 10);
    let mut clients: Vec<Client> = (0..3).map(|_| d.client()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.push(Tier::Sync, format!("new:{i}").as_bytes()).unwrap();
    }
    let shards = d.read_shards();
    assert_eq!(shards.len(), 3);
    let all: Vec<String> = shards.iter().flat_map(|(_, r)| texts(r)).collect();
    assert_eq!(all.iter().filter(|t| t.starts_with("old:")).count(), 10);
    assert_eq!(all.iter().filter(|t| t.starts_with("new:")).count(), 3);
    check_seqs(&shards, "after raising the shard count");
    d.terminate();
}

/// The start-up line tells records waiting for a sink from records every
/// sink has (kept only until their segment is read past and deleted).
#[test]
fn the_start_up_line_tells_pending_from_delivered() {
    let rx = spillway_tests::receiver::HttpReceiver::start();
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n[sink]\ntype = \"http\"\nurl = \"{}\"\n",
        rx.url()
    ));
    let mut c = d.client();
    for i in 0..40 {
        c.push(Tier::Sync, format!("delivered-{i}").as_bytes())
            .unwrap();
    }
    rx.wait_distinct(40, std::time::Duration::from_secs(10));
    // Confirmed on disk: the shard's checkpoint follows once the sink is idle.
    let checkpoint = || {
        let v: serde_json::Value = serde_json::from_str(&d.ctl(&["--json", "stats"])).unwrap();
        v["shards"][0]["checkpoint"].as_u64().unwrap()
    };
    assert!(
        wait_until(std::time::Duration::from_secs(10), || checkpoint() == 40),
        "the checkpoint stays at {}",
        checkpoint()
    );
    d.terminate();
    rx.set_status(503);
    d.restart();
    assert_eq!(kept_at_start(&d.stdout()), Some((0, 40)), "{}", d.stdout());
    let mut c = d.client();
    for i in 0..7 {
        c.push(Tier::Sync, format!("pending-{i}").as_bytes())
            .unwrap();
    }
    d.terminate();
    d.restart();
    // The 40 went with their segment once the last run read past it.
    assert_eq!(kept_at_start(&d.stdout()), Some((7, 0)), "{}", d.stdout());
}
