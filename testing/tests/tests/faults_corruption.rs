//! Corruption from outside the daemon (issues 7 and 17), one test per case,
//! against the real binary, each with the exact number of records salvaged
//! and lost: a sealed segment deleted by hand, a checkpoint forged past the
//! data, a flipped byte in a sealed segment, in the open segment after
//! SIGKILL and in the dead-letter store, a checkpoint full of garbage, a
//! flipped byte in a sealed and in the open segment's header, a sealed
//! segment cut in half, and a directory named like a segment.
//!
//! Each test writes a known set of records with the held sink (nothing is
//! delivered, so the WAB keeps everything), reads the shard back with the
//! segment reader of `spillway_wab` to know every record's identity
//! `(shard, seq)`, damages the files while the daemon is stopped, starts it
//! again and checks what it reports (log, `ctl stats`, files it leaves) and
//! what an accepting HTTP receiver gets: exactly the records that survived,
//! under their original identities.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;
use spillway_wab::{FsStorage, Opened, SegmentReader};

/// Upper bound for "eventually delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes per test payload (about 1 KB, so a 1 MiB segment holds ~1000).
const PAYLOAD_BYTES: usize = 1000;
/// Records per PushBatch when filling segments.
const BATCH: u64 = 50;

/// Identity `(shard, seq)` to payload.
type Ids = BTreeMap<(u32, u64), Vec<u8>>;

// ---------------------------------------------------------------- helpers

/// One shard, so that every record of a test has the same shard and the
/// arithmetic of sequence numbers is plain.
const ONE_SHARD: &str = "[server]\nshards = 1\n";

/// Config overrides for one shard and an accepting HTTP sink at `rx`, with
/// quick retries.
fn accepting(rx: &HttpReceiver, extra: &str) -> String {
    format!(
        "{ONE_SHARD}[sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 500\n{extra}\n",
        rx.url()
    )
}

/// `records_lost` of `ctl stats`, summed over shards.
fn records_lost(d: &Daemon) -> u64 {
    shard_stat_sum(&d.ctl(&["stats", "--flat"]), "records_lost")
}

/// A ~1 KB payload that names its tag and number.
fn payload(tag: &str, i: u64) -> Vec<u8> {
    let mut p = format!("{tag}-{i:06}-").into_bytes();
    p.resize(PAYLOAD_BYTES, b'x');
    p
}

/// Push `n` payloads `payload(tag, 0..n)` over one connection, in Sync
/// batches of [`BATCH`], every one acked; returns them in push order.
fn push_records(d: &Daemon, tag: &str, n: u64) -> Vec<Vec<u8>> {
    let mut c = d.client();
    let all: Vec<Vec<u8>> = (0..n).map(|i| payload(tag, i)).collect();
    for chunk in all.chunks(BATCH as usize) {
        let acked = c
            .push_batch(Tier::Sync, chunk)
            .unwrap_or_else(|e| panic!("pushing {tag}: {e}; log:\n{}", d.stderr()));
        assert_eq!(acked as usize, chunk.len());
    }
    all
}

/// Every record the WAB holds (daemon stopped), by identity.
fn wab_ids(d: &Daemon) -> Ids {
    let mut out = Ids::new();
    for (shard, recs) in d.read_shards() {
        for r in recs {
            assert!(
                out.insert((shard, r.seq), r.payload.to_vec()).is_none(),
                "shard {shard} holds seq {} twice",
                r.seq
            );
        }
    }
    out
}

/// One segment file and the records the reader finds in it.
struct Segment {
    path: PathBuf,
    sealed: bool,
    first_seq: u64,
    records: Vec<StoredRecord>,
}

/// The segments of a folder (a shard's or the dead-letter store's) that
/// have a header, in sequence order; spares are skipped. Every segment
/// must read to its end without damage.
fn segments(dir: &Path) -> Vec<Segment> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let sealed = name.ends_with(".sealed");
        if !sealed && !name.ends_with(".open") {
            continue;
        }
        let mut reader = match SegmentReader::open(&FsStorage, &path).unwrap() {
            Opened::Reader(r) => r,
            Opened::Unused(_) => continue,
            Opened::BadHeader(e) => panic!("{}: bad header before any damage: {e}", path.display()),
        };
        let mut records = Vec::new();
        while let Some(r) = reader.next().unwrap() {
            records.push(r);
        }
        assert!(
            !matches!(reader.end(), Some(spillway_wab::End::Corrupt { .. })),
            "{} is damaged before the test damaged it: {:?}",
            path.display(),
            reader.end()
        );
        out.push(Segment {
            path,
            sealed,
            first_seq: reader.header().first_seq,
            records,
        });
    }
    out.sort_by_key(|s| s.first_seq);
    out
}

