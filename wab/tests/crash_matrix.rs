//! Crash at every step of a write / sync / rotate / seal sequence, and at
//! every step of recovery itself. After recovery with the real file system:
//! every acked record is there, in order; recovery is idempotent; and a
//! recovery interrupted by a crash, then rerun, ends exactly where an
//! uninterrupted one does.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

use common::*;
use spillway_wab::fault::{Fault, FaultKind, FaultyStorage, Op};
use spillway_wab::format::{classify, FileKind};
use spillway_wab::{
    preallocate, read_shard, recover_shard, seal, ActiveSegment, End, FsStorage, Opened,
    SegmentReader, Storage, QUARANTINE_DIR,
};

const SHARD: u32 = 4;
const ALL_OPS: [Op; 10] = [
    Op::Create,
    Op::Open,
    Op::Write,
    Op::SyncData,
    Op::SyncAll,
    Op::SetLen,
    Op::Rename,
    Op::SyncDir,
    Op::Remove,
    Op::Read,
];

struct Workload {
    cap: u64,
    groups: Vec<Vec<Rec>>,
    /// Seal the previous segment only after the first group of the next one
    /// is durable (the sealer runs behind the flusher), so a crash can leave
    /// two used `.open` segments.
    seal_lag: bool,
}

impl Workload {
    fn new(seal_lag: bool) -> Self {
        let mut groups = Vec::new();
        let mut seq = 0;
        for i in 0..14u64 {
            let n = i % 4 + 1;
            groups.push(recs(seq, n, |s| 30 + (s as usize * 53) % 300));
            seq += n;
        }
        Workload {
            cap: 2048,
            groups,
            seal_lag,
        }
    }

    fn attempted(&self) -> Vec<Rec> {
        self.groups.concat()
    }

    /// Run the writer the way the daemon does: a spare preallocated ahead,
    /// group commit (append + fdatasync, then ack), rotation when a group
    /// does not fit, sealing of the full segment. Stops at the first error
    /// (after a crash every operation fails). Returns the acked records.
    fn run<S: Storage>(&self, s: &S, dir: &Path) -> (Vec<Rec>, io::Result<()>) {
        let mut acked = Vec::new();
        let result = (|| -> io::Result<()> {
            s.create_dir_all(dir)?;
            let mut next_id = 0;
            let first = preallocate(s, dir, next_id, self.cap)?;
            next_id += 1;
            let mut spare = Some(preallocate(s, dir, next_id, self.cap)?);
            next_id += 1;
            let mut seg = ActiveSegment::start(first, SHARD, 0);
            let mut pending = None;
            for g in &self.groups {
                let bytes: u64 = g.iter().map(|r| r.payload.len() as u64).sum();
                if !seg.is_empty() && !seg.fits(bytes, g.len() as u64) {
                    let next_seq = seg.next_seq();
                    let fresh = ActiveSegment::start(spare.take().unwrap(), SHARD, next_seq);
                    let sealing = std::mem::replace(&mut seg, fresh).into_sealing();
                    if self.seal_lag {
                        pending = Some(sealing);
                    } else {
                        seal(s, dir, sealing)?;
                    }
                    spare = Some(preallocate(s, dir, next_id, self.cap)?);
                    next_id += 1;
                }
                append(&mut seg, g)?;
                seg.sync()?;
                acked.extend_from_slice(g);
                if let Some(p) = pending.take() {
                    seal(s, dir, p)?;
                }
            }
            Ok(())
        })();
        (acked, result)
    }
}

/// What a recovered directory looks like.
#[derive(Debug, PartialEq)]
struct Outcome {
    files: std::collections::BTreeMap<String, Option<Vec<u8>>>,
    next_seq: u64,
    next_segment_id: u64,
    spares: Vec<u64>,
    records: usize,
}

