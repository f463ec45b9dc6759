//! Sink plugins end to end: the real `spillway` binary loads the real
//! example plugins (`libspillway_plugin_file.so`,
//! `libspillway_plugin_postgres.so`, built by cargo) and small C plugins
//! compiled here, delivers through them, refuses the broken ones at start,
//! survives a panicking plugin. The SQL plugins against real servers are
//! in `sql_sinks.rs`.
//!
//! Timing is only ever bounded from above by generous liveness timeouts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::thread;
use std::time::Duration;

use spillway_tests::plugins::*;
use spillway_tests::*;

/// Upper bound for "eventually delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- 1. file plugin end to end

/// Records each connection pushes in the file-sink comparison.
const PER_CONNECTION: usize = 250;
const CONNECTIONS: usize = 4;

/// Payload `c{conn}:{n:04}:{tail}`, the tail varying in shape: JSON with
/// escapes and non-ASCII text, bytes that are not UTF-8 (but no newline),
/// long runs, almost nothing.
fn payload(conn: usize, n: usize) -> Vec<u8> {
    let mut p = format!("c{conn}:{n:04}:").into_bytes();
    match n % 7 {
        0 => p.extend_from_slice(format!("{{\"conn\":{conn},\"n\":{n},\"text\":\"h\u{e9}llo \\\"w\u{f6}rld\\\" \\\\ \u{2713}\"}}").as_bytes()),
        1 => p.extend_from_slice(&[0xff, 0x00, 0x01, 0x7f, 0x80, b'\r', b'\t', 0xc3]),
        2 => p.resize(p.len() + 1500 + n, b'x'),
        3 => {}
        4 => p.extend_from_slice(b" spaces  and\ttabs "),
        5 => p.extend_from_slice("\u{65e5}\u{672c}\u{8a9e}\u{306e}\u{30c6}\u{30ad}\u{30b9}\u{30c8}".as_bytes()),
        _ => p.extend_from_slice(format!("[{n},{}]", n * 31).as_bytes()),
    }
    p
}

/// (connection, n) of a payload made by [`payload`].
fn parse_payload(p: &[u8]) -> Option<(usize, usize)> {
    let rest = p.strip_prefix(b"c")?;
    let colon = rest.iter().position(|b| *b == b':')?;
    let conn = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    let rest = &rest[colon + 1..];
    let colon = rest.iter().position(|b| *b == b':')?;
    let n = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    Some((conn, n))
}