/// Flip every bit of the byte at `offset` of `path`.
fn flip_byte(path: &Path, offset: u64) {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0xFF;
    f.write_all_at(&b, offset).unwrap();
    f.sync_all().unwrap();
}

/// Names in `dir` that start with `prefix`.
fn names_starting(dir: &Path, prefix: &str) -> Vec<String> {
    let mut out: Vec<String> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with(prefix))
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// Log lines at ERROR level that contain every one of `needles`: a needle
/// with `=` (a `key=value` field) must be a whole word of the line, any
/// other a part of it.
fn error_lines(log: &str, needles: &[&str]) -> Vec<String> {
    log.lines()
        .filter(|l| {
            l.split_whitespace().any(|w| w == "ERROR")
                && needles.iter().all(|n| {
                    if n.contains('=') {
                        l.split_whitespace().any(|w| w == *n)
                    } else {
                        l.contains(n)
                    }
                })
        })
        .map(|l| {
            println!("log: {l}");
            l.to_string()
        })
        .collect()
}

/// Records the receiver accepted in requests numbered `since` and later,
/// by identity; an identity that arrives with two payloads is a failure.
fn accepted_since(rx: &HttpReceiver, since: usize, context: &str) -> Ids {
    let mut out = Ids::new();
    for r in rx
        .accepted_records()
        .into_iter()
        .filter(|r| r.request >= since)
    {
        let id = r.id();
        let text = r.text();
        if let Some(prev) = out.insert(id, r.payload) {
            assert_eq!(
                prev,
                out[&id],
                "{context}: identity {id:?} arrived with two payloads ({:?}, then {text:?})",
                String::from_utf8_lossy(&prev)
            );
        }
    }
    out
}

fn preview(p: &[u8]) -> String {
    String::from_utf8_lossy(&p[..p.len().min(16)]).into_owned()
}

