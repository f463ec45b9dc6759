//! `spillway plugin test PATH.so [--options FILE]`: load a plugin through
//! the real C ABI, as the daemon does, and hold it to the contract the
//! drain relies on, before any daemon runs it: it loads and refuses an
//! unknown option naming it, its limits are sane, its health check answers
//! in time, and every answer fits its batch (an empty batch, one record, a
//! batch at its limits, the same batch again), without a panic. The
//! records go where the options point: give it a scratch destination.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Health, Outcome, Record, RecordOutcome, Sink, SinkContext};
use spillway_sinks::plugin::{PluginFactory, PluginInstance};

/// A health check slower than this is worth a warning: the drain runs it
/// before every new instance takes over, and probes with it while backing
/// off.
const HEALTH_SLOW: Duration = Duration::from_secs(1);
/// A health check slower than this fails: the daemon's default
/// `sink.build_timeout_ms` refuses a start or reload past it.
const HEALTH_TOO_SLOW: Duration = Duration::from_secs(10);
/// The largest batch the test offers (a plugin's own limit if smaller).
const LARGE_BATCH_MAX: usize = 10_000;
/// An option no plugin has: a plugin must refuse it, naming it.
const UNKNOWN_OPTION: &str = "spillway_plugin_test_no_such_option";

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// The checks' lines and counts.
#[derive(Default)]
struct Report {
    text: String,
    warned: usize,
    failed: usize,
    passed: usize,
}

impl Report {
    fn line(&mut self, verdict: Verdict, check: &str, detail: &str) {
        let tag = match verdict {
            Verdict::Ok => {
                self.passed += 1;
                "ok  "
            }
            Verdict::Warn => {
                self.warned += 1;
                "WARN"
            }
            Verdict::Fail => {
                self.failed += 1;
                "FAIL"
            }
        };
        let _ = writeln!(self.text, "{tag} {check}: {detail}");
    }
}

/// Runs every check on the plugin at `path` with `options` (the
/// `[sink.options]` table as TOML text). `Ok(report)` when none failed,
/// `Err(report)` otherwise.
pub fn run(path: &Path, options: &str) -> Result<String, String> {
    let mut r = Report::default();
    check(&mut r, path, options);
    let _ = writeln!(
        r.text,
        "{} checks: {} ok, {} warnings, {} failed",
        r.passed + r.warned + r.failed,
        r.passed,
        r.warned,
        r.failed
    );
    if r.failed == 0 {
        Ok(r.text)
    } else {
        Err(r.text)
    }
}

fn check(r: &mut Report, path: &Path, options: &str) {
    let context = SinkContext::new("0123456789abcdef0123456789abcdef", "plugin-test");
    let factory = match PluginFactory::load(path, options) {
        Ok(f) => f.with_context(context.clone()),
        Err(e) => return r.line(Verdict::Fail, "load", &e.to_string()),
    };
    r.line(
        Verdict::Ok,
        "load",
        &format!(
            "{} {} from {} (its create accepted the options)",
            factory.plugin_name(),
            factory.plugin_version(),
            path.display()
        ),
    );
    declared_options(r, &factory);
    bad_option(r, path, options);
    let sink = match factory.instance_for(Some(0)) {
        Ok(s) => s,
        Err(e) => return r.line(Verdict::Fail, "create", &e.to_string()),
    };
    let (sdk, abi) = sink.built_with();
    if sink.takes_context() {
        r.line(
            Verdict::Ok,
            "identity",
            &format!("built with sink-sdk {sdk} (ABI v{abi}): told the instance id and the sink's name, so it can key on (instance, shard, seq)"),
        );
    } else {
        r.line(
            Verdict::Warn,
            "identity",
            &format!("built with sink-sdk {sdk}, before plugins were told the instance id: if it dedupes by (shard, seq), two daemons writing into one destination collide; rebuild it against this sink-sdk"),
        );
    }
    let limits = sink.limits();
    r.line(
        Verdict::Ok,
        "limits",
        &format!(
            "at most {} records and {} bytes per batch",
            limits.max_records, limits.max_bytes
        ),
    );
    let (sink_back, healthy) = health(sink);
    let Some(mut sink) = sink_back else {
        return r.line(Verdict::Fail, "health", &healthy.1);
    };
    r.line(healthy.0, "health", &healthy.1);
    let large = limits.max_records.min(LARGE_BATCH_MAX);
    let per_record = (limits.max_bytes / large.max(1)).clamp(1, 100);
    let batches: [(&str, usize, u64); 4] = [
        ("empty batch", 0, 1),
        ("one record", 1, 1),
        ("batch at its limits", large, 2),
        ("the same batch again (a redelivery)", large, 2),
    ];
    for (name, n, first_seq) in batches {
        let payloads = payloads(first_seq, n, per_record);
        let records: Vec<Record<'_>> = sink_sdk::records(0, first_seq, &payloads);
        sink = deliver(r, sink, &factory, name, &Batch::new(0, &records));
    }
    drop(sink);
}

/// Whether the plugin declares its options, so the daemon checks them
/// before `create` and shows them.
fn declared_options(r: &mut Report, factory: &PluginFactory) {
    match factory.options() {
        Some([]) => r.line(
            Verdict::Ok,
            "options",
            "declares none: the daemon refuses any [sink.options] key",
        ),
        Some(keys) => {
            let names: Vec<&str> = keys.iter().map(|k| k.short()).collect();
            r.line(
                Verdict::Ok,
                "options",
                &format!(
                    "declares {} ({}): the daemon checks [sink.options] against them before create, `spillway check` prints them",
                    keys.len(),
                    names.join(", ")
                ),
            );
        }
        None => r.line(
            Verdict::Warn,
            "options",
            "not declared: declare them once with sink_sdk::key_table! and `const OPTIONS` in PluginSink, so a bad option is refused naming it before create, `spillway check` prints them and `spillway schema --config` has them",
        ),
    }
}