/// Recover `dir` with the real file system and check the invariants:
/// the records are a prefix of what was attempted and include every acked
/// one; only sealed segments (verified) and spare zero segments are left;
/// a second recovery changes nothing.
#[track_caller]
fn recover_and_check(dir: &Path, acked: &[Rec], attempted: &[Rec], what: &str) -> Outcome {
    let rec = recover_shard(&FsStorage, dir, SHARD, 0)
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    let records = read_shard(&FsStorage, dir).unwrap();
    assert!(
        records.len() >= acked.len(),
        "{what}: lost acked records ({} < {})",
        records.len(),
        acked.len()
    );
    assert!(
        records.len() <= attempted.len(),
        "{what}: more records than written"
    );
    assert_records(&records, &attempted[..records.len()]);
    let r = &rec.report;
    assert_eq!(r.next_seq, records.len() as u64, "{what}: next_seq");
    assert_eq!(
        r.record_count(),
        records.len() as u64,
        "{what}: report record count"
    );

    let mut ids = BTreeSet::new();
    let mut open_ids = Vec::new();
    for name in names(dir) {
        if name == QUARANTINE_DIR {
            for q in names(&dir.join(QUARANTINE_DIR)) {
                if let Some(FileKind::Open(id) | FileKind::Sealed(id)) = classify(&q) {
                    ids.insert(id);
                }
            }
            continue;
        }
        let path = dir.join(&name);
        match classify(&name) {
            Some(FileKind::Sealed(id)) => {
                ids.insert(id);
                let (_, _, end, offset) = read_segment(&FsStorage, &path);
                assert!(
                    matches!(end, End::Footer(_)),
                    "{what}: {name} ends with {end:?}"
                );
                assert_eq!(
                    fs::metadata(&path).unwrap().len(),
                    offset + 40,
                    "{what}: {name} not truncated"
                );
            }
            Some(FileKind::Open(id)) => {
                ids.insert(id);
                assert!(
                    matches!(
                        SegmentReader::open(&FsStorage, &path).unwrap(),
                        Opened::Unused(_)
                    ),
                    "{what}: {name} left unsealed with records"
                );
                open_ids.push(id);
            }
            other => panic!("{what}: unexpected file {name} ({other:?})"),
        }
    }
    open_ids.sort();
    let spares: Vec<u64> = rec.spares.iter().map(|s| s.segment_id).collect();
    assert_eq!(spares, open_ids, "{what}: spares");
    if let Some(max) = ids.iter().max() {
        assert!(
            r.next_segment_id > *max,
            "{what}: next_segment_id {} <= {max}",
            r.next_segment_id
        );
    }

    let outcome = Outcome {
        files: snapshot(dir),
        next_seq: r.next_seq,
        next_segment_id: r.next_segment_id,
        spares,
        records: records.len(),
    };
    let again = recover_shard(&FsStorage, dir, SHARD, 0).unwrap();
    let a = &again.report;
    assert!(
        a.quarantined.is_empty(),
        "{what}: second recovery quarantined {:?}",
        a.quarantined
    );
    assert!(
        a.resealed.is_empty(),
        "{what}: second recovery resealed {:?}",
        a.resealed
    );
    assert_eq!(a.removed_partial, 0);
    let second = Outcome {
        files: snapshot(dir),
        next_seq: a.next_seq,
        next_segment_id: a.next_segment_id,
        spares: again.spares.iter().map(|s| s.segment_id).collect(),
        records: read_shard(&FsStorage, dir).unwrap().len(),
    };
    assert!(second == outcome, "{what}: second recovery is not a no-op");
    outcome
}

/// Crashed states of one workload: (description, directory, acked records).
fn crashed_states(
    w: &Workload,
    root: &Path,
    torn_keeps: &[usize],
) -> Vec<(String, std::path::PathBuf, Vec<Rec>)> {
    // A clean run first: it must ack everything, and it tells how many
    // operations of each kind there are to crash at.
    let counter = FaultyStorage::new(vec![]);
    let clean = root.join("clean");
    let (acked, res) = w.run(&counter, &clean);
    res.unwrap();
    assert_eq!(acked, w.attempted());
    let rec = recover_shard(&FsStorage, &clean, SHARD, 0).unwrap();
    assert!(rec.report.quarantined.is_empty());
    assert!(
        rec.report.segments.len() >= 4,
        "the workload must rotate several times (got {} segments)",
        rec.report.segments.len()
    );

    let mut faults = counter.crash_points(&[
        Op::Write,
        Op::SyncData,
        Op::SyncAll,
        Op::Rename,
        Op::SyncDir,
        Op::SetLen,
        Op::Create,
        Op::Remove,
    ]);
    for n in 1..=counter.count(Op::Write) {
        for &keep in torn_keeps {
            faults.push(Fault {
                op: Op::Write,
                nth: n,
                kind: FaultKind::TornWrite { keep },
            });
        }
    }
    let mut out = Vec::new();
    for (i, f) in faults.into_iter().enumerate() {
        let dir = root.join(format!("state-{i}"));
        let storage = FaultyStorage::new(vec![f]);
        let (acked, res) = w.run(&storage, &dir);
        assert!(res.is_err() && storage.crashed(), "{f:?} never fired");
        out.push((format!("seal_lag={} {f:?}", w.seal_lag), dir, acked));
    }
    out
}

#[test]
fn crash_at_every_write_path_step_keeps_every_acked_record() {
    for seal_lag in [false, true] {
        let w = Workload::new(seal_lag);
        let root = tempfile::tempdir().unwrap();
        let states = crashed_states(&w, root.path(), &[1, 9, 16 + 5, 64 + 3, 700]);
        assert!(states.len() > 100, "only {} crash points", states.len());
        let mut distinct = BTreeSet::new();
        for (what, dir, acked) in &states {
            let o = recover_and_check(dir, acked, &w.attempted(), what);
            distinct.insert(o.records);
        }
        // The crash points cover the whole run, not just its start.
        assert!(
            distinct.len() > 10,
            "crash points reached only {distinct:?} distinct record counts"
        );
    }
}