/// Wait until every identity of `expected` was accepted (in requests
/// numbered `since` and later) with its payload, then check, once the
/// traffic has been quiet a moment, that nothing else arrived: exactly
/// `expected`, no more (a lost record delivered under some identity, or a
/// record under a new identity, is a failure).
fn assert_delivered_exactly(
    d: &Daemon,
    rx: &HttpReceiver,
    since: usize,
    expected: &Ids,
    context: &str,
) {
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    loop {
        let got = accepted_since(rx, since, context);
        let missing = expected.keys().filter(|k| !got.contains_key(k)).count();
        if missing == 0 {
            break;
        }
        if Instant::now() >= deadline {
            let first: Vec<_> = expected
                .keys()
                .filter(|k| !got.contains_key(k))
                .take(10)
                .collect();
            panic!(
                "{context}: {missing} of {} records never arrived (first: {first:?}) within \
                 {DELIVERY_TIMEOUT:?};\n{}\nlog:\n{}",
                expected.len(),
                rx.summary(),
                d.stderr()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    // Quiet: no request for a while (bounded; a liveness wait, not pacing).
    let quiet = Duration::from_millis(500);
    let mut count = rx.request_count();
    let mut since_change = Instant::now();
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    while since_change.elapsed() < quiet && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        let now = rx.request_count();
        if now != count {
            count = now;
            since_change = Instant::now();
        }
    }
    let got = accepted_since(rx, since, context);
    let extra: Vec<String> = got
        .iter()
        .filter(|(k, _)| !expected.contains_key(k))
        .take(10)
        .map(|(k, p)| format!("{k:?} {:?}", preview(p)))
        .collect();
    assert!(
        extra.is_empty(),
        "{context}: {} identities arrived that the WAB did not hold (first: {extra:?})",
        got.len() - expected.len().min(got.len())
    );
    for (id, p) in expected {
        assert_eq!(
            &got[id],
            p,
            "{context}: {id:?} arrived with another payload ({:?} instead of {:?})",
            preview(&got[id]),
            preview(p)
        );
    }
    assert_eq!(got.len(), expected.len(), "{context}");
}

/// Push `n` records after a restart; returns their identities (read back
/// from what the receiver accepts).
fn push_and_collect_new(d: &Daemon, rx: &HttpReceiver, tag: &str, n: u64) -> Ids {
    let since = rx.request_count();
    let pushed = push_records(d, tag, n);
    let recs = rx.wait_for_payloads(&pushed, DELIVERY_TIMEOUT);
    recs.into_iter()
        .filter(|r| r.request >= since && r.text().starts_with(tag))
        .map(|r| (r.id(), r.payload))
        .collect()
}

// ---------------------------------------------------------------- 1. deleted segment

#[test]
fn a_sealed_segment_deleted_from_outside_is_reported_as_a_gap() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "gap", 4000);
    d.terminate();
    let before = wab_ids(&d);
    assert_eq!(
        before.len(),
        pushed.len(),
        "the WAB holds every acked record"
    );

    let (shard, dir) = d.shard_dirs().remove(0);
    let segs = segments(&dir);
    let sealed: Vec<&Segment> = segs.iter().filter(|s| s.sealed).collect();
    assert!(
        sealed.len() >= 3,
        "4000 records of 1 KB must fill at least 3 sealed 1 MiB segments, found {}",
        sealed.len()
    );
    // A sealed segment with segments before and after it.
    let victim = sealed[1];
    let first = victim.first_seq;
    let deleted = victim.records.len() as u64;
    let last = first + deleted - 1;
    assert_eq!(victim.records[0].seq, first);
    assert_eq!(victim.records.last().unwrap().seq, last);
    fs::remove_file(&victim.path).unwrap();
    println!(
        "deleted {} holding seqs {first}..={last} ({deleted} records of {})",
        victim.path.display(),
        before.len()
    );

    d.spawn();
    let log = d.stderr();
    let gap_errors = error_lines(
        &log,
        &[
            "sequence numbers missing",
            &format!("first_seq={first}"),
            &format!("last_seq={last}"),
            &format!("lost_records={deleted}"),
        ],
    );
    assert_eq!(
        gap_errors.len(),
        1,
        "expected one ERROR naming seqs {first}..={last} and the count {deleted}; log:\n{log}"
    );
    assert_eq!(
        records_lost(&d),
        deleted,
        "records_lost must be the deleted segment's record count"
    );
    let qdir = dir.join("quarantine");
    let reason = qdir.join(format!("gap-{first}-{last}.reason"));
    assert!(
        reason.is_file(),
        "no {} (quarantine holds {:?})",
        reason.display(),
        names_starting(&qdir, "")
    );
    d.terminate();

    // Now an accepting sink: exactly the records that are left, under
    // their original identities.
    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    // Reported once: this start still lists the gap (a warning, the same
    // range, still counted) but does not raise it as new.
    let log = d.stderr();
    assert!(
        error_lines(&log, &["sequence numbers missing"]).is_empty(),
        "the gap was reported as new again; log:\n{log}"
    );
    let known: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(" WARN ")
                && l.contains("known gap")
                && l.contains(&format!("first_seq={first} last_seq={last} "))
        })
        .collect();
    assert_eq!(
        known.len(),
        1,
        "expected one warning about the known gap {first}..={last}; log:\n{log}"
    );
    assert_eq!(
        records_lost(&d),
        deleted,
        "records_lost on the second start"
    );
    let expected: Ids = before
        .iter()
        .filter(|((s, seq), _)| !(*s == shard && (first..=last).contains(seq)))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    assert_eq!(expected.len() as u64, pushed.len() as u64 - deleted);
    assert_delivered_exactly(&d, &rx, 0, &expected, "after deleting a sealed segment");
    println!(
        "delivered {} distinct records = {} pushed - {deleted} deleted",
        expected.len(),
        pushed.len()
    );
    d.terminate();
}

// ---------------------------------------------------------------- 2. forged checkpoint

/// Pushes `delivered` records that the receiver accepts, then (receiver
/// answering 503) `pending` more that it does not; stops the daemon and
/// returns what the receiver accepted and what the WAB still holds.
fn deliver_some_then_stop(
    d: &mut Daemon,
    rx: &HttpReceiver,
    tag: &str,
    delivered: u64,
    pending: u64,
) -> (Ids, Ids) {
    let first = push_records(d, &format!("{tag}a"), delivered);
    rx.wait_for_payloads(&first, DELIVERY_TIMEOUT);
    rx.set_status(503);
    push_records(d, &format!("{tag}b"), pending);
    d.terminate();
    let seen = accepted_since(rx, 0, "before the restart");
    rx.set_status(200);
    (seen, wab_ids(d))
}