/// Pushes [`CONNECTIONS`] × [`PER_CONNECTION`] records over four
/// connections at once, each its own way: single Sync pushes, PushBatch of
/// 25 (Sync), a pipeline of 16 (Batched), PushBatch of 50 (Buffered).
/// Every record must be acked. Returns every payload.
fn push_workload(d: &Daemon) -> Vec<Vec<u8>> {
    let handles: Vec<_> = (0..CONNECTIONS)
        .map(|conn| {
            let mut c = d.client();
            thread::spawn(move || {
                let recs: Vec<Vec<u8>> = (0..PER_CONNECTION).map(|n| payload(conn, n)).collect();
                match conn {
                    0 => {
                        for r in &recs {
                            c.push(Tier::Sync, r)
                                .unwrap_or_else(|e| panic!("conn 0 push: {e}"));
                        }
                    }
                    1 | 3 => {
                        let (size, tier) = if conn == 1 {
                            (25, Tier::Sync)
                        } else {
                            (50, Tier::Buffered)
                        };
                        for chunk in recs.chunks(size) {
                            let n = c
                                .push_batch(tier, chunk)
                                .unwrap_or_else(|e| panic!("conn {conn} push_batch: {e}"));
                            assert_eq!(n as usize, chunk.len());
                        }
                    }
                    _ => {
                        let mut p = c.pipeline(16);
                        let mut acked = 0;
                        for r in &recs {
                            p.push(Tier::Batched, r)
                                .unwrap_or_else(|e| panic!("conn 2 pipelined push: {e}"));
                        }
                        p.flush().unwrap();
                        while p.outstanding() > 0 {
                            match p.recv() {
                                Ok(Reply::Ack) => acked += 1,
                                other => panic!("conn 2: unexpected answer {other:?}"),
                            }
                        }
                        assert_eq!(acked, recs.len());
                    }
                }
                recs
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("a producer thread panicked"))
        .collect()
}

/// Waits until `path` holds at least `n` complete lines, then a little
/// longer (to catch surplus copies); returns the lines.
fn wait_lines(d: &Daemon, path: &Path, n: usize) -> Vec<Vec<u8>> {
    let ok = wait_until(DELIVERY_TIMEOUT, || ndjson_lines(path).len() >= n);
    let lines = ndjson_lines(path);
    assert!(
        ok,
        "{} holds {} complete lines after {DELIVERY_TIMEOUT:?}, expected {n}; ctl stats:\n{}\ndaemon log:\n{}",
        path.display(),
        lines.len(),
        stats(d),
        d.stderr()
    );
    thread::sleep(Duration::from_millis(300));
    ndjson_lines(path)
}

/// Each expected payload exactly once, nothing else, and each connection's
/// records in push order.
fn check_file_output(lines: &[Vec<u8>], expected: &[Vec<u8>], what: &str) {
    let expected_set: HashSet<&[u8]> = expected.iter().map(Vec::as_slice).collect();
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for l in lines {
        assert!(
            expected_set.contains(l.as_slice()),
            "{what}: a line that was never pushed: {:?}",
            String::from_utf8_lossy(l)
        );
        *counts.entry(l.as_slice()).or_default() += 1;
    }
    let missing: Vec<String> = expected
        .iter()
        .filter(|p| !counts.contains_key(p.as_slice()))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: payloads never written (first few): {missing:?}"
    );
    let twice: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(p, n)| format!("{} x{n}", String::from_utf8_lossy(p)))
        .take(5)
        .collect();
    assert!(
        twice.is_empty(),
        "{what}: payloads written more than once without any failure: {twice:?}"
    );
    let mut order: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for l in lines {
        let (conn, n) = parse_payload(l)
            .unwrap_or_else(|| panic!("{what}: unparsable line {:?}", String::from_utf8_lossy(l)));
        order.entry(conn).or_default().push(n);
    }
    for (conn, ns) in &order {
        assert_eq!(
            *ns,
            (0..PER_CONNECTION).collect::<Vec<_>>(),
            "{what}: connection {conn}'s records are not in push order"
        );
    }
}

#[test]
fn file_plugin_delivers_every_record_in_order_byte_for_byte_like_the_builtin_file_sink() {
    let out = tempfile::tempdir().unwrap();
    let plugin_out = out.path().join("plugin/out.ndjson");
    let builtin_out = out.path().join("builtin/out.ndjson");
    let total = CONNECTIONS * PER_CONNECTION;

    // Through the plugin.
    let mut d = Daemon::start(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\nbatch_records_max = 64\nlinger_ms = 5\n[sink.options]\npath = {}\nfsync = true\n",
        toml_str(file_plugin().display().to_string()),
        toml_str(plugin_out.display().to_string())
    ));
    assert!(
        d.stdout().contains("sink: plugin spillway-plugin-file"),
        "start-up line: {}",
        d.stdout()
    );
    let expected = push_workload(&d);
    assert_eq!(expected.len(), total);
    let plugin_lines = wait_lines(&d, &plugin_out, total);
    check_file_output(&plugin_lines, &expected, "file plugin");
    let s = stats(&d);
    assert_eq!(
        shard_stat_sum(&s, "delivered_records"),
        total as u64,
        "ctl stats:\n{s}"
    );
    assert_eq!(shard_stat_sum(&s, "dead_lettered"), 0, "ctl stats:\n{s}");
    assert!(
        d.stderr().contains("spillway-plugin-file"),
        "the log names the plugin:\n{}",
        d.stderr()
    );
    d.terminate();

    // The same records through the built-in file sink.
    let mut b = Daemon::start(&format!(
        "[sink]\ntype = \"file\"\npath = {}\nformat = \"ndjson\"\nbatch_records_max = 64\nlinger_ms = 5\n",
        toml_str(builtin_out.display().to_string())
    ));
    let again = push_workload(&b);
    assert_eq!(again, expected);
    let builtin_lines = wait_lines(&b, &builtin_out, total);
    check_file_output(&builtin_lines, &expected, "built-in file sink");
    b.terminate();

    // Byte for byte the same lines (batches of the two shards interleave
    // differently, so compare sorted).
    let plugin_bytes = std::fs::read(&plugin_out).unwrap();
    let builtin_bytes = std::fs::read(&builtin_out).unwrap();
    assert!(plugin_bytes.ends_with(b"\n") && builtin_bytes.ends_with(b"\n"));
    assert_eq!(
        plugin_bytes.len(),
        builtin_bytes.len(),
        "the two files differ in length"
    );
    let mut p = plugin_lines;
    let mut q = builtin_lines;
    p.sort();
    q.sort();
    assert!(
        p == q,
        "the plugin's lines differ from the built-in file sink's"
    );
}

