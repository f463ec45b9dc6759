//! Transient I/O errors from the disk (issue 7), end to end against the
//! real binary: an LD_PRELOAD shim (`testing/tests/shim/eio_shim.c`, compiled by
//! the test into its temporary folder) makes the daemon's `fdatasync` and
//! `fsync` (or its `pwritev`/`pwrite`) on files under the data folder fail
//! with EIO while a control file exists, without syncing or writing.
//!
//! What they hold the daemon to (DESIGN.md promise 1, docs/configuration.md
//! `fsync_failures_max`): while the disk fails, no push is acknowledged
//! (every one gets the retryable InternalError), `ctl health` says
//! `Unwritable` and the wire HealthCheck answers a nack; once the disk
//! works again the shard writes again by itself, without a restart, within
//! about a second; every acknowledged record reaches the sink; and a
//! segment file whose write or fdatasync failed is never written or synced
//! again (it is abandoned, not retried as if nothing happened).
//!
//! The shim needs a C compiler (`cc`): in CI (`CI=true`) a test that cannot
//! build it fails; elsewhere it prints why it skips.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::disk::tail;
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// The tests measure how fast a shard heals: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Gap between two pushes of one producer.
const PUSH_EVERY: Duration = Duration::from_millis(5);
/// How long the disk fails in the heal tests.
const EIO_WINDOW: Duration = Duration::from_secs(5);
/// A push sent this long after the control file appeared can only be
/// acknowledged by a false ack (every sync/write it needs fails).
const IN_FLIGHT_SLACK: Duration = Duration::from_millis(50);
/// Longest a shard may take to write again once the disk works (the
/// documented backoff tops out at 1 s between attempts).
const HEAL_MAX: Duration = Duration::from_millis(2500);
/// Upper bound for "every acked record was delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------- the shim

/// Compile the shim into `dir`; `None` (after printing why) when there is
/// no C compiler outside CI. In CI a missing compiler fails the test.
fn build_shim(dir: &Path, test: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("shim/eio_shim.c");
    let so = dir.join("eio_shim.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Some(so),
        // A compiler that runs and fails is a broken shim: always an error.
        Ok(o) => panic!(
            "{test}: compiling {} failed ({}):\n{}",
            src.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) if in_ci() => panic!("{test} needs a C compiler (`cc`) for its EIO shim: {e}"),
        Err(e) => {
            eprintln!("SKIPPED {test}: cannot run `cc` to build the EIO shim: {e}");
            None
        }
    }
}

/// A daemon running under the shim, with its control, log and count files.
struct EioDaemon {
    d: Daemon,
    /// While this file exists the shim fails the chosen calls.
    control: PathBuf,
    log: PathBuf,
    count: PathBuf,
}

impl EioDaemon {
    /// Configure and start a daemon (`overrides` on the test defaults) with
    /// the shim preloaded, failing `ops` under its data folder on demand.
    fn start(shim: &Path, overrides: &str, ops: &str) -> EioDaemon {
        let mut d = Daemon::configure(overrides);
        // The shim compares against what readlink(/proc/self/fd/N) says:
        // the canonical path.
        let dir = fs::canonicalize(d.dir()).expect("canonical test folder");
        let data = dir.join("data");
        assert_eq!(
            d.data_dir(),
            d.dir().join("data"),
            "the test defaults put the data folder at <tmp>/data"
        );
        let control = dir.join("eio-on");
        let log = dir.join("eio-calls.log");
        let count = dir.join("eio-count");
        let (c, l, n) = (control.clone(), log.clone(), count.clone());
        d.spawn_with(move |cmd| {
            cmd.env("LD_PRELOAD", shim)
                .env("SPILLWAY_EIO_UNDER", &data)
                .env("SPILLWAY_EIO_WHILE", &c)
                .env("SPILLWAY_EIO_OPS", ops)
                .env("SPILLWAY_EIO_LOG", &l)
                .env("SPILLWAY_EIO_COUNT", &n);
        });
        let e = EioDaemon {
            d,
            control,
            log,
            count,
        };
        // The shim really is in the daemon: it logged the start-up syncs.
        assert!(
            e.calls().iter().any(|c| c.op == "fsync" && c.ok()),
            "the EIO shim logged no fsync of the daemon's start-up (LD_PRELOAD not effective?); log {}:\n{}",
            e.log.display(),
            fs::read_to_string(&e.log).unwrap_or_default()
        );
        e
    }