#[test]
fn a_forged_checkpoint_past_the_data_is_moved_aside_and_everything_redelivered() {
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&accepting(&rx, ""));
    let (seen, held) = deliver_some_then_stop(&mut d, &rx, "fc", 1500, 1500);
    assert!(
        held.len() >= 1500,
        "the WAB must still hold the 1500 undelivered records, holds {}",
        held.len()
    );
    let data_end = held.keys().map(|(_, s)| s + 1).max().unwrap();
    let (_, dir) = d.shard_dirs().remove(0);
    const FORGED: u64 = 50_000_000;
    spillway_wab::write_checkpoint(&FsStorage, &dir, FORGED).unwrap();
    // The sink's cursor too (forged alone, the checkpoint only holds the
    // floor: the cursor says where the sink stands).
    spillway_wab::write_checkpoint_file(&FsStorage, &dir, "cursor-default", FORGED).unwrap();
    println!(
        "receiver had {} records; WAB holds {} (seqs {}..{data_end}); checkpoint forged to {FORGED}",
        seen.len(),
        held.len(),
        held.keys().next().unwrap().1
    );

    let since = rx.request_count();
    d.spawn();
    let log = d.stderr();
    assert_eq!(
        error_lines(
            &log,
            &[
                "checkpoint is ahead",
                &format!("checkpoint={FORGED}"),
                &format!("data_end={data_end}"),
            ]
        )
        .len(),
        1,
        "expected one ERROR about the checkpoint {FORGED} ahead of the data end {data_end}; log:\n{log}"
    );
    assert_eq!(
        error_lines(&log, &["cursor is ahead", &format!("cursor={FORGED}")]).len(),
        1,
        "expected one ERROR about the sink's cursor {FORGED} ahead of the data; log:\n{log}"
    );
    // The shard's checkpoint and the sink's cursor, each moved aside.
    let aside = names_starting(&dir, "checkpoint.ahead-");
    assert_eq!(aside.len(), 2, "checkpoint.ahead-* files: {aside:?}");
    assert_delivered_exactly(
        &d,
        &rx,
        since,
        &held,
        "after a checkpoint forged past the data",
    );
    assert_eq!(records_lost(&d), 0, "a forged checkpoint loses no record");

    // The forged value stays a floor: the sink may have seen those numbers.
    let new = push_and_collect_new(&d, &rx, "fcnew", 10);
    assert_eq!(new.len(), 10);
    for (shard, seq) in new.keys() {
        assert!(
            *seq >= FORGED,
            "new record ({shard}, {seq}) is numbered below the forged checkpoint {FORGED}"
        );
    }
    d.terminate();
}

// ---------------------------------------------------------------- 3. byte flipped, sealed

/// The record in the middle of `seg`, and the offset of a byte inside its
/// payload.
fn middle_record(seg: &Segment) -> (&StoredRecord, u64) {
    let r = &seg.records[seg.records.len() / 2];
    (r, r.offset + 16 + (r.payload.len() as u64) / 2)
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_loses_only_that_record() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "flip", 3000);
    d.terminate();
    let before = wab_ids(&d);
    assert_eq!(before.len(), pushed.len());
    let (shard, dir) = d.shard_dirs().remove(0);
    let segs = segments(&dir);
    let victim = segs
        .iter()
        .filter(|s| s.sealed)
        .nth(1)
        .expect("3000 records of 1 KB fill at least two sealed 1 MiB segments");
    let (rec, at) = middle_record(victim);
    let lost = rec.seq;
    flip_byte(&victim.path, at);
    println!(
        "flipped byte {at} of {} (record seq {lost} at offset {})",
        victim.path.display(),
        rec.offset
    );

    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    // The start reads a sealed segment's footer, not its records: the
    // shard's checker finds the damage right after, before any delivery
    // (its summary comes once the loss is counted).
    let checked = ["damaged in a sealed segment", "lost_records=1"];
    let found = wait_until(Duration::from_secs(30), || {
        !error_lines(&d.stderr(), &checked).is_empty()
    });
    assert!(
        found,
        "the checker never reported the damage; log:\n{}",
        d.stderr()
    );
    let log = d.stderr();
    let errors = error_lines(
        &log,
        &[
            "damaged records",
            "lost_records=1",
            &format!("lost_seqs={lost}..={lost}"),
        ],
    );
    assert_eq!(
        errors.len(),
        1,
        "expected one ERROR naming the lost seq {lost}; log:\n{log}"
    );
    assert_eq!(records_lost(&d), 1, "exactly the damaged record is lost");
    let damaged = names_starting(&dir.join("quarantine"), "");
    assert!(
        damaged
            .iter()
            .any(|n| n.contains(".damaged-at-") && n.ends_with(".reason")),
        "no damaged-at reason in quarantine: {damaged:?}"
    );
    let mut expected = before.clone();
    expected.remove(&(shard, lost)).unwrap();
    assert_delivered_exactly(
        &d,
        &rx,
        0,
        &expected,
        "after a flipped byte in a sealed segment",
    );
    println!(
        "delivered {} of {} (lost seq {lost})",
        expected.len(),
        before.len()
    );
    d.terminate();
}

// ---------------------------------------------------------------- 4. byte flipped, open

