//! Power cuts against the real binary. A SIGKILL keeps the page cache, so
//! `crash.rs` cannot catch a missing `fdatasync` or a missing directory
//! fsync; here the daemon's data folder is a `spillway-lazyfs` mount, which
//! keeps every write volatile until its file is synced and every create,
//! rename and unlink volatile until its directory is, and throws all of it
//! away on `power_cut()`.
//!
//! Each cut: producers push at all three tiers (single pushes, PushBatch
//! and pipelines, on seven connections, Sync bodies of 10 records POSTed
//! over the HTTP door on an eighth and a Sync pipeline over TLS on a
//! ninth; in one life of four at random only Buffered, on four sockets)
//! until a seeded random moment;
//! SIGKILL; power cut; restart on the same folder; then every record acked
//! at Sync or Batched must be there, in push order, and each producer's
//! records in one shard. What Buffered lost (it promises a daemon crash,
//! not a power cut) is counted and printed, with what recovery logged.
//! Several cuts share one data folder (acks of earlier lives are checked
//! again after every later cut); a fresh daemon and mount start every
//! `LIVES_PER_FOLDER` cuts so the folder stays small.
//!
//! The delivering variant has two sinks, `main` and `mirror`, each to its
//! own loopback receiver; the mirror (`batches_in_flight = "adaptive"`)
//! answers 503 in seeded stretches of its
//! own (in half the lives, from a random moment for 20–320 ms). Each sink
//! is held to the checks on its own: what it got plus what the shard files
//! kept has every Sync/Batched ack, with no gap, and after the folder's
//! last restart it gets everything it kept. Buffered losses are the worst
//! sink's.
//!
//! `SPILLWAY_POWER_CUTS=N` runs N cuts (20 by default),
//! `SPILLWAY_POWER_CUT_SEED=S` repeats a run's random choices (the kill
//! moments; the timing of the run itself cannot be repeated). Needs root
//! and /dev/fuse: under CI their absence fails the test, elsewhere it is
//! skipped with the reason.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use spillway_lazyfs::{CutReport, LazyFs};
use spillway_tests::*;

use spillway_tests::receiver::HttpReceiver;

const DEFAULT_CUTS: usize = 20;
const DEFAULT_DELIVERING_CUTS: usize = 10;
const LIVES_PER_FOLDER: usize = 5;
/// Pushing lasts this long before the SIGKILL, at random (ms).
const KILL_AFTER_MS: (u64, u64) = (30, 450);
const BUFFERED_ONLY_EVERY: u64 = 4;

/// The producers of one life: (tag prefix, mode). One life in
/// `BUFFERED_ONLY_EVERY` (at random) pushes only Buffered records: beside
/// Sync and Batched pushes every shard fdatasyncs all the time, which makes
/// the Buffered records durable too, so only such a life shows what
/// Buffered can lose.
fn modes(buffered_only: bool) -> Vec<(&'static str, Mode)> {
    if buffered_only {
        return vec![
            ("buffered-one", Mode::Single(Tier::Buffered)),
            ("buffered-batch", Mode::Batch(Tier::Buffered, 10)),
            ("buffered-pipe", Mode::Pipelined(Tier::Buffered, 32)),
            ("buffered-pipe2", Mode::Pipelined(Tier::Buffered, 32)),
        ];
    }
    vec![
        ("sync-one", Mode::Single(Tier::Sync)),
        ("sync-batch", Mode::Batch(Tier::Sync, 10)),
        ("sync-pipe", Mode::Pipelined(Tier::Sync, 16)),
        ("batched-one", Mode::Single(Tier::Batched)),
        ("batched-batch", Mode::Batch(Tier::Batched, 10)),
        ("buffered-batch", Mode::Batch(Tier::Buffered, 10)),
        ("buffered-pipe", Mode::Pipelined(Tier::Buffered, 32)),
    ]
}

fn tier_of(mode: Mode) -> Tier {
    match mode {
        Mode::Single(t) | Mode::Batch(t, _) | Mode::Pipelined(t, _) => t,
    }
}