    /// Make the chosen calls fail from now on; returns when the file exists.
    fn fail_on(&self) -> Instant {
        fs::write(&self.control, b"on\n").expect("creating the EIO control file");
        Instant::now()
    }

    /// Let them pass again; returns the instant just before the file went.
    fn fail_off(&self) -> Instant {
        let t = Instant::now();
        fs::remove_file(&self.control).expect("removing the EIO control file");
        t
    }

    /// Failures the shim injected so far.
    fn injected(&self) -> u64 {
        fs::read_to_string(&self.count)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Every call the shim logged so far, in order.
    fn calls(&self) -> Vec<Call> {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|l| Call::parse(l).unwrap_or_else(|| panic!("shim log line {l:?}")))
            .collect()
    }

    fn ctl(&self, args: &[&str]) -> String {
        run_ctl(self.d.config_path(), args, || tail(&self.d.stderr(), 40))
    }

    fn health_text(&self) -> String {
        run_health(self.d.config_path(), || tail(&self.d.stderr(), 40))
    }

    /// `ctl health` as (shard, state word, whole line).
    fn health(&self) -> Vec<(u32, String, String)> {
        shard_states(&self.health_text())
    }

    /// Poll `ctl health` until every shard is in `state`; how long it took.
    fn wait_all_shards(&self, state: &str, timeout: Duration) -> Duration {
        wait_all_shards_in(
            state,
            timeout,
            Duration::from_millis(50),
            || self.health_text(),
            || tail(&self.d.stderr(), 40),
        )
    }
}

/// One call the shim saw on a file under the data folder.
#[derive(Debug, Clone)]
struct Call {
    line: usize,
    op: String,
    /// `ok`, `EIO` (injected) or `err=N` (the real call failed).
    result: String,
    /// `dev:ino` of the file.
    file: String,
    path: String,
}

impl Call {
    fn parse(l: &str) -> Option<Call> {
        let mut w = l.splitn(5, ' ');
        let _ns: u64 = w.next()?.parse().ok()?;
        Some(Call {
            line: 0,
            op: w.next()?.to_string(),
            result: w.next()?.to_string(),
            file: w.next()?.to_string(),
            path: w.next()?.to_string(),
        })
    }

    fn ok(&self) -> bool {
        self.result == "ok"
    }

    fn injected(&self) -> bool {
        self.result == "EIO"
    }

    fn is_sync(&self) -> bool {
        self.op == "fdatasync" || self.op == "fsync"
    }

    /// The segment (shard folder, id) if this is a segment file
    /// (`<16 hex>.open`, `.open.tmp` while preallocated, `.sealed` once
    /// sealed). Ids are per shard.
    fn segment(&self) -> Option<(String, u64)> {
        let path = self.path.strip_suffix(" (deleted)").unwrap_or(&self.path);
        let (dir, name) = path.rsplit_once('/')?;
        let (id, rest) = name.split_once('.')?;
        if id.len() != 16 || !matches!(rest, "open" | "open.tmp" | "sealed") {
            return None;
        }
        Some((dir.to_string(), u64::from_str_radix(id, 16).ok()?))
    }
}

/// The shim's log, numbered, for assertions that quote it.
fn numbered(calls: &[Call]) -> Vec<Call> {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| Call {
            line: i + 1,
            ..c.clone()
        })
        .collect()
}