#[test]
fn a_flipped_byte_in_the_open_segment_keeps_the_records_after_it() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "open", 300);
    d.kill9();
    let before = wab_ids(&d);
    assert_eq!(
        before.len(),
        pushed.len(),
        "every acked record survives SIGKILL"
    );
    let (shard, dir) = d.shard_dirs().remove(0);
    let segs = segments(&dir);
    let open: Vec<&Segment> = segs.iter().filter(|s| !s.sealed).collect();
    assert_eq!(
        open.len(),
        1,
        "300 KB fit in one unsealed segment: {:?}",
        segs.iter().map(|s| &s.path).collect::<Vec<_>>()
    );
    let victim = open[0];
    assert_eq!(victim.records.len(), 300);
    let (rec, at) = middle_record(victim);
    let lost = rec.seq;
    let after = victim.records.iter().filter(|r| r.seq > lost).count();
    flip_byte(&victim.path, at);
    println!(
        "flipped byte {at} of {} (record seq {lost}; {after} acked records after it)",
        victim.path.display()
    );

    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    let log = d.stderr();
    let errors = error_lines(
        &log,
        &[
            "damaged records",
            "lost_records=1",
            &format!("lost_seqs={lost}..={lost}"),
        ],
    );
    assert_eq!(
        errors.len(),
        1,
        "expected one ERROR naming the lost seq {lost}; log:\n{log}"
    );
    assert!(
        !log.contains("torn tail"),
        "a damaged record with acked records after it is not a torn tail; log:\n{log}"
    );
    let quarantined = names_starting(&dir.join("quarantine"), "");
    assert!(
        !quarantined.iter().any(|n| n.contains(".tail-at-")),
        "nothing may be cut as a tail: {quarantined:?}"
    );
    assert_eq!(records_lost(&d), 1, "exactly the damaged record is lost");
    let mut expected = before.clone();
    expected.remove(&(shard, lost)).unwrap();
    assert_delivered_exactly(
        &d,
        &rx,
        0,
        &expected,
        "after a flipped byte in the open segment",
    );
    println!(
        "delivered {} of {} (lost seq {lost}, kept the {after} after it)",
        expected.len(),
        before.len()
    );
    d.terminate();
}

// ---------------------------------------------------------------- 5. dead-letter store