/// A line on the test's real stderr: the per-cut figures and the summary
/// show in CI's log even when the test passes (cargo's capture takes only
/// `eprintln!`, which the failure messages use).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Where the records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    /// Nowhere (the test default): the WAB keeps every record, and what
    /// is kept is what recovery left in the shard files.
    Held,
    /// To two sinks, `main` and `mirror`, each to its own loopback HTTP
    /// receiver: main answers 200, the mirror 503 in seeded stretches of
    /// its own. The drains move their cursors and segments both confirmed
    /// are deleted while producers push, so cuts also land in cursor
    /// writes and deletions. What each sink keeps is what was delivered to
    /// it or is in the shard files the cut left.
    Delivering,
}

/// A producer's outcome with its tier.
struct Pushed {
    tier: Tier,
    life: usize,
    out: ProducerOutcome,
    /// The record numbers kept after the cut that ended its life, per view
    /// (the shard files alone when held; with what each sink got when
    /// delivering, in the order of [`Folder::rx`]).
    kept: Option<Vec<Vec<u64>>>,
    /// Where each of its records was seen in the shard files after a cut
    /// (record number -> shard, seq), for a failure message.
    seen_at: BTreeMap<u64, (u32, u64)>,
}

/// One data folder on a lazy mount and the daemon on it. Dropping it kills
/// the daemon before it unmounts (a busy mount cannot be unmounted).
struct Folder {
    fs: Option<LazyFs>,
    d: Daemon,
    /// The sinks' receivers by sink name when the daemon delivers (else
    /// empty: the sink is held).
    rx: Vec<(&'static str, HttpReceiver)>,
    /// The HTTP door's port (a producer POSTs there beside the socket's).
    http_port: u16,
    /// The TCP door's (TLS; a producer pipelines there) and whom to trust.
    tls_port: u16,
    tls: Arc<tls::ClientConfig>,
    _certs: tempfile::TempDir,
    _backing: tempfile::TempDir,
}

impl Drop for Folder {
    fn drop(&mut self) {
        if self.d.is_running() {
            self.d.kill9();
        }
        drop(self.fs.take());
    }
}

/// A daemon configured on a lazy mount at its data folder, or `None`
/// (skipped, outside CI) when FUSE cannot be used.
fn folder(sink: Sink) -> Option<Folder> {
    // The data folder is the mount's root (it always exists); the shard
    // folders, segments and checkpoints are made inside it. The sockets
    // stay on the real disk, in the daemon's temporary folder.
    let rx: Vec<(&'static str, HttpReceiver)> = match sink {
        Sink::Held => Vec::new(),
        Sink::Delivering => ["main", "mirror"]
            .into_iter()
            .map(|name| (name, HttpReceiver::start()))
            .collect(),
    };
    let config: String = rx
        .iter()
        .map(|(name, rx)| {
            // The flaky mirror has batches in flight by the adaptive limit
            // (answered out of order, settled over the finished prefix):
            // the path where a failed fsync near delivery once let a
            // cursor pass numbers nothing durable backed (issue 39).
            let in_flight = if *name == "mirror" {
                "batches_in_flight = \"adaptive\"\n"
            } else {
                ""
            };
            format!(
                "[sinks.{name}]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 500\n{in_flight}",
                rx.url()
            )
        })
        .collect();
    let (http_port, tls_port) = (free_port(), free_port());
    let certs = tempfile::tempdir().expect("tempdir");
    let ca = tls::Ca::new("power cut CA");
    let (cert, key) = ca
        .leaf("spillway", &["localhost"], false)
        .write(certs.path(), "server");
    let d = Daemon::configure(&format!(
        "[server.http]\nlisten = \"127.0.0.1:{http_port}\"\ntls = false\n\
         [server.tcp]\nlisten = \"127.0.0.1:{tls_port}\"\ncert_file = {cert:?}\nkey_file = {key:?}\n{config}"
    ));
    fs::create_dir(d.data_dir()).expect("creating the mount point");
    let backing = tempfile::Builder::new()
        .prefix("lazyfs-backing")
        .tempdir()
        .expect("tempdir");
    match LazyFs::mount(backing.path(), d.data_dir()) {
        Ok(fs) => Some(Folder {
            fs: Some(fs),
            d,
            rx,
            http_port,
            tls_port,
            tls: tls::client_config(&ca, None),
            _certs: certs,
            _backing: backing,
        }),
        Err(e) if in_ci() => {
            panic!("the power-cut test must run in CI, but FUSE cannot be used: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED: FUSE cannot be used here ({e}); CI runs this test");
            None
        }
    }
}

fn start_producers(
    f: &Folder,
    life: usize,
    buffered_only: bool,
) -> (
    Arc<Barrier>,
    Vec<(Tier, thread::JoinHandle<ProducerOutcome>)>,
) {
    let modes = modes(buffered_only);
    // Beside the socket's producers, one POSTs Sync bodies of 10 over the
    // HTTP door (not in a Buffered-only life).
    // And one pipelines Sync pushes over TLS (the TCP door).
    let (d, http_port) = (&f.d, f.http_port);
    let doors = !buffered_only;
    let ready = Arc::new(Barrier::new(modes.len() + 1 + 2 * usize::from(doors)));
    let mut handles: Vec<(Tier, thread::JoinHandle<ProducerOutcome>)> = Vec::new();
    if doors {
        let ready_http = ready.clone();
        let tag = format!("l{life}-http-sync");
        handles.push((
            Tier::Sync,
            thread::spawn(move || {
                ready_http.wait();
                http::produce_http(http_port, &tag, Tier::Sync, 10, u64::MAX)
            }),
        ));
        let mut client = Client::connect_tls(
            ("127.0.0.1", f.tls_port),
            "localhost",
            f.tls.clone(),
            Default::default(),
        )
        .expect("a TLS connection to the TCP door");
        let ready_tls = ready.clone();
        let tag = format!("l{life}-tls-sync-pipe");
        handles.push((
            Tier::Sync,
            thread::spawn(move || {
                ready_tls.wait();
                produce(&mut client, &tag, Mode::Pipelined(Tier::Sync, 16), u64::MAX)
            }),
        ));
    }
    let socket_handles: Vec<_> = modes
        .into_iter()
        .map(|(name, mode)| {
            let mut client = d.client();
            client.health().expect("health check before pushing");
            let ready = ready.clone();
            let tag = format!("l{life}-{name}");
            let h = thread::spawn(move || {
                ready.wait();
                produce(&mut client, &tag, mode, u64::MAX)
            });
            (tier_of(mode), h)
        })
        .collect();
    handles.extend(socket_handles);
    (ready, handles)
}

/// A producer's record numbers found on disk, and the shards they are in.
fn found(shards: &[(u32, Vec<StoredRecord>)], tag: &str) -> (Vec<u32>, Vec<u64>) {
    let mut in_shards = Vec::new();
    let mut ns = Vec::new();
    for (shard, recs) in shards {
        let before = ns.len();
        ns.extend(
            recs.iter()
                .filter_map(|r| parse_tagged(&r.payload))
                .filter(|(t, _)| t == tag)
                .map(|(_, n)| n),
        );
        if ns.len() > before {
            in_shards.push(*shard);
        }
    }
    (in_shards, ns)
}

/// Each shard's floor (`checkpoint`) and sink cursors (`cursor-NAME`) as
/// the files say, for a failure message.
fn positions_at(shard_dirs: &[(u32, std::path::PathBuf)]) -> String {
    let storage = spillway_wab::FsStorage;
    let mut out = Vec::new();
    for (shard, dir) in shard_dirs {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|n| n == "checkpoint" || n.starts_with("cursor-"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let read: Vec<String> = names
            .iter()
            .map(
                |n| match spillway_wab::checkpoint::read_checkpoint_file(&storage, dir, n) {
                    Ok(at) => format!("{n}={at}"),
                    Err(e) => format!("{n}=({e})"),
                },
            )
            .collect();
        out.push(format!("shard {shard}: {}", read.join(" ")));
    }
    out.join("; ")
}

/// The folder's files, for a failure message.
fn listing(root: &Path) -> String {
    let mut out = String::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let meta = e.metadata();
            if meta.as_ref().is_ok_and(|m| m.is_dir()) {
                todo.push(p);
            } else {
                let len = meta.map(|m| m.len()).unwrap_or(0);
                out.push_str(&format!("  {} ({len} bytes)\n", p.display()));
            }
        }
    }
    out
}

