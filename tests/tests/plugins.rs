//! Sink plugins end to end: the real `spillway` binary loads the real
//! example plugins (`libspillway_plugin_file.so`,
//! `libspillway_plugin_postgres.so`, built by cargo) and small C plugins
//! compiled here, delivers through them, refuses the broken ones at start,
//! survives a panicking plugin, and, through SIGKILLs, writes every acked
//! record exactly once into a real PostgreSQL table.
//!
//! Timing is only ever bounded from above by generous liveness timeouts.

mod support_plugins;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::*;
use support_plugins::*;

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
        "[sink]\ntype = \"plugin\"\npath = {}\nmax_records = 64\nlinger_ms = 5\n[sink.options]\npath = {}\nfsync = true\n",
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
        "[sink]\ntype = \"file\"\npath = {}\nformat = \"ndjson\"\nmax_records = 64\nlinger_ms = 5\n",
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
        "max_records = 20\nlinger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 200",
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

// ---------------------------------------------------------------- 4. PostgreSQL through SIGKILLs

/// A producer pushing `"{tag}:{n}"` at Sync until told to stop or the
/// connection fails; returns the payloads that were acked.
fn spawn_pg_producer(
    d: &Daemon,
    tag: String,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(Vec<String>, Option<String>)> {
    let mut c = d.client();
    thread::spawn(move || {
        let mut acked = Vec::new();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let p = format!("{tag}:{n}");
            n += 1;
            match c.push(Tier::Sync, p.as_bytes()) {
                Ok(()) => acked.push(p),
                Err(e) => return (acked, Some(e.to_string())),
            }
            // A steady stream, not a flood: keeps the table small.
            thread::sleep(Duration::from_micros(300));
        }
        (acked, None)
    })
}

fn row_count(conninfo: &str, table: &str) -> Option<u64> {
    psql(conninfo, &format!("SELECT count(*) FROM {table}"))
        .ok()?
        .first()?
        .trim()
        .parse()
        .ok()
}

/// Every payload in the table, with its identity.
fn table_rows(conninfo: &str, table: &str) -> Vec<(i64, i64, String)> {
    psql(
        conninfo,
        &format!(
            "SELECT shard, seq, convert_from(payload, 'UTF8') FROM {table} ORDER BY shard, seq"
        ),
    )
    .unwrap_or_else(|e| panic!("reading {table}: {e}"))
    .iter()
    .map(|l| {
        let mut f = l.splitn(3, '|');
        let shard = f
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("bad row {l:?}"));
        let seq = f
            .next()
            .unwrap_or("")
            .parse()
            .unwrap_or_else(|_| panic!("bad row {l:?}"));
        (
            shard,
            seq,
            f.next()
                .unwrap_or_else(|| panic!("bad row {l:?}"))
                .to_string(),
        )
    })
    .collect()
}