/// Crash recovery at each of its steps, then recover again: the result must
/// be exactly that of one uninterrupted recovery (same files, same bytes,
/// same next_seq / next_segment_id / spares).
#[test]
fn crash_during_recovery_then_recover_again_is_the_same() {
    for seal_lag in [false, true] {
        let w = Workload::new(seal_lag);
        let root = tempfile::tempdir().unwrap();
        let states = crashed_states(&w, root.path(), &[9, 64 + 3]);
        let mut points = 0;
        for (i, (what, state, acked)) in states.iter().enumerate() {
            // Every third crashed state keeps the run time reasonable while
            // still covering every kind of state (the fault list cycles
            // through op kinds and positions).
            if i % 3 != 0 {
                continue;
            }
            let base_dir = root.path().join(format!("base-{i}"));
            copy_dir(state, &base_dir);
            let base = recover_and_check(&base_dir, acked, &w.attempted(), what);

            let count_dir = root.path().join(format!("count-{i}"));
            copy_dir(state, &count_dir);
            let counter = FaultyStorage::new(vec![]);
            drop(recover_shard(&counter, &count_dir, SHARD, 0).unwrap());
            assert_eq!(
                snapshot(&count_dir),
                base.files,
                "{what}: FaultyStorage without faults differs"
            );

            for op in ALL_OPS {
                for n in 1..=counter.count(op) {
                    let dir = root.path().join(format!("rec-{i}-{op:?}-{n}"));
                    copy_dir(state, &dir);
                    let faulty = FaultyStorage::new(vec![Fault {
                        op,
                        nth: n,
                        kind: FaultKind::Crash,
                    }]);
                    assert!(
                        recover_shard(&faulty, &dir, SHARD, 0).is_err(),
                        "{what}: recovery crash {op:?} #{n}"
                    );
                    let what2 = format!("{what}, then recovery crashed at {op:?} #{n}");
                    let o = recover_and_check(&dir, acked, &w.attempted(), &what2);
                    assert!(o == base, "{what2}: differs from an uninterrupted recovery");
                    fs::remove_dir_all(&dir).unwrap();
                    points += 1;
                }
            }
            fs::remove_dir_all(&count_dir).unwrap();
        }
        assert!(points > 200, "only {points} recovery crash points");
    }
}

/// A torn write *during recovery* (the footer of a resealed segment, a
/// quarantined tail, a reason file): rerunning recovery still ends with the
/// same segments and records as an uninterrupted recovery.
#[test]
fn torn_write_during_recovery_then_recover_again() {
    let w = Workload::new(true);
    let root = tempfile::tempdir().unwrap();
    let states = crashed_states(&w, root.path(), &[21]);
    let mut points = 0;
    for (i, (what, state, acked)) in states.iter().enumerate() {
        if i % 2 != 0 {
            continue;
        }
        let base_dir = root.path().join(format!("base-{i}"));
        copy_dir(state, &base_dir);
        let base = recover_and_check(&base_dir, acked, &w.attempted(), what);
        let count_dir = root.path().join(format!("count-{i}"));
        copy_dir(state, &count_dir);
        let counter = FaultyStorage::new(vec![]);
        drop(recover_shard(&counter, &count_dir, SHARD, 0).unwrap());
        for n in 1..=counter.count(Op::Write) {
            for keep in [0usize, 2, 5, 39] {
                let dir = root.path().join(format!("torn-{i}-{n}-{keep}"));
                copy_dir(state, &dir);
                let faulty = FaultyStorage::new(vec![Fault {
                    op: Op::Write,
                    nth: n,
                    kind: FaultKind::TornWrite { keep },
                }]);
                assert!(recover_shard(&faulty, &dir, SHARD, 0).is_err());
                let what2 = format!("{what}, then recovery write #{n} torn at {keep}");
                let o = recover_and_check(&dir, acked, &w.attempted(), &what2);
                let segs = |o: &Outcome| {
                    o.files
                        .iter()
                        .filter(|(k, _)| !k.starts_with(QUARANTINE_DIR))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect::<Vec<_>>()
                };
                assert!(
                    segs(&o) == segs(&base),
                    "{what2}: segments differ from an uninterrupted recovery"
                );
                assert_eq!(
                    (o.next_seq, o.next_segment_id, &o.spares, o.records),
                    (
                        base.next_seq,
                        base.next_segment_id,
                        &base.spares,
                        base.records
                    ),
                    "{what2}"
                );
                fs::remove_dir_all(&dir).unwrap();
                points += 1;
            }
        }
    }
    assert!(points > 20, "only {points} torn recovery writes");
}
