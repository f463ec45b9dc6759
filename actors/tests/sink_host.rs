//! The SinkHost in process: a sink that panics becomes a `Retry` and a new
//! instance after a backoff, a maker that fails becomes a `Retry` with its
//! reason, and a reload through `SinkSlot::replace` takes over at
//! `check_reload()`. Then the whole per-shard `Drain` driven by a real
//! `ShardFlusher` on a temporary folder: every record reaches a recording
//! sink in order, none lost, through panics, retries and partial commits,
//! and across segment rotations while the sink is busy.

use std::panic;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sink_sdk::delivery::{factory_fn, DeliveryConfig, SinkFactory, StartAt};
use sink_sdk::{records, Batch, Limits, Outcome, RecordOutcome, Sink};
use spillway_actors::{
    AppendBatch, Clock, CommitTarget, Cursor, CursorConfig, CursorControl, Drain, DrainStats,
    FlusherConfig, PendingRecord, Retention, ShardFlusher, ShardQueue, SinkHost, SinkSlot,
    WabBudget,
};
use spillway_protocol::NackReason;
use spillway_wab::deadletter::DeadLetterStore;
use spillway_wab::{FsStorage, RecordMeta, Storage, StorageFile};

/// Scripted panics print through the default hook; keep the output short.
fn quiet_scripted_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or(info.payload().downcast_ref::<&str>().copied());
            if msg.is_some_and(|m| m.starts_with("scripted")) {
                eprintln!("(scripted sink panic: {})", msg.unwrap());
            } else {
                default(info);
            }
        }));
    });
}

type Log = Arc<Mutex<Vec<(u32, u64, Vec<u8>)>>>;

/// What a scripted sink does on its n-th `deliver` call (counted across
/// every instance, from 1).
#[derive(Default)]
struct Script {
    calls: AtomicUsize,
    panic_on: Vec<usize>,
    retry_on: Vec<usize>,
    /// Commit the first half, ask to retry the rest.
    split_on: Vec<usize>,
    /// Sleep this long on these calls (a busy downstream).
    slow_on: Vec<usize>,
    slow_for: Duration,
    /// Panic on every batch that holds this payload (a poison record).
    panic_on_payload: Option<Vec<u8>>,
    /// Ask to retry every batch that holds this payload.
    retry_on_payload: Option<Vec<u8>>,
    /// Panic on every call up to this one (a sink that is down and
    /// panics for it).
    panic_until: usize,
    /// Ask to retry every call up to this one (a downstream outage).
    retry_until: usize,
    limits: Option<Limits>,
}

struct Scripted {
    name: String,
    log: Log,
    script: Arc<Script>,
}

impl Sink for Scripted {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> Limits {
        self.script.limits.unwrap_or_default()
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let n = self.script.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.script.slow_on.contains(&n) {
            std::thread::sleep(self.script.slow_for);
        }
        if self.script.panic_on.contains(&n) || n <= self.script.panic_until {
            panic!("scripted panic on deliver {n}");
        }
        let holds = |p: &Option<Vec<u8>>| {
            p.as_ref()
                .is_some_and(|p| batch.records().iter().any(|r| r.payload == &p[..]))
        };
        if holds(&self.script.panic_on_payload) {
            panic!("scripted panic on a poison record");
        }
        if holds(&self.script.retry_on_payload) || n <= self.script.retry_until {
            return Outcome::Retry {
                after: None,
                reason: format!("scripted retry on deliver {n}"),
            };
        }
        if self.script.retry_on.contains(&n) {
            return Outcome::Retry {
                after: None,
                reason: format!("scripted retry on deliver {n}"),
            };
        }
        let records = batch.records();
        let commit = if self.script.split_on.contains(&n) && records.len() > 1 {
            records.len() / 2
        } else {
            records.len()
        };
        let mut log = self.log.lock().unwrap();
        for r in &records[..commit] {
            assert_eq!(r.shard, batch.shard());
            log.push((r.shard, r.seq, r.payload.to_vec()));
        }
        if commit == records.len() {
            Outcome::Committed
        } else {
            let mut v = vec![RecordOutcome::Committed; commit];
            v.resize(records.len(), RecordOutcome::Retry);
            Outcome::Split(v)
        }
    }
}

/// A factory creating [`Scripted`] instances named (and described as)
/// `name`, counting them.
fn maker(
    name: &str,
    log: Log,
    script: Arc<Script>,
    created: Arc<AtomicUsize>,
) -> Arc<dyn SinkFactory> {
    let description = name.to_string();
    let name = name.to_string();
    factory_fn(description, move |_shard| {
        created.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Scripted {
            name: name.clone(),
            log: log.clone(),
            script: script.clone(),
        }) as Box<dyn Sink>)
    })
}

fn settings(batch_records_max: u32) -> DeliveryConfig {
    DeliveryConfig {
        batch_records_max,
        batch_bytes_max: 1 << 20,
        linger_ms: 5,
        retry_initial_ms: 10,
        retry_max_ms: 50,
        checkpoint_interval_ms: 0,
        ..DeliveryConfig::default()
    }
}