/// The WARN and ERROR lines of a daemon log, less the drain's complaints
/// about the held sink (nothing listens there, on purpose).
fn warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .filter(|l| !l.contains(" spillway_actors::drain::"))
        .map(str::to_string)
        .collect()
}

/// `N records pending delivery, M already delivered, in K segments` from
/// the start-up line.
fn recovered(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.rsplit_once("); ").map(|(_, r)| r.to_string()))
        .unwrap_or_else(|| "?".into())
}

#[derive(Default)]
struct Totals {
    cuts: usize,
    /// Sync records acked over the HTTP door, and over TLS (among `acked_sync`).
    acked_http: u64,
    acked_tls: u64,
    acked_sync: u64,
    acked_batched: u64,
    acked_buffered: u64,
    buffered_lost: u64,
    cuts_losing_buffered: usize,
    buffered_holes: usize,
    checked_durable: u64,
    checked_durable_again: u64,
    delivered_at_end: u64,
    restart_ms: Vec<u64>,
    fs: CutReport,
    log_lines: BTreeMap<String, usize>,
}

/// The message of a log line without its fields' values (for counting).
fn log_kind(line: &str) -> String {
    let level = if line.contains(" ERROR ") {
        "ERROR"
    } else {
        "WARN"
    };
    let msg = line
        .split_once(&format!(" {level} "))
        .map(|(_, m)| m)
        .unwrap_or(line);
    // `target: message key=value ...`: keep the words before the first field.
    let words: Vec<&str> = msg
        .split_whitespace()
        .take_while(|w| !w.contains('='))
        .collect();
    format!("{level} {}", words.join(" "))
}