#[test]
fn postgres_plugin_through_two_sigkills_writes_every_acked_record_exactly_once() {
    let Some(conninfo) = pg_server() else { return };
    let so = postgres_plugin();
    let table = format!("spillway_e2e_{}_sigkill", std::process::id());
    psql(&conninfo, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
    let config = format!(
        "[sink]\ntype = \"plugin\"\npath = {}\nmax_records = 50\nlinger_ms = 2\nretry_initial_ms = 50\nretry_max_ms = 500\n\
         [sink.options]\nconninfo = {}\ntable = {}\nconnect_timeout_ms = 3000\n",
        toml_str(so.display().to_string()),
        toml_str(&conninfo),
        toml_str(&table)
    );
    let mut d = Daemon::start(&config);
    assert!(
        d.stdout().contains("spillway-plugin-postgres"),
        "start-up line: {}",
        d.stdout()
    );

    let mut acked: Vec<String> = Vec::new();
    // Two kill points: early in the first run (the table has just started
    // filling), and later in the second run, while it redelivers what the
    // first crash left and takes new records at the same time.
    for (round, kill_after_new_rows) in [(0, 40u64), (1, 600u64)] {
        let base = row_count(&conninfo, &table).unwrap_or(0);
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..3)
            .map(|p| spawn_pg_producer(&d, format!("r{round}p{p}"), stop.clone()))
            .collect();
        // Kill while rows are being inserted: past the threshold, and the
        // count moved since the previous look.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = base;
        let killed_at = loop {
            let now = row_count(&conninfo, &table).unwrap_or(0);
            if now >= base + kill_after_new_rows && now > last {
                d.kill9();
                break now;
            }
            last = now;
            assert!(
                Instant::now() < deadline,
                "round {round}: the table never reached {} rows (has {now}); log:\n{}",
                base + kill_after_new_rows,
                d.stderr()
            );
            thread::sleep(Duration::from_millis(5));
        };
        let mut round_acked = 0;
        for h in producers {
            let (a, err) = h.join().expect("producer panicked");
            let err = err.expect("a producer kept going after SIGKILL");
            assert!(
                !err.contains("Overloaded"),
                "round {round}: a push got Overloaded: {err}"
            );
            round_acked += a.len();
            acked.extend(a);
        }
        say(&format!(
            "postgres round {round}: SIGKILL with {killed_at} rows in the table, {round_acked} records acked this round\n"
        ));
        d.spawn();
    }

    // After the last restart: more traffic, then everything acked must arrive.
    let mut c = d.client();
    for i in 0..50 {
        let p = format!("after:{i}");
        c.push(Tier::Sync, p.as_bytes()).unwrap();
        acked.push(p);
    }
    let wanted: HashSet<&str> = acked.iter().map(String::as_str).collect();
    assert_eq!(wanted.len(), acked.len(), "payloads are unique");
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = table_rows(&conninfo, &table);
        let present: HashSet<&str> = rows.iter().map(|r| r.2.as_str()).collect();
        if wanted.iter().all(|p| present.contains(p)) {
            break rows;
        }
        if Instant::now() >= deadline {
            let missing: Vec<&&str> = wanted
                .iter()
                .filter(|p| !present.contains(**p))
                .take(10)
                .collect();
            panic!(
                "{} of {} acked records never reached {table} (first: {missing:?}); ctl stats:\n{}\nlog:\n{}",
                wanted.iter().filter(|p| !present.contains(**p)).count(),
                wanted.len(),
                stats(&d),
                d.stderr()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    // Let any redelivery still in flight land before counting.
    thread::sleep(Duration::from_millis(500));
    let rows = {
        let again = table_rows(&conninfo, &table);
        assert!(again.len() >= rows.len());
        again
    };

    // Exactly once: each acked payload in one row; no payload in two rows
    // (under two identities); row count == distinct (shard, seq).
    let mut per_payload: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *per_payload.entry(r.2.as_str()).or_default() += 1;
    }
    let dup: Vec<(&&str, &usize)> = per_payload
        .iter()
        .filter(|(_, n)| **n > 1)
        .take(10)
        .collect();
    assert!(
        dup.is_empty(),
        "payloads stored more than once (under different identities): {dup:?}"
    );
    for p in &acked {
        assert_eq!(
            per_payload.get(p.as_str()).copied().unwrap_or(0),
            1,
            "acked {p} must be in {table} exactly once"
        );
    }
    let counts = psql(
        &conninfo,
        &format!("SELECT count(*), count(DISTINCT (shard, seq)) FROM {table}"),
    )
    .unwrap();
    let (total, distinct) = counts[0].split_once('|').expect("two columns");
    assert_eq!(
        total, distinct,
        "row count must equal distinct (shard, seq)"
    );
    assert_eq!(total.parse::<usize>().unwrap(), rows.len());
    let unacked = rows.len() - acked.len();
    say(&format!(
        "postgres: {} acked records each exactly once in {table}; {unacked} more rows from pushes cut short by SIGKILL\n",
        acked.len()
    ));
    d.terminate();
    psql(&conninfo, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
}

/// Issue 40: two daemons (two data folders: the fleet shape, many hosts
/// and one database) and a third made by recreating one's data folder
/// (its numbers start again) write into one table through the SQL plugin
/// `so` with `options` (its `[sink.options]` lines); `rows` reads the
/// table as `instance|payload` lines. Every record of each lands once,
/// under its daemon's instance id. Before, the second daemon's rows
/// collided with the first's `(shard, seq)` and were dropped without a
/// word.
fn a_fleet_shares_one_table(so: &Path, options: &str, rows: impl Fn() -> Vec<String>) {
    let config = format!(
        "[sink]\ntype = \"plugin\"\npath = {}\nmax_records = 50\nlinger_ms = 2\n\
         [sink.options]\n{options}",
        toml_str(so.display().to_string()),
    );
    let instance_of = |d: &Daemon| {
        std::fs::read_to_string(d.data_dir().join("instance-id"))
            .unwrap_or_else(|e| panic!("{}/instance-id: {e}", d.data_dir().display()))
            .trim()
            .to_string()
    };
    let push = |d: &Daemon, tag: &str| -> Vec<String> {
        let mut c = d.client();
        (0..100)
            .map(|i| {
                let p = format!("{tag}:{i}");
                c.push(Tier::Sync, p.as_bytes())
                    .unwrap_or_else(|e| panic!("push {p}: {e}"));
                p
            })
            .collect()
    };
    let rows_once = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut got = rows();
            if got.len() >= n || Instant::now() >= deadline {
                got.sort();
                return got;
            }
            thread::sleep(Duration::from_millis(50));
        }
    };
    let mut a = Daemon::start(&config);
    let mut b = Daemon::start(&config);
    let mut expected: Vec<String> = Vec::new();
    for (d, tag) in [(&a, "a"), (&b, "b")] {
        let id = instance_of(d);
        expected.extend(push(d, tag).into_iter().map(|p| format!("{id}|{p}")));
    }
    assert_eq!(rows_once(expected.len()).len(), 200, "a's and b's rows");
    // A's data folder made anew (a host rebuilt): a new instance id, and
    // its numbers start at 0 again.
    let old_a = instance_of(&a);
    a.terminate();
    std::fs::remove_dir_all(a.data_dir()).unwrap();
    a.spawn();
    let new_a = instance_of(&a);
    assert_ne!(
        new_a, old_a,
        "a recreated data folder gets a new instance id"
    );
    expected.extend(push(&a, "a2").into_iter().map(|p| format!("{new_a}|{p}")));
    expected.sort();
    let got = rows_once(expected.len());
    assert_eq!(
        got.len(),
        expected.len(),
        "rows in the table; a's stats:\n{}\nb's stats:\n{}",
        stats(&a),
        stats(&b)
    );
    assert_eq!(
        got, expected,
        "every record of every daemon, once, under its instance id"
    );
    a.terminate();
    b.terminate();
}