/// The `ctl dead-letter list` ids (`shard:seq`, the first column).
fn dead_letter_ids(d: &Daemon) -> Vec<String> {
    let (_, rows) = dead_letter_rows(&d.ctl(&["dead-letter", "list"]));
    rows.iter()
        .map(|r| r.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn a_flipped_byte_in_the_dead_letter_store_keeps_other_dead_letters_visible() {
    const POISON: u64 = 5;
    let rx = HttpReceiver::start();
    rx.reject_containing(Some(b"poison"));
    let mut d = Daemon::start(&accepting(&rx, "batch_records_max = 1"));
    let mut c = d.client();
    let mut good = Vec::new();
    for i in 0..30u64 {
        let p = if i % 6 == 3 {
            format!("poison-{i}")
        } else {
            format!("ok-{i}")
        };
        c.push(Tier::Sync, p.as_bytes()).unwrap();
        if i % 6 != 3 {
            good.push(p);
        }
    }
    rx.wait_for_payloads(&good, DELIVERY_TIMEOUT);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let ids = loop {
        let ids = dead_letter_ids(&d);
        if ids.len() as u64 == POISON {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "expected {POISON} dead letters, have {ids:?}; log:\n{}",
            d.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    };
    drop(c);
    d.terminate();

    let dl_dir = d.data_dir().join("sinks/default/dead-letter");
    let segs = segments(&dl_dir);
    let stored: usize = segs.iter().map(|s| s.records.len()).sum();
    assert_eq!(
        stored as u64, POISON,
        "the dead-letter store holds {stored} records"
    );
    // A dead letter in the middle: one with another after it in the same
    // file (or in a sealed file, whose footer counts it).
    let (seg, idx) = segs
        .iter()
        .flat_map(|s| (0..s.records.len()).map(move |i| (s, i)))
        .find(|(s, i)| *i >= 1 && (*i + 1 < s.records.len() || s.sealed))
        .or_else(|| {
            segs.iter()
                .flat_map(|s| (0..s.records.len()).map(move |i| (s, i)))
                .find(|(s, i)| *i + 1 < s.records.len() || s.sealed)
        })
        .expect("a dead letter that is not the torn-looking tail of an unsealed file");
    let rec = &seg.records[idx];
    // The envelope ends with the original payload: flip its last byte.
    let at = rec.offset + 16 + rec.payload.len() as u64 - 1;
    let body = String::from_utf8_lossy(&rec.payload).to_string();
    let victim_id = ids
        .iter()
        .find(|id| {
            // The envelope holds shard u32 and seq u64 at bytes 4..16.
            let seq = u64::from_le_bytes(rec.payload[8..16].try_into().unwrap());
            let shard = u32::from_le_bytes(rec.payload[4..8].try_into().unwrap());
            **id == format!("{shard}:{seq}")
        })
        .unwrap_or_else(|| panic!("the damaged envelope {body:?} is not among {ids:?}"))
        .clone();
    flip_byte(&seg.path, at);
    println!(
        "flipped byte {at} of {} (dead letter {victim_id}, record {idx} of {} in the file)",
        seg.path.display(),
        seg.records.len()
    );

    d.spawn();
    let log = d.stderr();
    assert_eq!(
        error_lines(&log, &["damaged records", "lost_records=1"]).len(),
        1,
        "expected one ERROR about the damaged dead letter; log:\n{log}"
    );
    let after = dead_letter_ids(&d);
    let expected: Vec<String> = ids.iter().filter(|id| **id != victim_id).cloned().collect();
    assert_eq!(
        after.iter().collect::<BTreeSet<_>>(),
        expected.iter().collect::<BTreeSet<_>>(),
        "every other dead letter must stay visible (had {ids:?}, damaged {victim_id})"
    );
    assert_eq!(after.len() as u64, POISON - 1);
    d.terminate();
}

// ---------------------------------------------------------------- 6. corrupt checkpoint

#[test]
fn a_corrupt_checkpoint_is_moved_aside_and_delivery_restarts_from_the_oldest() {
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&accepting(&rx, ""));
    let (seen, held) = deliver_some_then_stop(&mut d, &rx, "cc", 1500, 1500);
    assert!(
        held.len() >= 1500,
        "the WAB must still hold the 1500 undelivered records, holds {}",
        held.len()
    );
    let oldest_held = held.keys().next().unwrap().1;
    let (_, dir) = d.shard_dirs().remove(0);
    let ckpt = dir.join("checkpoint");
    let old = spillway_wab::read_checkpoint(&FsStorage, &dir).unwrap();
    assert!(
        old > oldest_held,
        "the checkpoint ({old}) must be past the oldest record kept ({oldest_held}) for this test \
         to show redelivery"
    );
    // The sink's own position too: with only the shard's checkpoint
    // damaged, the sink's cursor file says where it stands and nothing is
    // redelivered.
    fs::write(&ckpt, vec![0xA5u8; 8192]).unwrap();
    fs::write(dir.join("cursor-default"), vec![0xA5u8; 8192]).unwrap();
    println!(
        "receiver had {} records; WAB holds {} from seq {oldest_held}; checkpoint {old} and the sink's cursor overwritten with garbage",
        seen.len(),
        held.len()
    );

    let since = rx.request_count();
    d.spawn();
    let log = d.stderr();
    assert_eq!(
        error_lines(&log, &["checkpoint cannot be read"]).len(),
        2,
        "expected an ERROR about each unreadable checkpoint (the shard's, the sink's); log:\n{log}"
    );
    let aside = names_starting(&dir, "checkpoint.corrupt-");
    assert_eq!(aside.len(), 1, "checkpoint.corrupt-* files: {aside:?}");
    let aside = names_starting(&dir, "cursor-default.corrupt-");
    assert_eq!(aside.len(), 1, "cursor-default.corrupt-* files: {aside:?}");
    assert_delivered_exactly(
        &d,
        &rx,
        since,
        &held,
        "after a corrupt checkpoint (from the oldest record kept)",
    );
    assert_eq!(records_lost(&d), 0, "a corrupt checkpoint loses no record");

    // New numbers collide with nothing the sink or the WAB ever had.
    let max_old = seen
        .keys()
        .chain(held.keys())
        .map(|(_, s)| *s)
        .max()
        .unwrap();
    let new = push_and_collect_new(&d, &rx, "ccnew", 10);
    assert_eq!(new.len(), 10);
    for id in new.keys() {
        assert!(
            id.1 > max_old && !seen.contains_key(id) && !held.contains_key(id),
            "new record {id:?} reuses an old number (old ones go up to {max_old})"
        );
    }
    d.terminate();
}

// ---------------------------------------------------------------- 7. damaged headers (issue 17)

/// Log lines at ERROR level about a segment's damaged header that was
/// rewritten: for `segment` (decimal id), `first_seq` and `records`.
fn header_repaired_lines(log: &str, id: u64, first_seq: u64, records: usize) -> Vec<String> {
    error_lines(
        log,
        &[
            "rewrote the damaged header",
            &format!("segment={id}"),
            &format!("first_seq={first_seq}"),
            &format!("records={records}"),
        ],
    )
}

/// The segment id in a segment file's name.
fn segment_id(path: &Path) -> u64 {
    let name = path.file_name().unwrap().to_str().unwrap();
    u64::from_str_radix(&name[..16], 16).unwrap()
}

#[test]
fn a_flipped_byte_in_a_sealed_segments_header_loses_nothing() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "hdr", 3000);
    d.terminate();
    let before = wab_ids(&d);
    assert_eq!(before.len(), pushed.len());
    let (_, dir) = d.shard_dirs().remove(0);
    let segs = segments(&dir);
    let victim = segs
        .iter()
        .filter(|s| s.sealed)
        .nth(1)
        .expect("3000 records of 1 KB fill at least two sealed 1 MiB segments");
    let id = segment_id(&victim.path);
    // A byte of first_seq: without the header the records cannot be
    // numbered, and before this fix the whole segment was quarantined and
    // its records neither delivered nor counted.
    flip_byte(&victim.path, 25);
    println!(
        "flipped header byte 25 of {} ({} records from seq {})",
        victim.path.display(),
        victim.records.len(),
        victim.first_seq
    );

    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    let log = d.stderr();
    assert_eq!(
        header_repaired_lines(&log, id, victim.first_seq, victim.records.len()).len(),
        1,
        "expected one ERROR saying the header was rewritten with first_seq {} for {} records; log:\n{log}",
        victim.first_seq,
        victim.records.len()
    );
    assert!(
        error_lines(&log, &["quarantined a segment"]).is_empty()
            && error_lines(&log, &["sequence numbers missing"]).is_empty(),
        "nothing is quarantined or missing; log:\n{log}"
    );
    assert_eq!(
        records_lost(&d),
        0,
        "one flipped header byte loses no record"
    );
    let qdir = dir.join("quarantine");
    let copy = format!("{id:016x}.damaged-header");
    assert_eq!(
        names_starting(&qdir, ""),
        vec![copy.clone(), format!("{copy}.reason")],
        "the damaged header bytes are kept as evidence"
    );
    assert_delivered_exactly(
        &d,
        &rx,
        0,
        &before,
        "after a flipped byte in a sealed segment's header",
    );
    println!(
        "delivered all {} records, {} of them from the repaired segment",
        before.len(),
        victim.records.len()
    );
    d.terminate();
}