// ---------------------------------------------------------------- 2. refused at start

#[test]
fn a_plugin_built_for_another_abi_is_refused_at_start_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    // Only the part every ABI version shares: abi_version, sdk_version.
    let source = r#"
        #include <stdint.h>
        typedef struct { uint32_t abi_version; const char *sdk_version; } header;
        static const header VTABLE = { 999, "9.9.9" };
        const header *spillway_sink_plugin_v1(void) { return &VTABLE; }
    "#;
    let so = compile_c(dir.path(), "libabi999", source);
    let d = Daemon::configure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n",
        toml_str(so.display().to_string())
    ));
    let f = d.run_to_exit(Duration::from_secs(30));
    assert!(
        !f.status.success(),
        "a daemon with an ABI v999 plugin must refuse to start; stderr:\n{}",
        f.stderr
    );
    for needle in [
        "ABI v999",
        "ABI v1 ",
        "sink-sdk 9.9.9",
        &so.display().to_string(),
    ] {
        assert!(
            f.stderr.contains(needle),
            "stderr should contain {needle:?}:\n{}",
            f.stderr
        );
    }
    assert!(
        !f.stdout.contains("spillway listening on"),
        "it must not have started: {}",
        f.stdout
    );
}

#[test]
fn a_missing_plugin_file_is_refused_at_start_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere").join("libnot_there.so");
    let d = Daemon::configure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n",
        toml_str(missing.display().to_string())
    ));
    let f = d.run_to_exit(Duration::from_secs(30));
    assert!(
        !f.status.success(),
        "a daemon with a missing plugin must refuse to start; stderr:\n{}",
        f.stderr
    );
    assert!(
        f.stderr.contains(&missing.display().to_string()),
        "stderr should name {}:\n{}",
        missing.display(),
        f.stderr
    );
    assert!(
        !f.stdout.contains("spillway listening on"),
        "it must not have started: {}",
        f.stdout
    );
}

// ---------------------------------------------------------------- 3. panicking plugin