fn payloads(first_seq: u64, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("rec-{}", first_seq + i as u64).into_bytes())
        .collect()
}

fn retry_reason(o: &Outcome) -> &str {
    match o {
        Outcome::Retry { reason, .. } => reason,
        other => panic!("expected Retry, got {other:?}"),
    }
}

// ---------------------------------------------------------------- SinkHost

#[test]
fn a_panic_becomes_retry_and_a_new_instance_takes_the_same_batch_after_a_backoff() {
    quiet_scripted_panics();
    let log: Log = Default::default();
    let script = Arc::new(Script {
        panic_on: vec![2],
        ..Default::default()
    });
    let created = Arc::new(AtomicUsize::new(0));
    let slot = SinkSlot::new(
        maker("scripted", log.clone(), script.clone(), created.clone()),
        settings(100),
    );
    let stats = Arc::new(DrainStats::default());
    let mut host = SinkHost::new(3, slot, stats.clone());
    assert_eq!(
        created.load(Ordering::SeqCst),
        0,
        "no instance before the first batch"
    );

    let first = payloads(0, 3);
    let recs = records(3, 0, &first);
    assert_eq!(host.deliver(&Batch::new(3, &recs)), Outcome::Committed);
    assert_eq!(created.load(Ordering::SeqCst), 1);

    let second = payloads(3, 4);
    let recs = records(3, 3, &second);
    let batch = Batch::new(3, &recs);
    // The backoff runs from the panic, inside this call: timed from its
    // start, the wait below is a lower bound whatever the machine's load.
    let t0 = Instant::now();
    let out = host.deliver(&batch);
    let reason = retry_reason(&out);
    assert!(
        reason.contains("panicked") && reason.contains("scripted panic on deliver 2"),
        "{reason}"
    );
    assert!(
        reason.contains("scripted"),
        "the reason names the sink: {reason}"
    );
    assert_eq!(stats.sink_restarts.load(Ordering::SeqCst), 1);
    assert_eq!(
        created.load(Ordering::SeqCst),
        1,
        "the instance is re-created lazily, at the next batch"
    );
    assert_eq!(
        log.lock().unwrap().len(),
        3,
        "the panicking call delivered nothing"
    );

    assert_eq!(
        host.deliver(&batch),
        Outcome::Committed,
        "the same batch on the next call"
    );
    let waited = t0.elapsed();
    eprintln!("re-created the sink after {waited:?}");
    assert_eq!(created.load(Ordering::SeqCst), 2, "a new instance");
    assert!(
        waited >= Duration::from_millis(100),
        "no backoff before re-creating the sink: {waited:?}"
    );
    let seqs: Vec<u64> = log.lock().unwrap().iter().map(|r| r.1).collect();
    assert_eq!(seqs, (0..7).collect::<Vec<_>>());

    // Healthy again: no further backoff, same instance.
    let third = payloads(7, 1);
    let recs = records(3, 7, &third);
    assert_eq!(host.deliver(&Batch::new(3, &recs)), Outcome::Committed);
    assert_eq!(created.load(Ordering::SeqCst), 2);
    assert_eq!(stats.sink_restarts.load(Ordering::SeqCst), 1);
}