#[test]
fn a_flipped_byte_in_the_open_segments_header_loses_nothing() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "ohdr", 1500);
    let (_, dir) = d.shard_dirs().remove(0);
    let sealed_one = || {
        fs::read_dir(&dir).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sealed")
        })
    };
    assert!(
        wait_until(Duration::from_secs(10), sealed_one),
        "1500 records of 1 KB fill (and the sealer seals) a 1 MiB segment first"
    );
    d.kill9();
    let before = wab_ids(&d);
    assert_eq!(
        before.len(),
        pushed.len(),
        "every acked record survives SIGKILL"
    );
    let segs = segments(&dir);
    let open: Vec<&Segment> = segs.iter().filter(|s| !s.sealed).collect();
    assert_eq!(open.len(), 1, "one unsealed segment with records");
    let victim = open[0];
    assert!(!victim.records.is_empty());
    let id = segment_id(&victim.path);
    flip_byte(&victim.path, 30);
    println!(
        "flipped header byte 30 of {} ({} acked records from seq {})",
        victim.path.display(),
        victim.records.len(),
        victim.first_seq
    );

    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    let log = d.stderr();
    assert_eq!(
        header_repaired_lines(&log, id, victim.first_seq, victim.records.len()).len(),
        1,
        "expected one ERROR saying the header was rewritten; log:\n{log}"
    );
    assert_eq!(
        records_lost(&d),
        0,
        "one flipped header byte loses no record"
    );
    assert!(
        dir.join("quarantine")
            .join(format!("{id:016x}.damaged-header.reason"))
            .is_file(),
        "no evidence of the damaged header in quarantine"
    );
    assert_delivered_exactly(
        &d,
        &rx,
        0,
        &before,
        "after a flipped byte in the open segment's header",
    );
    println!(
        "delivered all {} records, {} of them from the repaired open segment",
        before.len(),
        victim.records.len()
    );
    d.terminate();
}