#[test]
fn postgres_plugin_two_daemons_and_a_recreated_folder_share_one_table() {
    let Some(conninfo) = pg_server() else { return };
    let table = format!("spillway_e2e_{}_fleet", std::process::id());
    psql(&conninfo, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
    a_fleet_shares_one_table(
        &postgres_plugin(),
        &format!(
            "conninfo = {}\ntable = {}\n",
            toml_str(&conninfo),
            toml_str(&table)
        ),
        || {
            psql(
                &conninfo,
                &format!("SELECT instance, convert_from(payload, 'UTF8') FROM {table}"),
            )
            .unwrap_or_default()
        },
    );
    psql(&conninfo, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
}

#[test]
fn mariadb_plugin_two_daemons_and_a_recreated_folder_share_one_table() {
    let Some(url) = mariadb_server() else { return };
    let table = format!("spillway_e2e_{}_fleet", std::process::id());
    mariadb_query(&url, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
    a_fleet_shares_one_table(
        &mariadb_plugin(),
        &format!("url = {}\ntable = {}\n", toml_str(&url), toml_str(&table)),
        || {
            mariadb_query(
                &url,
                &format!("SELECT CONCAT(instance, '|', CAST(payload AS CHAR)) FROM {table}"),
            )
            .unwrap_or_default()
        },
    );
    mariadb_query(&url, &format!("DROP TABLE IF EXISTS {table}")).unwrap();
}

/// Issue 40: a SQL plugin whose server is down when the daemon starts:
/// the daemon starts and takes records (they wait), `ctl health` says
/// why, and `spillway check` passes with a warning that says why (check
/// agrees with run).
#[test]
fn sql_plugins_with_the_server_down_start_and_say_why() {
    for (so, options, says) in [
        (
            postgres_plugin(),
            "conninfo = \"host=127.0.0.1 port=1 user=nobody dbname=none\"\nconnect_timeout_ms = 1000\n",
            "Connection refused",
        ),
        (
            mariadb_plugin(),
            "url = \"mysql://nobody@127.0.0.1:1/none\"\nconnect_timeout_ms = 1000\n",
            "Connection refused",
        ),
    ] {
        let config = format!(
            "[sink]\ntype = \"plugin\"\npath = {}\nretry_initial_ms = 50\nretry_max_ms = 200\n\
             [sink.options]\n{options}",
            toml_str(so.display().to_string())
        );
        let d = Daemon::start(&config);
        d.client()
            .push(Tier::Sync, b"waits")
            .unwrap_or_else(|e| panic!("{}: a push while the server is down: {e}", so.display()));
        assert!(
            wait_until(Duration::from_secs(30), || d.health().contains(says)),
            "{}: ctl health never said {says:?}:\n{}",
            so.display(),
            d.health()
        );
        let f = run_spillway(
            &["check".as_ref(), d.config_path().as_os_str()],
            Duration::from_secs(60),
        );
        let said = format!("{}{}", f.stdout, f.stderr);
        assert!(f.status.success(), "{}: check failed: {said}", so.display());
        assert!(
            said.contains("fails its health check") && said.contains(says),
            "{}: check did not say why: {said}",
            so.display()
        );
    }
}