/// Loading with an option no plugin has must fail, naming it.
fn bad_option(r: &mut Report, path: &Path, options: &str) {
    let bad = format!("{options}\n{UNKNOWN_OPTION} = 1\n");
    match PluginFactory::load(path, &bad) {
        Ok(_) => r.line(
            Verdict::Fail,
            "unknown option",
            &format!("`{UNKNOWN_OPTION} = 1` was accepted: a misspelt option would be ignored without a word (refuse unknown keys, e.g. serde's deny_unknown_fields)"),
        ),
        Err(e) if e.to_string().contains(UNKNOWN_OPTION) => r.line(
            Verdict::Ok,
            "unknown option",
            &format!("refused, naming it: {e}"),
        ),
        Err(e) => r.line(
            Verdict::Warn,
            "unknown option",
            &format!("refused, but the message does not name `{UNKNOWN_OPTION}`: {e}"),
        ),
    }
}

/// The instance's health check on a thread of its own, within
/// [`HEALTH_TOO_SLOW`]: the instance back (unless it hung), and what to
/// say.
fn health(mut sink: PluginInstance) -> (Option<PluginInstance>, (Verdict, String)) {
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    thread::spawn(move || {
        let h = sink.health_check();
        let _ = tx.send((h, sink));
    });
    match rx.recv_timeout(HEALTH_TOO_SLOW) {
        Err(_) => (
            None,
            (
                Verdict::Fail,
                format!("no answer within {HEALTH_TOO_SLOW:?}: the daemon would refuse a start or reload (sink.build_timeout_ms)"),
            ),
        ),
        Ok((h, sink)) => {
            let took = started.elapsed();
            let said = match (&h, took > HEALTH_SLOW) {
                (Health::Unhealthy(why), _) if why.starts_with(sink_sdk::abi::HEALTH_PANICKED) => {
                    (Verdict::Fail, format!("it panicked: {why}"))
                }
                (Health::Unhealthy(why), _) => (
                    Verdict::Warn,
                    format!("unhealthy after {took:.1?}: {why} (is the destination the options name reachable?)"),
                ),
                (Health::Healthy, true) => (
                    Verdict::Warn,
                    format!("healthy, but it took {took:.1?}: the drain probes with it once a second while backing off, so keep it cheap"),
                ),
                (Health::Healthy, false) => (Verdict::Ok, format!("healthy in {took:.1?}")),
            };
            (Some(sink), said)
        }
    }
}

/// `n` JSON payloads of about `size` bytes, numbered from `first`.
fn payloads(first: u64, n: usize, size: usize) -> Vec<Vec<u8>> {
    (0..n as u64)
        .map(|i| {
            let mut p = format!("{{\"spillway_plugin_test\":{},\"pad\":\"", first + i).into_bytes();
            while p.len() + 2 < size {
                p.push(b'x');
            }
            p.extend_from_slice(b"\"}");
            p
        })
        .collect()
}

/// `n records`, `1 record`.
fn count(n: usize) -> String {
    if n == 1 {
        "1 record".to_string()
    } else {
        format!("{n} records")
    }
}

/// Deliver `batch` and judge the answer; a failed instance is replaced.
fn deliver(
    r: &mut Report,
    mut sink: PluginInstance,
    factory: &PluginFactory,
    name: &str,
    batch: &Batch<'_>,
) -> PluginInstance {
    let n = batch.len();
    let started = Instant::now();
    let answer = sink.try_deliver(batch);
    let took = started.elapsed();
    match answer {
        Err(failure) => {
            r.line(Verdict::Fail, name, &format!("{}: {failure}", count(n)));
            // What the daemon does: a new instance.
            return match factory.instance_for(Some(0)) {
                Ok(fresh) => fresh,
                Err(_) => sink,
            };
        }
        Ok(Outcome::Committed) => {
            r.line(Verdict::Ok, name, &format!("{} committed in {took:.1?}", count(n)))
        }
        Ok(Outcome::Retry { reason, .. }) if n == 0 => r.line(
            Verdict::Warn,
            name,
            &format!("asked to retry an empty batch ({reason}); the daemon never sends one, but nothing needs doing"),
        ),
        Ok(Outcome::Retry { reason, .. }) => r.line(
            Verdict::Warn,
            name,
            &format!("{}: retry ({reason}): is the destination the options name up?", count(n)),
        ),
        Ok(Outcome::Split(v)) => {
            let rejected: Vec<&String> = v
                .iter()
                .filter_map(|o| match o {
                    RecordOutcome::Rejected(why) => Some(why),
                    _ => None,
                })
                .collect();
            let retried = v.iter().filter(|o| **o == RecordOutcome::Retry).count();
            let detail = format!(
                "{}: {} committed, {} rejected{}, {retried} to retry, in {took:.1?}",
                count(n),
                v.len() - rejected.len() - retried,
                rejected.len(),
                rejected
                    .first()
                    .map_or(String::new(), |why| format!(" (the first: {why})")),
            );
            r.line(
                if rejected.is_empty() && retried == 0 {
                    Verdict::Ok
                } else {
                    Verdict::Warn
                },
                name,
                &detail,
            );
        }
    }
    sink
}