#[test]
fn a_sealed_segment_cut_in_half_delivers_its_first_half_and_counts_the_rest() {
    let mut d = Daemon::start(ONE_SHARD);
    let pushed = push_records(&d, "half", 4000);
    d.terminate();
    let before = wab_ids(&d);
    assert_eq!(before.len(), pushed.len());
    let (shard, dir) = d.shard_dirs().remove(0);
    let segs = segments(&dir);
    let sealed: Vec<&Segment> = segs.iter().filter(|s| s.sealed).collect();
    assert!(
        sealed.len() >= 3,
        "4000 records of 1 KB fill at least 3 sealed 1 MiB segments, found {}",
        sealed.len()
    );
    let victim = sealed[1];
    let id = segment_id(&victim.path);
    let len = fs::metadata(&victim.path).unwrap().len();
    let half = len / 2;
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&victim.path)
        .unwrap();
    f.set_len(half).unwrap();
    f.sync_all().unwrap();
    // Whole records before the cut are kept; the rest of the segment's
    // records are lost, and the next segment's first seq counts them.
    let kept = victim
        .records
        .iter()
        .filter(|r| r.offset + 16 + r.payload.len() as u64 <= half)
        .count();
    let lost = victim.records.len() - kept;
    let first_lost = victim.first_seq + kept as u64;
    let last_lost = victim.first_seq + victim.records.len() as u64 - 1;
    assert!(kept > 0 && lost > 0);
    println!(
        "cut {} ({} records from seq {}) to {half} of {len} bytes: {kept} whole records stay, \
         seqs {first_lost}..={last_lost} ({lost}) go",
        victim.path.display(),
        victim.records.len(),
        victim.first_seq
    );

    let rx = HttpReceiver::start();
    d.reconfigure(&accepting(&rx, ""));
    d.spawn();
    let log = d.stderr();
    assert_eq!(
        error_lines(
            &log,
            &[
                "cannot be salvaged whole",
                &format!("segment={id}"),
                &format!("kept_records={kept}"),
                &format!("lost_from_seq={first_lost}"),
            ]
        )
        .len(),
        1,
        "expected one ERROR saying {kept} records were kept and the rest lost from seq \
         {first_lost}; log:\n{log}"
    );
    assert_eq!(
        error_lines(
            &log,
            &[
                "sequence numbers missing",
                &format!("first_seq={first_lost}"),
                &format!("last_seq={last_lost}"),
                &format!("lost_records={lost}"),
            ]
        )
        .len(),
        1,
        "expected one ERROR naming the lost seqs {first_lost}..={last_lost} ({lost}); log:\n{log}"
    );
    assert_eq!(
        records_lost(&d),
        lost as u64,
        "records_lost must be exactly the records cut off"
    );
    let qdir = dir.join("quarantine");
    let reason = qdir.join(format!("gap-{first_lost}-{last_lost}.reason"));
    let text = fs::read_to_string(&reason).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (quarantine holds {:?})",
            reason.display(),
            names_starting(&qdir, "")
        )
    });
    assert!(text.contains("cut short"), "{text}");
    assert_eq!(
        names_starting(&qdir, &format!("{id:016x}.cut-at-")).len(),
        2,
        "the cut bytes and their reason are kept: {:?}",
        names_starting(&qdir, "")
    );
    let expected: Ids = before
        .iter()
        .filter(|((s, seq), _)| !(*s == shard && (first_lost..=last_lost).contains(seq)))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    assert_eq!(expected.len(), pushed.len() - lost);
    assert_delivered_exactly(&d, &rx, 0, &expected, "after a sealed segment cut in half");
    println!(
        "delivered {} records ({kept} from the cut segment); records_lost {lost}",
        expected.len()
    );
    d.terminate();
}

// ---------------------------------------------------------------- 8. a directory under a segment's name

#[test]
fn a_directory_named_like_an_open_segment_stops_the_start_with_its_path() {
    let mut d = Daemon::start(ONE_SHARD);
    push_records(&d, "dir", 10);
    d.terminate();
    let (_, dir) = d.shard_dirs().remove(0);
    let odd = dir.join("00000000000000ff.open");
    fs::create_dir(&odd).unwrap();
    match d.run_to_exit_or_start(Duration::from_secs(30)) {
        StartOrExit::Started => panic!(
            "a directory named like a segment was accepted; log:\n{}",
            d.stderr()
        ),
        StartOrExit::Exited(f) => {
            assert!(!f.status.success(), "{f:?}");
            let odd = odd.display().to_string();
            assert!(
                f.stderr.contains(&format!("{odd} is a directory"))
                    && f.stderr.contains("move it out of"),
                "the refusal does not name {odd} and what it is:\n{}",
                f.stderr
            );
        }
    }
    // Moved out of the way, the daemon starts with every record.
    fs::remove_dir(&odd).unwrap();
    d.spawn();
    assert_eq!(records_lost(&d), 0);
    d.terminate();
    assert_eq!(wab_ids(&d).len(), 10);
}