#[test]
fn a_panicking_plugin_is_restarted_and_every_record_is_delivered() {
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("out.ndjson");
    let mut d = Daemon::start(&file_plugin_sink(
        &file,
        "batch_records_max = 20\nlinger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 200",
        "panic_on_batch = 3",
    ));
    let expected: Vec<String> = {
        let handles: Vec<_> = (0..3)
            .map(|t| {
                let mut c = d.client();
                thread::spawn(move || {
                    (0..100)
                        .map(|i| {
                            let p = format!("panicky{t}:{i}");
                            c.push(Tier::Sync, p.as_bytes())
                                .unwrap_or_else(|e| panic!("push {p}: {e}"));
                            p
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    };
    assert_eq!(expected.len(), 300);
    let have = || -> HashSet<String> {
        ndjson_lines(&file)
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
            .collect()
    };
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        expected.iter().all(|p| have().contains(p))
    });
    let got = have();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|p| !got.contains(*p))
        .take(10)
        .collect();
    assert!(
        ok,
        "records never delivered (first few): {missing:?}; ctl stats:\n{}\nlog:\n{}",
        stats(&d),
        d.stderr()
    );

    // The panic was caught, named the plugin, and the instance was re-created.
    let log = d.stderr();
    assert!(
        log.contains("panic_on_batch = 3"),
        "the log shows the plugin's panic message:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("spillway-plugin-file") && l.contains("panicked")),
        "a log line names the plugin and says it panicked:\n{log}"
    );
    assert!(
        log.contains("it will be re-created"),
        "the log says the instance is re-created:\n{log}"
    );
    // Once: one line per panic, through the daemon's log (no raw text
    // from the plugin's hook or the host's re-raise), saying where in the
    // plugin it panicked and which shard.
    let panic_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("panic_on_batch = 3"))
        .collect();
    let restarts = shard_stat_sum(&stats(&d), "sink_restarts") as usize;
    assert_eq!(
        panic_lines.len(),
        restarts,
        "one log line per panic:\n{log}"
    );
    assert!(
        panic_lines
            .iter()
            .all(|l| l.contains("plugins/file/src/sink.rs:") && l.contains("shard=")),
        "each names the plugin's source line and the shard:\n{panic_lines:#?}"
    );
    let s = stats(&d);
    assert!(
        shard_stat_sum(&s, "sink_restarts") >= 1,
        "ctl stats shows sink restarts:\n{s}"
    );
    assert_eq!(
        shard_stat_sum(&s, "dead_lettered"),
        0,
        "nothing dead-lettered:\n{s}"
    );

    // Still running and serving.
    assert!(d.is_running(), "the daemon died; log:\n{log}");
    let mut c = d.client();
    c.health().unwrap();
    let after: Vec<String> = (0..30).map(|i| format!("after-panics:{i}")).collect();
    for p in &after {
        c.push(Tier::Sync, p.as_bytes()).unwrap();
    }
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        after.iter().all(|p| have().contains(p))
    });
    assert!(
        ok,
        "records pushed after the panics were not delivered; log:\n{}",
        d.stderr()
    );
    assert!(d.is_running());
    d.terminate();
}

/// The must-show of poison isolation through the real C ABI: the file
/// plugin panics on (or keeps asking to retry) every batch holding one
/// record of 1,000. The 999 others reach the file, the one record alone is
/// dead-lettered with the reason, with the default backoff.
#[test]
fn a_plugin_poison_record_is_isolated_and_dead_lettered_alone() {
    for (option, delivery, reason) in [
        ("panic_on_payload = \"poison\"", "", "panicked: "),
        (
            "retry_on_payload = \"poison\"",
            "retry_duration_max_ms = 3000",
            "retried for 3 s: ",
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let file = out.path().join("out.ndjson");
        let d = Daemon::start(&format!(
            "[server]\nshards = 1\n{}",
            file_plugin_sink(
                &file,
                &format!("batch_records_max = 1000\n{delivery}"),
                option
            )
        ));
        d.ctl(&["sink", "pause", "default"]);
        let payloads: Vec<Vec<u8>> = (0..1000)
            .map(|i| {
                if i == 555 {
                    b"poison".to_vec()
                } else {
                    format!("ok:{i}").into_bytes()
                }
            })
            .collect();
        d.client().push_batch(Tier::Sync, &payloads).unwrap();
        let started = std::time::Instant::now();
        d.ctl(&["sink", "resume", "default"]);
        let dead = wait_until(DELIVERY_TIMEOUT, || {
            shard_stat_sum(&stats(&d), "dead_lettered") == 1 && ndjson_lines(&file).len() >= 999
        });
        let took = started.elapsed();
        let s = stats(&d);
        assert!(dead, "{option}: not isolated:\n{s}\n{}", d.stderr());
        let lines: HashSet<Vec<u8>> = ndjson_lines(&file).into_iter().collect();
        let good: HashSet<Vec<u8>> = payloads
            .iter()
            .filter(|p| &p[..] != b"poison")
            .cloned()
            .collect();
        assert_eq!(
            lines, good,
            "{option}: the 999 good records, the poison one not"
        );
        assert_eq!(shard_stat_sum(&s, "poison_records"), 1, "{s}");
        let list = d.ctl(&["dead-letter", "list", "--json"]);
        let row = list
            .split("},")
            .find(|l| l.contains("\"seq\":555"))
            .unwrap_or_else(|| panic!("{option}: no dead letter 0:555:\n{list}"));
        assert!(row.contains(reason), "{option}: {row}");
        if option.starts_with("panic") {
            assert!(
                row.contains("panic_on_payload: panicking on the batch holding seq 555"),
                "{row}"
            );
        }
        eprintln!("{option}: the poison record dead-lettered {took:?} after delivery started");
    }
}