#[test]
fn a_failing_maker_becomes_retry_with_its_reason_and_backs_off() {
    quiet_scripted_panics();
    let log: Log = Default::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = maker(
        "scripted",
        log.clone(),
        Arc::new(Script::default()),
        Arc::new(AtomicUsize::new(0)),
    );
    let c = calls.clone();
    // Fails twice (an error, then a panic), then works.
    let flaky = factory_fn("flaky", move |shard| {
        match c.fetch_add(1, Ordering::SeqCst) {
            0 => Err("downstream config unreadable: no such file".into()),
            1 => panic!("scripted panic in the maker"),
            _ => inner.create(shard),
        }
    });
    let stats = Arc::new(DrainStats::default());
    let mut host = SinkHost::new(0, SinkSlot::new(flaky, settings(10)), stats.clone());
    let p = payloads(0, 2);
    let recs = records(0, 0, &p);
    let batch = Batch::new(0, &recs);

    // Each backoff runs from a failure inside a call to the end of the
    // next call: timed from the start of the failing call, it is a lower
    // bound whatever the machine's load (timed from its end, a call that
    // returned late made the wait look short: CI saw 199.4 ms for 200).
    let t0 = Instant::now();
    let out = host.deliver(&batch);
    let reason = retry_reason(&out);
    assert!(
        reason.contains("downstream config unreadable: no such file"),
        "{reason}"
    );
    assert!(matches!(out, Outcome::Retry { after: None, .. }));

    let t1 = Instant::now();
    let out = host.deliver(&batch);
    let first_wait = t0.elapsed();
    let reason = retry_reason(&out);
    assert!(
        reason.contains("panicked") && reason.contains("scripted panic in the maker"),
        "{reason}"
    );

    assert_eq!(host.deliver(&batch), Outcome::Committed);
    let second_wait = t1.elapsed();
    eprintln!("maker retried after {first_wait:?}, then after {second_wait:?}");
    assert!(first_wait >= Duration::from_millis(100), "{first_wait:?}");
    assert!(
        second_wait >= Duration::from_millis(200),
        "the backoff does not grow: {second_wait:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(stats.sink_restarts.load(Ordering::SeqCst), 2);
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[test]
fn a_reload_switches_to_the_new_maker_at_check_reload() {
    let (log_a, log_b): (Log, Log) = Default::default();
    let (made_a, made_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let script_a = Arc::new(Script {
        limits: Some(Limits {
            max_records: 7,
            max_bytes: 1 << 30,
        }),
        ..Default::default()
    });
    let slot = SinkSlot::new(
        maker("a", log_a.clone(), script_a, made_a.clone()),
        settings(100),
    );
    let mut host = SinkHost::new(1, slot.clone(), Arc::new(DrainStats::default()));
    assert_eq!(
        host.batch_limits(),
        (100, 1 << 20),
        "settings alone before an instance exists"
    );

    let p = payloads(0, 2);
    let recs = records(1, 0, &p);
    assert_eq!(host.deliver(&Batch::new(1, &recs)), Outcome::Committed);
    assert_eq!(
        host.batch_limits(),
        (7, 1 << 20),
        "the smaller of the settings and the sink's limits"
    );

    let new_settings = DeliveryConfig {
        batch_records_max: 5,
        linger_ms: 1,
        ..settings(5)
    };
    slot.replace(
        maker(
            "b",
            log_b.clone(),
            Arc::new(Script::default()),
            made_b.clone(),
        ),
        new_settings.clone(),
    );
    // Not yet: the host switches only between batches, when told to.
    let p2 = payloads(2, 1);
    let recs = records(1, 2, &p2);
    assert_eq!(host.deliver(&Batch::new(1, &recs)), Outcome::Committed);
    assert_eq!(
        (made_a.load(Ordering::SeqCst), made_b.load(Ordering::SeqCst)),
        (1, 0)
    );
    assert_eq!(log_a.lock().unwrap().len(), 3);

    host.check_reload();
    assert_eq!(host.settings(), &new_settings);
    assert_eq!(host.batch_limits(), (5, 1 << 20));
    let p3 = payloads(3, 2);
    let recs = records(1, 3, &p3);
    assert_eq!(host.deliver(&Batch::new(1, &recs)), Outcome::Committed);
    assert_eq!(
        (made_a.load(Ordering::SeqCst), made_b.load(Ordering::SeqCst)),
        (1, 1)
    );
    assert_eq!(
        log_a.lock().unwrap().len(),
        3,
        "the old sink got nothing after the switch"
    );
    let b: Vec<u64> = log_b.lock().unwrap().iter().map(|r| r.1).collect();
    assert_eq!(b, vec![3, 4]);

    // A second check without a new reload changes nothing.
    host.check_reload();
    assert_eq!(host.deliver(&Batch::new(1, &recs)), Outcome::Committed);
    assert_eq!(made_b.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- whole Drain

/// Receives the flusher's commit answers for the test.
struct Commits(Mutex<mpsc::Sender<(u64, Result<u64, NackReason>)>>);

impl CommitTarget for Commits {
    fn committed(&self, token: u64, result: Result<u64, NackReason>) {
        let _ = self.0.lock().unwrap().send((token, result));
    }
}

struct Rig {
    _tmp: tempfile::TempDir,
    queue: Arc<ShardQueue>,
    wab: Arc<WabBudget>,
    flusher: Option<ShardFlusher>,
    drain: Option<Drain>,
    stats: Arc<DrainStats>,
    dead_dir: std::path::PathBuf,
    control: Arc<CursorControl>,
    target: Arc<Commits>,
    commits: mpsc::Receiver<(u64, Result<u64, NackReason>)>,
    next_token: u64,
}

impl Rig {
    /// A real flusher (segments of `segment_bytes`) and drain on shard 0 of
    /// a temporary data folder. Both run on their own OS threads; no actor
    /// system is needed to drive them.
    fn start(segment_bytes: u64, slot: Arc<SinkSlot>) -> Rig {
        Rig::start_on(FsStorage, segment_bytes, slot)
    }

    /// [`Rig::start`] on `storage`.
    fn start_on<S: Storage>(storage: S, segment_bytes: u64, slot: Arc<SinkSlot>) -> Rig {
        let tmp = tempfile::tempdir().unwrap();
        let dir = spillway_wab::shard_dir(tmp.path(), 0);
        let wab = WabBudget::new(1 << 30);
        let queue = ShardQueue::new(0, &wab);
        let cfg = FlusherConfig {
            shard: 0,
            dir: dir.clone(),
            segment_bytes_max: segment_bytes,
            buffered_flush_interval: Duration::from_millis(50),
            fsync_failures_max: 3,
            spin: Duration::ZERO,
            group_bytes_max: 4 << 20,
        };
        let (flusher, _report) =
            ShardFlusher::open(storage.clone(), cfg, queue.clone(), 0).expect("opening the shard");
        let dead = Arc::new(Mutex::new(
            DeadLetterStore::open(storage.clone(), &tmp.path().join("dead-letter")).unwrap(),
        ));
        let stats = Arc::new(DrainStats::default());
        let sinks = ["default".to_string()];
        let retention = Retention::open(
            storage.clone(),
            0,
            dir.clone(),
            queue.clone(),
            &sinks,
            Arc::default(),
        )
        .expect("opening the retention");
        let cursor = Cursor::new(
            storage,
            CursorConfig {
                sink: "default".into(),
                shard: 0,
                dir,
                skipped_file: tmp.path().join("skipped"),
                learned_file: None,
            },
            StartAt::End,
            queue.clone(),
            slot,
            Arc::new(Mutex::new(retention)),
            dead,
            stats.clone(),
            Clock::system(),
            1,
        )
        .expect("opening the cursor");
        let control = Arc::new(CursorControl::default());
        let drain = Drain::spawn(cursor.with_control(control.clone())).expect("starting the drain");
        let (tx, commits) = mpsc::channel();
        let target = Arc::new(Commits(Mutex::new(tx)));
        Rig {
            dead_dir: tmp.path().join("dead-letter"),
            _tmp: tmp,
            queue,
            wab,
            flusher: Some(flusher),
            drain: Some(drain),
            stats,
            control,
            target,
            commits,
            next_token: 1,
        }
    }

    /// Append records (Sync) through the flusher; returns the first seq once durable.
    fn append(&mut self, payloads: &[Vec<u8>]) -> u64 {
        let meta = RecordMeta {
            tier: 1,
            arrival_unix_us: 1_700_000_000_000_000,
        }
        .pack();
        let recs: Vec<PendingRecord> = payloads
            .iter()
            .map(|p| PendingRecord {
                payload: Bytes::from(p.clone()),
                meta,
            })
            .collect();
        let bytes = payloads.iter().map(|p| p.len() as u64).sum();
        let token = self.next_token;
        self.next_token += 1;
        self.queue.push(AppendBatch::new(
            recs,
            bytes,
            true,
            token,
            self.target.clone(),
        ));
        let (got, result) = self
            .commits
            .recv_timeout(Duration::from_secs(10))
            .expect("no commit within 10 s");
        assert_eq!(got, token);
        result.unwrap_or_else(|r| panic!("append refused: {r:?}"))
    }

    /// `batches` appends of 32 records of 1 KiB (`r<n>:...`), `pause`
    /// after each; every record with its seq.
    fn append_kib_records(&mut self, batches: usize, pause: Duration) -> Vec<(u64, Vec<u8>)> {
        let mut expected = Vec::new();
        let mut n = 0u64;
        for _ in 0..batches {
            let ps: Vec<Vec<u8>> = (0..32)
                .map(|_| {
                    let mut p = format!("r{n}:").into_bytes();
                    p.resize(1024, b'.');
                    n += 1;
                    p
                })
                .collect();
            let first = self.append(&ps);
            expected.extend(
                ps.into_iter()
                    .enumerate()
                    .map(|(i, p)| (first + i as u64, p)),
            );
            thread::sleep(pause);
        }
        expected
    }

    /// What the dead-letter store holds.
    fn dead_letters(&self) -> Vec<spillway_wab::deadletter::DeadLetter> {
        DeadLetterStore::open(FsStorage, &self.dead_dir)
            .and_then(|d| d.list())
            .expect("reading the dead-letter store")
    }

    fn wait_delivered(&self, log: &Log, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while log.lock().unwrap().len() < n && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        // Give a wrong extra delivery a moment to show up.
        thread::sleep(Duration::from_millis(100));
    }

    fn stop(&mut self) {
        drop(self.drain.take());
        drop(self.flusher.take());
    }
}

/// Every record, in seq order, exactly once, with its payload.
fn check_log(log: &Log, expected: &[(u64, Vec<u8>)], context: &str) {
    let got = log.lock().unwrap().clone();
    let got_seqs: Vec<u64> = got.iter().map(|r| r.1).collect();
    let want_seqs: Vec<u64> = expected.iter().map(|r| r.0).collect();
    if got_seqs != want_seqs {
        let have: std::collections::HashSet<u64> = got_seqs.iter().copied().collect();
        let missing: Vec<u64> = want_seqs
            .iter()
            .copied()
            .filter(|s| !have.contains(s))
            .collect();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for s in &missing {
            match runs.last_mut() {
                Some(r) if r.1 + 1 == *s => r.1 = *s,
                _ => runs.push((*s, *s)),
            }
        }
        panic!(
            "{context}: delivered {} records, expected {}; missing seqs (runs) {runs:?}; in order: {}",
            got.len(),
            expected.len(),
            got_seqs.windows(2).all(|w| w[0] < w[1])
        );
    }
    for ((shard, seq, payload), (_, want)) in got.iter().zip(expected) {
        assert_eq!(*shard, 0);
        assert_eq!(payload, want, "{context}: payload of seq {seq}");
    }
}

#[test]
fn the_drain_delivers_every_record_in_order_through_panics_retries_and_splits() {
    quiet_scripted_panics();
    let log: Log = Default::default();
    // Call 3 panics, call 5 asks to retry, call 7 commits half and retries the rest.
    let script = Arc::new(Script {
        panic_on: vec![3],
        retry_on: vec![5],
        split_on: vec![7],
        ..Default::default()
    });
    let created = Arc::new(AtomicUsize::new(0));
    let slot = SinkSlot::new(
        maker("scripted", log.clone(), script.clone(), created.clone()),
        settings(40),
    );
    {
        let mut rig = Rig::start(1 << 20, slot);
        let mut expected = Vec::new();
        for b in 0..40u64 {
            let ps = payloads(b * 25, 25);
            let first = rig.append(&ps);
            assert_eq!(first, b * 25, "seqs are assigned in order from 0");
            expected.extend(
                ps.into_iter()
                    .enumerate()
                    .map(|(i, p)| (first + i as u64, p)),
            );
            if b % 8 == 0 {
                // Let the drain cut batches at different points.
                thread::sleep(Duration::from_millis(20));
            }
        }
        rig.wait_delivered(&log, expected.len());
        check_log(&log, &expected, "drain through panics");
        let s = &rig.stats;
        assert!(
            script.calls.load(Ordering::SeqCst) >= 8,
            "the script did not run to its end"
        );
        assert_eq!(
            created.load(Ordering::SeqCst),
            2,
            "one re-creation after the panic"
        );
        assert_eq!(s.sink_restarts.load(Ordering::SeqCst), 1);
        assert!(
            s.retries.load(Ordering::SeqCst) >= 3,
            "panic, retry and split each count: {}",
            s.retries.load(Ordering::SeqCst)
        );
        assert_eq!(s.delivered_records.load(Ordering::SeqCst), 1000);
        assert_eq!(s.dead_lettered.load(Ordering::SeqCst), 0);
        let ok = {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if s.checkpoint.load(Ordering::SeqCst) == 1000 {
                    break true;
                }
                if Instant::now() >= deadline {
                    break false;
                }
                thread::sleep(Duration::from_millis(10));
            }
        };
        assert!(
            ok,
            "the idle drain did not persist its checkpoint: {}",
            s.checkpoint.load(Ordering::SeqCst)
        );
        rig.stop();
    }
}

/// The sink is busy (slow) while the flusher fills the segment the drain
/// is reading and rotates to the next ones. Every record of every segment
/// must be delivered; fully delivered segments are deleted afterwards.
#[test]
fn the_drain_delivers_records_written_across_rotations_while_the_sink_is_busy() {
    let log: Log = Default::default();
    let script = Arc::new(Script {
        slow_on: vec![1, 2],
        slow_for: Duration::from_millis(300),
        ..Default::default()
    });
    let created = Arc::new(AtomicUsize::new(0));
    let slot = SinkSlot::new(
        maker("slow", log.clone(), script.clone(), created),
        settings(1000),
    );
    {
        // 1 MiB segments (the smallest the config allows); ~3.2 MiB of 1 KiB records.
        let mut rig = Rig::start(1 << 20, slot);
        let expected = rig.append_kib_records(100, Duration::from_millis(2));
        let rotations = rig.queue.stats.rotations.load(Ordering::SeqCst);
        rig.wait_delivered(&log, expected.len());
        eprintln!(
            "rotations while delivering: {rotations}; delivered {} of {}; wab bytes used {}",
            log.lock().unwrap().len(),
            expected.len(),
            rig.wab.used()
        );
        check_log(&log, &expected, "drain across rotations");
        rig.stop();
    }
}

/// The file system, with a hook run before each `create` and each
/// read-write `open` (what the tests below watch or slow down).
#[derive(Clone)]
struct Hooked {
    on_create: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
    on_open: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
    /// A write to a file, and an fdatasync of one.
    on_write: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
    on_sync: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
}

impl Default for Hooked {
    fn default() -> Self {
        Hooked {
            on_create: Arc::new(|_| {}),
            on_open: Arc::new(|_| {}),
            on_write: Arc::new(|_| {}),
            on_sync: Arc::new(|_| {}),
        }
    }
}

/// A file opened through [`Hooked`]: its writes and fdatasyncs are told.
struct HookedFile {
    file: <FsStorage as Storage>::File,
    path: std::path::PathBuf,
    on_write: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
    on_sync: Arc<dyn Fn(&std::path::Path) + Send + Sync>,
}

impl StorageFile for HookedFile {
    fn write_all_at(&mut self, offset: u64, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<()> {
        (self.on_write)(&self.path);
        self.file.write_all_at(offset, bufs)
    }
    fn sync_data(&mut self) -> std::io::Result<()> {
        (self.on_sync)(&self.path);
        self.file.sync_data()
    }
    fn sync_all(&mut self) -> std::io::Result<()> {
        self.file.sync_all()
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.read_at(offset, buf)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn write_out(&mut self, offset: u64, len: u64) -> std::io::Result<()> {
        self.file.write_out(offset, len)
    }
}

impl Hooked {
    fn wrap(
        &self,
        path: &std::path::Path,
        file: <FsStorage as Storage>::File,
    ) -> std::io::Result<HookedFile> {
        Ok(HookedFile {
            file,
            path: path.to_path_buf(),
            on_write: self.on_write.clone(),
            on_sync: self.on_sync.clone(),
        })
    }
}

impl Storage for Hooked {
    type File = HookedFile;
    fn create(&self, path: &std::path::Path) -> std::io::Result<Self::File> {
        (self.on_create)(path);
        self.wrap(path, FsStorage.create(path)?)
    }
    fn open(&self, path: &std::path::Path) -> std::io::Result<Self::File> {
        (self.on_open)(path);
        self.wrap(path, FsStorage.open(path)?)
    }
    fn open_read(&self, path: &std::path::Path) -> std::io::Result<Self::File> {
        self.wrap(path, FsStorage.open_read(path)?)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        FsStorage.rename(from, to)
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        FsStorage.sync_dir(dir)
    }
    fn remove(&self, path: &std::path::Path) -> std::io::Result<()> {
        FsStorage.remove(path)
    }
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        FsStorage.create_dir_all(dir)
    }
    fn list(&self, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        FsStorage.list(dir)
    }
}

/// The sealer is late with a spare (past the flusher's wait), so the
/// flusher preallocates one inline, with a higher id; the sealer's spare
/// arrives after. Writing it next put segment ids out of write order, and
/// the drain, which goes on at ids above the one it finished, skipped it
/// whole: every record in it was never delivered (the power-cut test lost
/// acknowledged records so under CI load). Every record must arrive.
#[test]
fn a_spare_the_sealer_makes_late_never_puts_segments_out_of_order() {
    let log: Log = Default::default();
    let created = Arc::new(AtomicUsize::new(0));
    let slot = SinkSlot::new(
        maker("late", log.clone(), Arc::default(), created),
        settings(1000),
    );
    // The sealer is late with one spare: the third preallocation (the
    // first is the shard's first segment, the second the sealer's first
    // spare, in use at the first rotation, the third the spare it prepares
    // then) takes longer than the flusher's 2 s wait.
    let preallocations = AtomicUsize::new(0);
    let storage = Hooked {
        on_create: Arc::new(move |path| {
            if path.to_string_lossy().ends_with(".open.tmp")
                && preallocations.fetch_add(1, Ordering::SeqCst) + 1 == 3
            {
                thread::sleep(Duration::from_millis(2600));
            }
        }),
        ..Hooked::default()
    };
    let mut rig = Rig::start_on(storage, 1 << 20, slot);
    // ~5 MiB of 1 KiB records: several rotations past the late spare.
    let expected = rig.append_kib_records(160, Duration::ZERO);
    rig.wait_delivered(&log, expected.len());
    check_log(&log, &expected, "a late spare");
    rig.stop();
}

/// A backlog of 60 batches delivered back to back: the cursor file is
/// written after every confirmed batch whatever the interval (a crash of
/// the process then offers again only the batches in flight), and
/// fdatasynced after every batch with `checkpoint_interval_ms = 0`, at most
/// once per interval otherwise: a fast sink is not held to one fdatasync
/// per batch, nor is every push's fdatasync made to wait behind it. A
/// clean stop makes the file durable. Either way every record arrives
/// once, in order, and the checkpoint ends at the last record.
#[test]
fn checkpoint_interval_fdatasyncs_the_cursor_less_often_and_a_stop_makes_it_durable() {
    // (cursor writes, cursor fdatasyncs) while the backlog went, the
    // fdatasyncs at the stop, the checkpoint at the end.
    let run = |interval: Duration| -> ((usize, usize), usize, u64) {
        let log: Log = Default::default();
        let created = Arc::new(AtomicUsize::new(0));
        let slot = SinkSlot::new(
            maker("fast", log.clone(), Arc::default(), created),
            DeliveryConfig {
                checkpoint_interval_ms: interval.as_millis() as u64,
                ..settings(10)
            },
        );
        let (writes, syncs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let cursor = |path: &std::path::Path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("cursor-")
        };
        let (w, y) = (writes.clone(), syncs.clone());
        let storage = Hooked {
            on_write: Arc::new(move |path| {
                if cursor(path) {
                    w.fetch_add(1, Ordering::SeqCst);
                }
            }),
            on_sync: Arc::new(move |path| {
                if cursor(path) {
                    y.fetch_add(1, Ordering::SeqCst);
                }
            }),
            ..Hooked::default()
        };
        let mut rig = Rig::start_on(storage, 1 << 20, slot);
        // The backlog builds while the sink is paused, then goes in one run.
        rig.control.set_paused(true);
        let mut expected = Vec::new();
        for b in 0..20u64 {
            let ps = payloads(b * 30, 30);
            let first = rig.append(&ps);
            expected.extend(
                ps.into_iter()
                    .enumerate()
                    .map(|(i, p)| (first + i as u64, p)),
            );
        }
        thread::sleep(Duration::from_millis(100));
        let before = (writes.load(Ordering::SeqCst), syncs.load(Ordering::SeqCst));
        rig.control.set_paused(false);
        rig.wait_delivered(&log, expected.len());
        let deadline = Instant::now() + Duration::from_secs(10);
        while rig.stats.checkpoint.load(Ordering::SeqCst) < 600 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        check_log(&log, &expected, &format!("interval {interval:?}"));
        let checkpoint = rig.stats.checkpoint.load(Ordering::SeqCst);
        let during = (
            writes.load(Ordering::SeqCst) - before.0,
            syncs.load(Ordering::SeqCst) - before.1,
        );
        let synced = syncs.load(Ordering::SeqCst);
        rig.stop();
        (during, syncs.load(Ordering::SeqCst) - synced, checkpoint)
    };
    let ((writes, syncs), _, end) = run(Duration::ZERO);
    assert_eq!(end, 600, "the checkpoint ends past the last record");
    assert!(writes >= 60, "{writes} cursor writes for 60 batches");
    assert!(
        syncs >= 60,
        "{syncs} cursor fdatasyncs for 60 batches with interval 0"
    );
    let ((writes, syncs), at_stop, end) = run(Duration::from_secs(60));
    assert_eq!(
        end, 600,
        "the idle sink's cursor file says where it is at once"
    );
    assert!(
        writes >= 60,
        "{writes} cursor writes for 60 batches with a 60 s interval"
    );
    assert!(
        syncs <= 1,
        "{syncs} cursor fdatasyncs for 60 batches with a 60 s interval"
    );
    assert_eq!(at_stop, 1, "a clean stop fdatasyncs the cursor file once");
}

/// 1,000 records, one of them poison; `script` fails on it. Returns the
/// rig's log, stats and dead letters once the 999 others are delivered
/// (within `within`), or panics saying what arrived.
fn deliver_beside_a_poison_record(
    at: usize,
    script: Script,
    mut settings: DeliveryConfig,
    within: Duration,
) -> (
    Vec<u64>,
    Arc<DrainStats>,
    Vec<spillway_wab::deadletter::DeadLetter>,
    Duration,
) {
    quiet_scripted_panics();
    settings.batch_records_max = 1000;
    let log: Log = Default::default();
    let poison = b"poison".to_vec();
    let script = Arc::new(script);
    let slot = SinkSlot::new(
        maker("scripted", log.clone(), script, Arc::default()),
        settings,
    );
    let mut rig = Rig::start(64 << 20, slot);
    rig.control.set_paused(true);
    let mut ps = payloads(0, 1000);
    ps[at] = poison;
    assert_eq!(rig.append(&ps), 0);
    let started = Instant::now();
    rig.control.set_paused(false);
    let deadline = started + within;
    loop {
        let done = log.lock().unwrap().len() == 999
            && rig.stats.dead_lettered.load(Ordering::SeqCst) == 1
            && rig.stats.checkpoint.load(Ordering::SeqCst) == 1000;
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within {within:?}: {} records delivered, {} dead-lettered, checkpoint {}",
            log.lock().unwrap().len(),
            rig.stats.dead_lettered.load(Ordering::SeqCst),
            rig.stats.checkpoint.load(Ordering::SeqCst)
        );
        thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    let seqs: Vec<u64> = log.lock().unwrap().iter().map(|r| r.1).collect();
    let dead = rig.dead_letters();
    let stats = rig.stats.clone();
    rig.stop();
    (seqs, stats, dead, took)
}

/// Every seq of 0..1000 but `at`, once, in order.
fn all_but_the_poison(seqs: &[u64], at: u64) {
    let want: Vec<u64> = (0..1000).filter(|&s| s != at).collect();
    assert_eq!(seqs, &want[..], "the 999 good records, in order, once");
}

/// The first and the last record of the batch: halving finds nothing
/// that goes through before it (the batch after it is the witness), or
/// nothing after it.
#[test]
fn a_poison_record_at_either_end_of_its_batch_is_isolated() {
    for at in [0, 999] {
        let (seqs, stats, dead, took) = deliver_beside_a_poison_record(
            at,
            Script {
                panic_on_payload: Some(b"poison".to_vec()),
                ..Default::default()
            },
            settings(1000),
            Duration::from_secs(10),
        );
        all_but_the_poison(&seqs, at as u64);
        assert_eq!(dead.len(), 1, "{dead:?}");
        assert_eq!(dead[0].seq, at as u64);
        assert_eq!(stats.poison_records.load(Ordering::SeqCst), 1);
        eprintln!("poison record at {at} set aside after {took:?}");
    }
}

#[test]
fn a_record_the_sink_panics_on_is_isolated_and_dead_lettered_alone() {
    let (seqs, stats, dead, took) = deliver_beside_a_poison_record(
        637,
        Script {
            panic_on_payload: Some(b"poison".to_vec()),
            ..Default::default()
        },
        settings(1000),
        Duration::from_secs(10),
    );
    all_but_the_poison(&seqs, 637);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].seq, 637);
    assert_eq!(dead[0].payload, &b"poison"[..]);
    assert!(
        dead[0].reason.starts_with("panicked: ")
            && dead[0].reason.contains("scripted panic on a poison record"),
        "{}",
        dead[0].reason
    );
    assert_eq!(stats.poison_records.load(Ordering::SeqCst), 1);
    // 1,000 down to one record: ten halvings at least.
    assert!(stats.batch_splits.load(Ordering::SeqCst) >= 10);
    eprintln!(
        "panicking poison record set aside after {took:?}, {} splits",
        stats.batch_splits.load(Ordering::SeqCst)
    );
}

/// With batches in flight on worker threads (each with its own instance),
/// the halves go out side by side: the same records arrive, in any order.
#[test]
fn a_poison_record_is_isolated_with_batches_in_flight_too() {
    for (what, script, limit) in [
        (
            "panics",
            Script {
                panic_on_payload: Some(b"poison".to_vec()),
                ..Default::default()
            },
            0,
        ),
        (
            "retries",
            Script {
                retry_on_payload: Some(b"poison".to_vec()),
                ..Default::default()
            },
            1_000,
        ),
    ] {
        let (mut seqs, stats, dead, took) = deliver_beside_a_poison_record(
            637,
            script,
            DeliveryConfig {
                batches_in_flight: sink_sdk::delivery::InFlight::Fixed(4),
                retry_duration_max_ms: limit,
                ..settings(1000)
            },
            Duration::from_secs(30),
        );
        seqs.sort_unstable();
        all_but_the_poison(&seqs, 637);
        assert_eq!(dead.len(), 1, "{what}: {dead:?}");
        assert_eq!(dead[0].seq, 637, "{what}");
        assert_eq!(stats.poison_records.load(Ordering::SeqCst), 1, "{what}");
        eprintln!("{what}, 4 batches in flight: set aside after {took:?}");
    }
}

#[test]
fn a_record_the_sink_always_retries_is_isolated_and_dead_lettered_at_the_time_limit() {
    let (seqs, stats, dead, took) = deliver_beside_a_poison_record(
        637,
        Script {
            retry_on_payload: Some(b"poison".to_vec()),
            ..Default::default()
        },
        DeliveryConfig {
            retry_duration_max_ms: 2_000,
            ..settings(1000)
        },
        Duration::from_secs(30),
    );
    all_but_the_poison(&seqs, 637);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].seq, 637);
    assert!(
        dead[0]
            .reason
            .starts_with("retried for 2 s: scripted retry"),
        "{}",
        dead[0].reason
    );
    assert_eq!(stats.poison_records.load(Ordering::SeqCst), 1);
    assert!(
        took >= Duration::from_secs(2),
        "not before the limit: {took:?}"
    );
}

/// A sink that is down (it asks to retry, or panics, on every call for a
/// while) is no poison: batches are halved while it fails, and once it is
/// back every record arrives, in order, none dead-lettered.
#[test]
fn an_outage_dead_letters_nothing_though_its_batches_are_halved() {
    quiet_scripted_panics();
    for (panics, script) in [
        (
            false,
            Script {
                retry_until: 40,
                ..Default::default()
            },
        ),
        (
            true,
            Script {
                panic_until: 6,
                ..Default::default()
            },
        ),
    ] {
        let log: Log = Default::default();
        let slot = SinkSlot::new(
            maker("scripted", log.clone(), Arc::new(script), Arc::default()),
            settings(100),
        );
        let mut rig = Rig::start(64 << 20, slot);
        let mut expected = Vec::new();
        for b in 0..10u64 {
            let ps = payloads(b * 50, 50);
            let first = rig.append(&ps);
            expected.extend(
                ps.into_iter()
                    .enumerate()
                    .map(|(i, p)| (first + i as u64, p)),
            );
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while log.lock().unwrap().len() < expected.len() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        // One batch at a time keeps the push order through it.
        check_log(
            &log,
            &expected,
            &format!("after the outage (panics: {panics})"),
        );
        assert_eq!(rig.stats.dead_lettered.load(Ordering::SeqCst), 0);
        assert!(
            rig.stats.batch_splits.load(Ordering::SeqCst) > 0,
            "the outage halved batches"
        );
        rig.stop();
    }
}