/// One test at a time: the figures of each are its own (two daemons on
/// two cores would also slow each other's FUSE server).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn acked_records_survive_power_cuts() {
    run(Sink::Held, DEFAULT_CUTS);
}

#[test]
fn acked_records_survive_power_cuts_while_delivering() {
    run(Sink::Delivering, DEFAULT_DELIVERING_CUTS);
}

fn run(sink: Sink, default_cuts: usize) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !require_root("mount a FUSE file system") {
        return;
    }
    let cuts = env_u64("SPILLWAY_POWER_CUTS").map_or(default_cuts, |n| n as usize);
    let seed = env_u64("SPILLWAY_POWER_CUT_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    let name = match sink {
        Sink::Held => "power cuts (sink held)",
        Sink::Delivering => "power cuts (delivering)",
    };
    say(&format!(
        "{name}: {cuts} cuts, seed {seed:#x} (SPILLWAY_POWER_CUT_SEED={seed:#x} repeats the kill moments)"
    ));
    let wall = Instant::now();
    let mut rng = Rng::new(seed);
    let mut mrng = Rng::new(seed ^ 0x0317_3A1E_D0C5);
    let mut totals = Totals::default();
    let mut cut = 0;
    while cut < cuts {
        let Some(mut f) = folder(sink) else {
            return;
        };
        f.d.spawn();
        // Made (and fsynced) at the start, before any push: every cut
        // keeps it (the NATS sink's message ids are built from it).
        let id_file = f.d.data_dir().join("instance-id");
        let instance_id =
            fs::read_to_string(&id_file).unwrap_or_else(|e| panic!("{}: {e}", id_file.display()));
        let mut all: Vec<Pushed> = Vec::new();
        let mut prev_positions = String::from("(none: the folder's first life)");
        for life in 0..LIVES_PER_FOLDER.min(cuts - cut) {
            cut += 1;
            let kill_after = KILL_AFTER_MS.0 + rng.below(KILL_AFTER_MS.1 - KILL_AFTER_MS.0 + 1);
            let buffered_only = rng.below(BUFFERED_ONLY_EVERY) == 0;
            let pushers = if buffered_only {
                "Buffered only"
            } else {
                "all tiers"
            };
            // The mirror's 503 stretch in this life (ms after pushing
            // starts), from a generator of its own: the kill moments stay
            // what the seed made them with one sink.
            let mirror_503 = match f.rx.get(1) {
                Some(_) if mrng.below(2) == 0 => {
                    let from = mrng.below(kill_after);
                    Some((from, from + 20 + mrng.below(300)))
                }
                _ => None,
            };
            let context = format!(
                "seed {seed:#x}, cut {cut}/{cuts} (life {life} of its folder, {pushers}), kill after {kill_after} ms{}",
                match mirror_503 {
                    Some((from, to)) => format!(", mirror answering 503 from {from} to {to} ms"),
                    None => String::new(),
                }
            );

            // Push until SIGKILL.
            let (ready, handles) = start_producers(&f, life, buffered_only);
            ready.wait();
            let t0 = Instant::now();
            if let (Some((from, to)), Some((_, mirror))) = (mirror_503, f.rx.get(1)) {
                thread::sleep(Duration::from_millis(from));
                mirror.set_status(503);
                if to < kill_after {
                    thread::sleep(Duration::from_millis(to - from));
                    mirror.set_status(200);
                }
            }
            thread::sleep(Duration::from_millis(kill_after).saturating_sub(t0.elapsed()));
            f.d.kill9();
            for (_, rx) in &f.rx {
                rx.set_status(200);
            }
            let mut life_acked = BTreeMap::<&str, u64>::new();
            for (tier, h) in handles {
                let out = h.join().expect("producer thread");
                assert!(
                    !out.error.is_empty(),
                    "{context}: producer {} ended without an error: {out:?}",
                    out.tag
                );
                let key = match tier {
                    Tier::Sync => "sync",
                    Tier::Batched => "batched",
                    Tier::Buffered => "buffered",
                };
                *life_acked.entry(key).or_default() += out.acked;
                if out.tag.contains("-http-") {
                    totals.acked_http += out.acked;
                }
                if out.tag.contains("-tls-") {
                    totals.acked_tls += out.acked;
                }
                all.push(Pushed {
                    tier,
                    life,
                    out,
                    kept: None,
                    seen_at: BTreeMap::new(),
                });
            }
            let pending = f.fs.as_ref().expect("mounted").pending();

            // Pull the plug, then restart on what the "disk" kept.
            let report =
                f.fs.as_mut()
                    .expect("mounted")
                    .power_cut()
                    .unwrap_or_else(|e| panic!("{context}: power cut: {e}"));
            // What the cut left in the shard files (the daemon is dead).
            let mut unreadable = Vec::new();
            let at_cut: Vec<(u32, Vec<StoredRecord>)> =
                f.d.shard_dirs()
                    .into_iter()
                    .map(|(n, dir)| {
                        let recs = spillway_wab::read_shard(&spillway_wab::FsStorage, &dir)
                            .unwrap_or_else(|e| {
                                unreadable.push(format!("shard {n}: {e}"));
                                Vec::new()
                            });
                        (n, recs)
                    })
                    .collect();
            // Each shard's floor and sink cursors as the cut left them.
            let positions = format!(
                "{}; the files hold {}",
                positions_at(&f.d.shard_dirs()),
                at_cut
                    .iter()
                    .map(|(n, recs)| format!(
                        "shard {n}: {} records, seq {:?}..{:?}",
                        recs.len(),
                        recs.first().map(|r| r.seq),
                        recs.last().map(|r| r.seq)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            // What each sink got (when held: no sink, the shard files alone).
            let views: Vec<(&str, BTreeMap<String, Vec<u64>>)> = if f.rx.is_empty() {
                vec![("held", BTreeMap::new())]
            } else {
                f.rx.iter()
                    .map(|(name, rx)| {
                        let mut by_tag: BTreeMap<String, Vec<u64>> = BTreeMap::new();
                        // A number delivered once names that record for
                        // good: the drain reads only durable records, and
                        // a cut never takes those, so no later record may
                        // get it (the sink's cursor would skip that one).
                        let mut by_seq: BTreeMap<(u32, u64), (String, u64)> = BTreeMap::new();
                        for r in rx.accepted_records() {
                            if let Some((tag, n)) = parse_tagged(&r.payload) {
                                if let Some(was) = by_seq.get(&(r.shard, r.seq)) {
                                    assert!(
                                        *was == (tag.clone(), n),
                                        "{context}: sink {name} got shard {} seq {} twice with different records: \
                                         {} #{} then {tag} #{n} (a delivered number handed out again)\n\
                                         positions at this cut: {positions}",
                                        r.shard, r.seq, was.0, was.1
                                    );
                                }
                                by_seq.insert((r.shard, r.seq), (tag.clone(), n));
                                by_tag.entry(tag).or_default().push(n);
                            }
                        }
                        (*name, by_tag)
                    })
                    .collect()
            };
            // The errors of the life the cut ended (the restart's log
            // replaces it), for a failure message.
            let life_errors: Vec<String> =
                f.d.stderr()
                    .lines()
                    .filter(|l| l.contains(" ERROR ") || warnings(l).len() == 1)
                    .take(20)
                    .map(str::to_string)
                    .collect();
            let t = Instant::now();
            eprintln!("{context}: cut made ({report:?}), restarting");
            f.d.spawn();
            let restart_ms = t.elapsed().as_millis() as u64;
            assert_eq!(
                fs::read_to_string(&id_file).ok().as_deref(),
                Some(instance_id.as_str()),
                "{context}: the instance id did not survive the power cut"
            );
            let log = f.d.stderr();
            let warns = warnings(&log);
            // Held: what recovery kept (nothing is deleted, so the files can
            // be read while the daemon runs). Delivering: the drain deletes
            // segments now, so what the cut left is read instead.
            let shards = match sink {
                Sink::Held => {
                    let shards = f.d.read_shards();
                    check_seqs(&shards, &context);
                    shards
                }
                Sink::Delivering => at_cut,
            };
            let delivered_total: Vec<usize> = views
                .iter()
                .map(|(_, delivered)| delivered.values().map(Vec::len).sum())
                .collect();

            // Every Sync/Batched ack of this life is kept; whatever any
            // earlier life kept through its own cut is kept through this one.
            // Delivering, each sink is held to this on its own: what it got
            // plus what the shard files kept.
            let mut buffered_lost = vec![0u64; views.len()];
            let mut holes = vec![0usize; views.len()];
            for p in &mut all {
                for (shard, recs) in &shards {
                    for r in recs {
                        if let Some((tag, n)) = parse_tagged(&r.payload) {
                            if tag == p.out.tag {
                                p.seen_at.entry(n).or_insert((*shard, r.seq));
                            }
                        }
                    }
                }
                let o = &p.out;
                let (in_shards, on_disk) = found(&shards, &o.tag);
                let mut kept_now = Vec::with_capacity(views.len());
                for (vi, (view, delivered)) in views.iter().enumerate() {
                    let sent_to_sink = delivered.get(&o.tag).cloned().unwrap_or_default();
                    let mut ns = on_disk.clone();
                    ns.extend(&sent_to_sink);
                    ns.sort_unstable();
                    ns.dedup();
                    let fail = |what: &str| -> ! {
                        panic!(
                            "{context}: producer {} ({:?}, acked {}, sent {}, error {:?}), sink {view}: {what}\n\
                             kept: {} records (first {:?}, last {:?}): {} in shard files {in_shards:?} \
                             (first {:?}, last {:?}), {} delivered\n\
                             lazyfs cut: {report:?} (pending before it: {pending:?})\n\
                             shards unreadable after the cut: {unreadable:?}\n\
                             errors (and warnings outside delivery) of the life the cut ended: {life_errors:#?}\n\
                             files after the restart:\n{}\
                             daemon log of the restart:\n{log}",
                            o.tag,
                            p.tier,
                            o.acked,
                            o.sent,
                            o.error,
                            ns.len(),
                            ns.first(),
                            ns.last(),
                            on_disk.len(),
                            on_disk.first(),
                            on_disk.last(),
                            sent_to_sink.len(),
                            listing(f.d.data_dir()),
                        )
                    };
                    if !unreadable.is_empty() {
                        fail("a shard could not be read after the cut");
                    }
                    if in_shards.len() > 1 {
                        fail("records in several shards");
                    }
                    if let Some(w) = on_disk.windows(2).find(|w| w[0] >= w[1]) {
                        fail(&format!("out of order on disk: {} then {}", w[0], w[1]));
                    }
                    if ns.last().is_some_and(|&n| n >= o.sent) {
                        fail("a record that was never sent");
                    }
                    if let Some(seen) = p.kept.as_ref().map(|k| &k[vi]) {
                        let changed = match sink {
                            // Nothing is deleted: exactly the same records.
                            Sink::Held => *seen != ns,
                            // Delivered ones may leave the files: none may go.
                            Sink::Delivering => seen.iter().any(|n| ns.binary_search(n).is_err()),
                        };
                        if changed {
                            let missing: Vec<u64> = seen
                                .iter()
                                .copied()
                                .filter(|n| ns.binary_search(n).is_err())
                                .collect();
                            let at: Vec<(u32, u64)> = missing
                                .iter()
                                .filter_map(|n| p.seen_at.get(n).copied())
                                .collect();
                            let elsewhere: Vec<(&str, usize)> = views
                                .iter()
                                .map(|(other, d)| {
                                    let got = d.get(&o.tag).map_or(0, |v| {
                                        missing.iter().filter(|n| v.contains(n)).count()
                                    });
                                    (*other, got)
                                })
                                .collect();
                            fail(&format!(
                                "what survived its own cut changed at a later one: {} records then, {} now\n\
                                 missing: {} records, #{:?}..#{:?}, last seen in the files at (shard, seq) {:?}..{:?} \
                                 ({} of them seen there); of these, each sink got: {elsewhere:?}\n\
                                 positions (floor, cursors) at the cut before: {prev_positions}\n\
                                 positions at this cut: {positions}",
                                seen.len(),
                                ns.len(),
                                missing.len(),
                                missing.first(),
                                missing.last(),
                                at.first(),
                                at.last(),
                                at.len(),
                            ));
                        }
                        kept_now.push(ns);
                        continue;
                    }
                    let k = ns.len() as u64;
                    let prefix = ns == (0..k).collect::<Vec<_>>();
                    match p.tier {
                        Tier::Sync | Tier::Batched => {
                            if !prefix {
                                fail("a gap in the records");
                            }
                            if k < o.acked {
                                fail(&format!(
                                    "LOST {} acknowledged records (only {k} of {} acked are kept)",
                                    o.acked - k,
                                    o.acked
                                ));
                            }
                            if vi == 0 {
                                totals.checked_durable += o.acked;
                            }
                        }
                        Tier::Buffered => {
                            let kept = ns.iter().filter(|&&n| n < o.acked).count() as u64;
                            buffered_lost[vi] += o.acked - kept;
                            if !prefix {
                                holes[vi] += 1;
                            }
                        }
                    }
                    kept_now.push(ns);
                }
                // Earlier lives' views were checked against their record
                // already; what they keep now replaces it (a later cut may
                // only add: delivered records stay delivered).
                if p.kept.is_none() {
                    p.kept = Some(kept_now);
                }
            }
            totals.checked_durable_again += all
                .iter()
                .filter(|p| p.life < life && matches!(p.tier, Tier::Sync | Tier::Batched))
                .map(|p| p.out.acked)
                .sum::<u64>();

            prev_positions = positions;
            totals.cuts += 1;
            totals.acked_sync += life_acked.get("sync").copied().unwrap_or(0);
            totals.acked_batched += life_acked.get("batched").copied().unwrap_or(0);
            totals.acked_buffered += life_acked.get("buffered").copied().unwrap_or(0);
            totals.restart_ms.push(restart_ms);
            totals.fs.files_reverted += report.files_reverted;
            totals.fs.bytes_dropped += report.bytes_dropped;
            totals.fs.entries_reverted += report.entries_reverted;
            totals.fs.inodes_dropped += report.inodes_dropped;
            for w in &warns {
                *totals.log_lines.entry(log_kind(w)).or_default() += 1;
            }
            let per = if f.rx.is_empty() {
                ""
            } else {
                " (main, mirror)"
            };
            say(&format!(
                "cut {cut}/{cuts}: {pushers}, kill after {kill_after} ms; acked sync {} batched {} buffered {}; \
                 buffered lost {buffered_lost:?} (producers with a hole: {holes:?}){per}; \
                 lazyfs dropped {} bytes of {} files, {} entries, {} inodes; \
                 restart {restart_ms} ms, recovered {}; delivered so far {delivered_total:?}{per}; \
                 recovery log: {} WARN/ERROR",
                life_acked.get("sync").copied().unwrap_or(0),
                life_acked.get("batched").copied().unwrap_or(0),
                life_acked.get("buffered").copied().unwrap_or(0),
                report.bytes_dropped,
                report.files_reverted,
                report.entries_reverted,
                report.inodes_dropped,
                recovered(&f.d.stdout()),
                warns.len(),
            ));
            for w in warns.iter().take(4) {
                say(&format!("    {w}"));
            }
            if !warns.is_empty() {
                say(&format!(
                    "    files after the restart:\n{}",
                    listing(f.d.data_dir())
                ));
            }
            // The worst sink's (each sink's kept set includes the files).
            let worst_lost = buffered_lost.iter().copied().max().unwrap_or(0);
            totals.buffered_lost += worst_lost;
            totals.buffered_holes += holes.iter().copied().max().unwrap_or(0);
            if worst_lost > 0 {
                totals.cuts_losing_buffered += 1;
            }
        }
        for (vi, (name, rx)) in f.rx.iter().enumerate() {
            // Everything each sink kept is delivered to it after the last restart.
            let expected: Vec<String> = all
                .iter()
                .flat_map(|p| {
                    let tag = &p.out.tag;
                    p.kept
                        .iter()
                        .flat_map(move |k| k[vi].iter())
                        .map(move |n| format!("{tag}:{n}"))
                })
                .collect();
            say(&format!(
                "  sink {name}: waiting for the {} records it kept",
                expected.len()
            ));
            rx.wait_for_payloads(&expected, Duration::from_secs(60));
            totals.delivered_at_end += expected.len() as u64;
        }
        f.d.terminate();
    }
    let mut restarts = totals.restart_ms.clone();
    restarts.sort_unstable();
    let p50 = restarts.get(restarts.len() / 2).copied().unwrap_or(0);
    let max = restarts.last().copied().unwrap_or(0);
    for (kind, n) in &totals.log_lines {
        say(&format!("  recovery logged {n}x: {kind}"));
    }
    if sink == Sink::Delivering {
        say(&format!(
            "  {} records kept through the cuts were then all delivered (summed over main and mirror)",
            totals.delivered_at_end
        ));
    }
    // Lives with every tier had an HTTP producer: its acks must be among
    // those checked, or the door went untested.
    assert!(
        totals.acked_http > 0 || totals.acked_sync == 0,
        "seed {seed:#x}: no record POSTed over the HTTP door was acknowledged"
    );
    assert!(
        totals.acked_tls > 0 || totals.acked_sync == 0,
        "seed {seed:#x}: no record pushed over TLS was acknowledged"
    );
    say(&format!(
        "{name}: {} cuts (seed {seed:#x}) in {:.1} s; acked sync {} ({} over HTTP, {} over TLS), batched {}, buffered {}; \
         {} Sync/Batched acks checked after their cut and {} again after later cuts, none lost; \
         buffered lost {} ({} cuts lost some, {} producers with a hole); \
         restart p50 {p50} ms, max {max} ms; lazyfs dropped {} bytes, {} entries",
        totals.cuts,
        wall.elapsed().as_secs_f64(),
        totals.acked_sync,
        totals.acked_http,
        totals.acked_tls,
        totals.acked_batched,
        totals.acked_buffered,
        totals.checked_durable,
        totals.checked_durable_again,
        totals.buffered_lost,
        totals.cuts_losing_buffered,
        totals.buffered_holes,
        totals.fs.bytes_dropped,
        totals.fs.entries_reverted,
    ));
}