/// Promise 1's "never retries that fsync as if nothing happened": after a
/// write or sync of a segment file failed, that file (same inode, same
/// segment id) is never successfully written or synced again in this run.
/// Returns (segment files that failed, calls on them that failed).
fn assert_failed_segments_abandoned(e: &EioDaemon, context: &str) -> (usize, usize) {
    let calls = numbered(&e.calls());
    let mut failed_at: BTreeMap<(String, (String, u64)), Call> = BTreeMap::new();
    let mut failed_calls = 0;
    let mut violations = Vec::new();
    for c in &calls {
        let Some(seg) = c.segment() else { continue };
        let key = (c.file.clone(), seg.clone());
        if !c.ok() {
            failed_calls += 1;
            failed_at.entry(key).or_insert_with(|| c.clone());
        } else if let Some(first) = failed_at.get(&key) {
            let history: Vec<String> = calls
                .iter()
                .filter(|o| {
                    o.file == c.file && o.segment().as_ref() == Some(&seg) && o.line <= c.line
                })
                .map(|o| format!("    line {}: {} {} {}", o.line, o.op, o.result, o.path))
                .collect();
            violations.push(format!(
                "line {}: {} {} succeeded on {} after line {}: {} {} on it; its calls:\n{}",
                c.line,
                c.op,
                c.result,
                c.path,
                first.line,
                first.op,
                first.result,
                history.join("\n")
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "{context}: a segment file was written or synced again after a failed write/fsync (it must be abandoned):\n{}\ndaemon log (tail):\n{}",
        violations.join("\n"),
        tail(&e.d.stderr(), 40)
    );
    // Informational: other files (checkpoint, directories) may be retried;
    // they are rewritten whole each time, not a buffer of acked records.
    let mut other_failed: HashSet<&str> = HashSet::new();
    let mut other_retried: BTreeSet<&str> = BTreeSet::new();
    for c in &calls {
        if c.segment().is_some() {
            continue;
        }
        if !c.ok() {
            other_failed.insert(&c.file);
        } else if other_failed.contains(c.file.as_str()) {
            other_retried.insert(&c.path);
        }
    }
    if !other_retried.is_empty() {
        eprintln!("{context}: non-segment files synced/written again after a failure (allowed): {other_retried:?}");
    }
    (failed_at.len(), failed_calls)
}

// ---------------------------------------------------------------- producers

/// What one push got.
#[derive(Debug, Clone)]
struct Attempt {
    payload: String,
    sent: Instant,
    answered: Instant,
    /// `None` = acked, else the nack.
    nack: Option<NackReason>,
}

impl Attempt {
    fn acked(&self) -> bool {
        self.nack.is_none()
    }
}

/// One Sync producer on its own connection, a push every [`PUSH_EVERY`],
/// a new payload `"{tag}:{n}"` per attempt; every answer is recorded. A
/// retryable nack keeps the connection; anything else fails the test.
struct Producer {
    tag: String,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    handle: Option<thread::JoinHandle<()>>,
}

fn start_producers(d: &Daemon, n: usize, stop: &Arc<AtomicBool>) -> Vec<Producer> {
    (0..n)
        .map(|i| {
            let tag = format!("p{i}");
            let attempts = Arc::new(Mutex::new(Vec::new()));
            let mut client = d.client();
            let (t, a, s) = (tag.clone(), attempts.clone(), stop.clone());
            let handle = thread::Builder::new()
                .name(tag.clone())
                .spawn(move || {
                    let mut n = 0u64;
                    let mut next = Instant::now();
                    while !s.load(Ordering::Relaxed) {
                        let payload = format!("{t}:{n}");
                        n += 1;
                        let sent = Instant::now();
                        let nack = match client.push(Tier::Sync, payload.as_bytes()) {
                            Ok(()) => None,
                            Err(e) if e.is_retryable() => e.nack_reason(),
                            Err(e) => panic!("{t}: push {payload} failed with `{e}` (only acks and retryable nacks are acceptable)"),
                        };
                        a.lock().unwrap().push(Attempt {
                            payload,
                            sent,
                            answered: Instant::now(),
                            nack,
                        });
                        next += PUSH_EVERY;
                        let now = Instant::now();
                        if next > now {
                            thread::sleep(next - now);
                        } else {
                            next = now;
                        }
                    }
                })
                .unwrap();
            Producer {
                tag,
                attempts,
                handle: Some(handle),
            }
        })
        .collect()
}

impl Producer {
    fn snapshot(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    /// Wait until this producer has an ack for a push sent at or after
    /// `since`; returns that attempt.
    fn wait_ack_after(&self, since: Instant, timeout: Duration, e: &EioDaemon) -> Attempt {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(a) = self
                .snapshot()
                .into_iter()
                .find(|a| a.sent >= since && a.acked())
            {
                return a;
            }
            if Instant::now() >= deadline {
                let recent: Vec<String> = self
                    .snapshot()
                    .iter()
                    .rev()
                    .take(5)
                    .map(|a| format!("{} -> {:?}", a.payload, a.nack))
                    .collect();
                panic!(
                    "{}: no push sent after the disk recovered was acked within {timeout:?} (the shard must heal by itself); last answers: {recent:?}\nctl health:\n{}\ndaemon log (tail):\n{}",
                    self.tag,
                    e.health_text(),
                    tail(&e.d.stderr(), 40)
                );
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    fn join(&mut self) -> Vec<Attempt> {
        if let Some(h) = self.handle.take() {
            h.join()
                .unwrap_or_else(|_| panic!("producer {} panicked", self.tag));
        }
        self.snapshot()
    }
}

fn stop_producers(ps: &mut [Producer], stop: &AtomicBool) -> Vec<Vec<Attempt>> {
    stop.store(true, Ordering::Relaxed);
    ps.iter_mut().map(Producer::join).collect()
}

/// Raw HealthChecks on `n` fresh connections (one per shard: connections
/// are spread round-robin); each must get a Nack.
fn assert_health_nacked(e: &EioDaemon, n: usize, context: &str) {
    for i in 0..n {
        let mut raw = e.d.raw();
        raw.send(&health_frame());
        match raw.read_response() {
            Response::Nack(reason) => assert_eq!(
                reason,
                NackReason::InternalError,
                "{context}: HealthCheck #{i} nack reason"
            ),
            other => panic!(
                "{context}: HealthCheck #{i} on a failing disk got {other:?}, expected a Nack; ctl health:\n{}",
                e.health_text()
            ),
        }
    }
}

fn http_sink(rx: &HttpReceiver) -> String {
    format!(
        "[sink]\ntype = \"http\"\nurl = \"{}\"\ndelivery = \"batched\"\nlinger_ms = 20\nretry_initial_ms = 50\nretry_max_ms = 500\n",
        rx.url()
    )
}

// ---------------------------------------------------------------- scenario

/// The heal scenario for the calls in `ops`: steady producers on every
/// shard, the disk fails for [`EIO_WINDOW`], then works again. `counter`
/// is the `ctl stats` per-shard counter that must have counted failures.
fn transient_eio_heals(test: &str, ops: &str, counter: &str) {
    let _serial = serial();
    let tmp = tempfile::Builder::new().prefix("sweio").tempdir().unwrap();
    let Some(shim) = build_shim(tmp.path(), test) else {
        return;
    };
    let rx = HttpReceiver::start();
    let mut e = EioDaemon::start(&shim, &http_sink(&rx), ops);
    let shards = e.health().len();
    assert_eq!(shards, 2, "the test defaults run 2 shards");
    let pid = e.d.pid();

    let stop = Arc::new(AtomicBool::new(false));
    // One producer per shard, so every shard meets the failing disk.
    let mut ps = start_producers(&e.d, shards, &stop);
    let warm = Instant::now();
    for p in &ps {
        p.wait_ack_after(warm, Duration::from_secs(10), &e);
    }
    thread::sleep(Duration::from_millis(300));

    // ---- the disk fails
    let on = e.fail_on();
    let settled = e.wait_all_shards("Unwritable", Duration::from_secs(3));
    eprintln!("{test}: every shard Unwritable {settled:?} after the disk started failing");
    for (n, _, line) in e.health() {
        assert!(
            line.to_ascii_lowercase().contains("internal"),
            "{test}: shard {n} is Unwritable but does not say its pushes get InternalError: {line:?}"
        );
    }
    assert_health_nacked(&e, shards, test);
    assert!(e.injected() > 0, "{test}: the shim injected no failure");
    let left = EIO_WINDOW.saturating_sub(on.elapsed());
    thread::sleep(left);
    // Still refusing at the end of the window (no silent recovery onto a
    // failing disk).
    e.wait_all_shards("Unwritable", Duration::from_secs(1));

    // ---- the disk works again
    let off = e.fail_off();
    let mut heal = Vec::new();
    for p in &ps {
        let a = p.wait_ack_after(off, HEAL_MAX + Duration::from_secs(3), &e);
        heal.push((p.tag.clone(), a.answered.duration_since(off)));
    }
    let running = e.wait_all_shards("Running", Duration::from_secs(3));
    eprintln!(
        "{test}: disk failed for {:?}; time from removing the control file to the first new ack: {}; ctl health Running {running:?} after",
        off.duration_since(on),
        heal.iter()
            .map(|(t, d)| format!("{t} {d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    thread::sleep(Duration::from_secs(1));
    let attempts = stop_producers(&mut ps, &stop);

    // ---- what each push got
    let mut acked: Vec<String> = Vec::new();
    let mut nacked: HashSet<String> = HashSet::new();
    for (p, atts) in ps.iter().zip(&attempts) {
        let first_healed = atts
            .iter()
            .find(|a| a.sent >= off && a.acked())
            .map(|a| a.sent)
            .expect("a healed ack (waited for above)");
        let mut in_window = 0;
        for a in atts {
            let what = || {
                format!(
                    "{test}: {} (sent {:?} after the disk started failing, answered {:?} later) got {:?}",
                    a.payload,
                    a.sent.saturating_duration_since(on),
                    a.answered.duration_since(a.sent),
                    a.nack
                )
            };
            if let Some(reason) = a.nack {
                assert_eq!(
                    reason,
                    NackReason::InternalError,
                    "{}: a failing disk must give the retryable InternalError",
                    what()
                );
                assert!(
                    a.sent + IN_FLIGHT_SLACK >= on,
                    "{}: nacked before the disk failed",
                    what()
                );
                assert!(
                    a.sent < first_healed,
                    "{}: nacked after the shard had healed",
                    what()
                );
                nacked.insert(a.payload.clone());
            } else {
                assert!(
                    !(a.sent >= on + IN_FLIGHT_SLACK && a.sent < off),
                    "{}: FALSE ACK: acknowledged a push sent while every {ops} under the data folder failed",
                    what()
                );
                acked.push(a.payload.clone());
            }
            if a.sent >= on && a.sent < off {
                in_window += 1;
            }
        }
        assert!(
            in_window > 100,
            "{test}: {} sent only {in_window} pushes while the disk failed",
            p.tag
        );
    }
    eprintln!(
        "{test}: {} pushes acked, {} nacked (InternalError)",
        acked.len(),
        nacked.len()
    );
    assert!(!nacked.is_empty(), "{test}: no push was refused");

    // ---- every acked record is delivered (and nothing never pushed)
    let recs = rx.wait_for_payloads(&acked, DELIVERY_TIMEOUT);
    let delivered: HashSet<String> = recs.iter().map(|r| r.text()).collect();
    let acked_set: HashSet<String> = acked.iter().cloned().collect();
    let invented: Vec<&String> = delivered
        .iter()
        .filter(|p| !acked_set.contains(*p) && !nacked.contains(*p))
        .collect();
    assert!(
        invented.is_empty(),
        "{test}: delivered records nobody pushed: {invented:?}"
    );
    let nacked_delivered: BTreeSet<&String> = delivered.difference(&acked_set).collect();

    // ---- counters, no restart
    let stats = e.ctl(&["stats", "--flat"]);
    let failures = shard_stat_sum(&stats, counter);
    let restarts = shard_stat_sum(&stats, "restarts");
    eprintln!(
        "{test}: ctl stats {counter} {failures}, shard restarts {restarts}; the shim injected {} failures",
        e.injected()
    );
    assert!(
        failures > 0,
        "{test}: ctl stats shows no {counter}:\n{stats}"
    );
    assert_eq!(
        restarts, 0,
        "{test}: a shard was restarted; it must heal by itself:\n{stats}"
    );
    assert!(e.d.is_running(), "{test}: the daemon died");
    assert_eq!(e.d.pid(), pid, "{test}: the daemon was restarted");

    e.d.terminate();
    let (segments, calls) = assert_failed_segments_abandoned(&e, test);
    eprintln!("{test}: {calls} failed calls on {segments} segment files, none of them written or synced again");
    assert!(segments > 0, "{test}: no segment file met a failure");

    // Last, so everything above is checked first: the drain reads only
    // durable records (actors/src/drain.rs), so a record whose write or
    // fdatasync failed (and was nacked) is not delivered in this run. (A
    // restart may deliver it: recovery keeps what passes its CRC.)
    assert!(
        nacked_delivered.is_empty(),
        "{test}: delivered {} records that were NACKED (InternalError) because the {ops} covering them failed: {:?}; the drain read past the durable offset of an abandoned segment (the producer, told to retry, gets them twice)",
        nacked_delivered.len(),
        nacked_delivered.iter().take(10).collect::<Vec<_>>()
    );
    assert_eq!(delivered, acked_set, "{test}: delivered set");
}

// ---------------------------------------------------------------- tests

#[test]
fn transient_fsync_eio_heals_without_a_restart() {
    transient_eio_heals(
        "transient_fsync_eio_heals_without_a_restart",
        "fdatasync,fsync",
        "fsync_failures",
    );
}

#[test]
fn transient_write_eio_heals_without_a_restart() {
    transient_eio_heals(
        "transient_write_eio_heals_without_a_restart",
        "pwritev,pwrite",
        "write_failures",
    );
}

#[test]
fn a_failed_fsync_is_never_retried_as_if_nothing_happened() {
    let test = "a_failed_fsync_is_never_retried_as_if_nothing_happened";
    let _serial = serial();
    let tmp = tempfile::Builder::new().prefix("sweio").tempdir().unwrap();
    let Some(shim) = build_shim(tmp.path(), test) else {
        return;
    };
    // The held sink: nothing is confirmed, so no segment is deleted and the
    // shim's log names every segment file that ever existed.
    let mut e = EioDaemon::start(&shim, "", "fdatasync,fsync");
    let shards = e.health().len();
    let stop = Arc::new(AtomicBool::new(false));
    let mut ps = start_producers(&e.d, shards, &stop);
    let warm = Instant::now();
    for p in &ps {
        p.wait_ack_after(warm, Duration::from_secs(10), &e);
    }
    // Short failures, each followed by a recovery: a fresh segment each
    // time, and each failed one must stay abandoned.
    let windows = 4;
    for w in 0..windows {
        let on = e.fail_on();
        thread::sleep(Duration::from_millis(150 + 100 * w));
        let off = e.fail_off();
        for p in &ps {
            p.wait_ack_after(off, HEAL_MAX + Duration::from_secs(3), &e);
        }
        eprintln!(
            "{test}: window {w}: failing for {:?}, writing again {:?} after",
            off.duration_since(on),
            off.elapsed()
        );
        thread::sleep(Duration::from_millis(200));
    }
    let attempts = stop_producers(&mut ps, &stop);
    for atts in &attempts {
        for a in atts {
            if let Some(reason) = a.nack {
                assert_eq!(reason, NackReason::InternalError, "{test}: {}", a.payload);
            }
        }
    }
    // A clean stop seals the active segment: its syncs count too.
    e.d.terminate();

    let calls = numbered(&e.calls());
    let data_syncs_failed: BTreeSet<(String, u64)> = calls
        .iter()
        .filter(|c| c.op == "fdatasync" && c.injected())
        .filter_map(Call::segment)
        .collect();
    assert!(
        !data_syncs_failed.is_empty(),
        "{test}: no fdatasync of a segment failed; shim log:\n{}",
        tail(&fs::read_to_string(&e.log).unwrap_or_default(), 40)
    );
    let (segments, failed) = assert_failed_segments_abandoned(&e, test);
    let later_ok = calls
        .iter()
        .filter(|c| c.is_sync() && c.ok())
        .filter(|c| c.segment().is_some_and(|s| !data_syncs_failed.contains(&s)))
        .count();
    eprintln!(
        "{test}: fdatasync failed on {} segments; {failed} failed calls on {segments} segment files, none written or synced again; {later_ok} successful syncs on other segments",
        data_syncs_failed.len()
    );
    assert!(
        later_ok > 0,
        "{test}: no segment was synced successfully at all"
    );
}
