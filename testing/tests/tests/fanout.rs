//! One buffer, several sinks, against the real binary: every sink gets every
//! acknowledged record from its own cursor; a sink that is down holds only
//! its own cursor (the others keep delivering) and the segments it still
//! needs (deleted once it caught up); a SIGKILL loses nothing on any sink;
//! a reload adds a sink (at the end, or at the oldest record held) and
//! removes one (its hold on segments goes); a data folder of the
//! single-sink layout keeps its checkpoint as the `default` sink's.
//!
//! Timing is only ever bounded from above by generous liveness timeouts.

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes each record is padded to, so that a few thousand records fill
/// several segments of the smallest size (1 MiB).
const RECORD_BYTES: usize = 1000;

/// Push `n` records `"{tag}:{i}:…"` (padded to [`RECORD_BYTES`]) at Sync;
/// every one must be acked.
fn push_tagged(d: &Daemon, tag: &str, n: u64) -> Vec<String> {
    let mut c = d.client();
    (0..n)
        .map(|i| {
            let head = format!("{tag}:{i}:");
            let p = format!(
                "{head}{}",
                "x".repeat(RECORD_BYTES.saturating_sub(head.len()))
            );
            c.push(Tier::Sync, p.as_bytes())
                .unwrap_or_else(|e| panic!("push {p}: {e}"));
            p
        })
        .collect()
}

/// The payloads in an NDJSON file sink's output (each line is a JSON
/// object with the payload as a string, or the raw payload).
fn file_payloads(path: &Path) -> HashSet<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["payload"].as_str().map(str::to_string))
                .unwrap_or_else(|| l.to_string())
        })
        .collect()
}

fn http_table(name: &str, rx: &HttpReceiver) -> String {
    format!(
        "[sinks.{name}]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 300\n",
        rx.url()
    )
}

/// `spillway ctl ARGS` on the daemon's config, run to its end whatever it
/// answers (for the refusals).
fn ctl_run(d: &Daemon, args: &[&str]) -> Finished {
    let mut all: Vec<&std::ffi::OsStr> = vec!["ctl".as_ref(), "--config".as_ref()];
    all.push(d.config_path().as_os_str());
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    run_spillway(&all, Duration::from_secs(10))
}

/// `sink{sink="NAME"}.KEY` of `ctl stats`.
fn sink_stat(d: &Daemon, sink: &str, key: &str) -> u64 {
    let stats = d.ctl(&["stats", "--flat"]);
    let prefix = format!("sink{{sink=\"{sink}\"}}.{key} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in ctl stats:\n{stats}"))
}

/// Three sinks (two HTTP receivers, a file); one receiver answers 503:
/// the other two get everything while it is down, its backlog and the
/// segments it needs are kept, and once it answers it catches up and the
/// segments go.
#[test]
fn a_dead_sink_holds_only_its_own_cursor_and_the_segments_it_needs() {
    let warehouse = HttpReceiver::start();
    let stream = HttpReceiver::start();
    stream.set_status(503);
    let mut d = Daemon::configure("");
    let archive = d.dir().join("archive.ndjson");
    d.reconfigure(&format!(
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 1048576\n{}{}[sinks.archive]\ntype = \"file\"\npath = \"{}\"\n",
        http_table("warehouse", &warehouse),
        http_table("stream", &stream),
        archive.display()
    ));
    d.spawn();
    let sent = push_tagged(&d, "fan", 3000);
    warehouse.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || file_payloads(&archive).len()
            >= sent.len()),
        "the file sink did not get every record while another sink was down"
    );
    assert_eq!(
        stream.accepted_records().len(),
        0,
        "the dead receiver accepted records"
    );
    // The dead sink still needs every segment: none was deleted.
    assert!(
        sealed_segments(&d) >= 2,
        "segments: {}",
        sealed_segments(&d)
    );
    assert_eq!(
        shard_stat_sum(&d.ctl(&["stats", "--flat"]), "segments_deleted"),
        0
    );
    assert!(sink_stat(&d, "stream", "backlog_records") >= 3000);
    assert_eq!(sink_stat(&d, "warehouse", "backlog_records"), 0);
    let health = d.health();
    assert!(
        health.contains("sink stream of shard 0 Retrying"),
        "{health}"
    );
    assert!(
        health.contains("degraded: sink stream of shard 0"),
        "{health}"
    );

    stream.set_status(200);
    stream.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || sealed_segments(&d) == 0),
        "segments every sink confirmed were kept: {}",
        sealed_segments(&d)
    );
    assert!(shard_stat_sum(&d.ctl(&["stats", "--flat"]), "segments_deleted") >= 2);
}

/// Delivered segments are written over as later ones rather than unlinked
/// and allocated again: with two sinks each still gets every record, at
/// most one segment waits set aside (`.free`), and a restart removes it.
#[test]
fn delivered_segments_are_written_over_and_a_restart_removes_the_one_set_aside() {
    let web = HttpReceiver::start();
    let mut d = Daemon::configure("");
    let archive = d.dir().join("archive.ndjson");
    d.reconfigure(&format!(
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 1048576\n{}[sinks.archive]\ntype = \"file\"\npath = \"{}\"\n",
        http_table("web", &web),
        archive.display()
    ));
    d.spawn();
    let recycled = |d: &Daemon| shard_stat_sum(&d.ctl(&["stats", "--flat"]), "segments_recycled");
    let mut sent = Vec::new();
    let mut most_free = 0;
    for round in 0..6 {
        sent.extend(push_tagged(&d, &format!("re{round}"), 1000));
        most_free = most_free.max(shard_files_ending(&d, ".free"));
    }
    web.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || file_payloads(&archive).len()
            >= sent.len()),
        "the file sink did not get every record"
    );
    assert_eq!(file_payloads(&archive), sent.iter().cloned().collect());
    assert!(
        wait_until(DELIVERY_TIMEOUT, || recycled(&d) >= 2),
        "6 MiB through 1 MiB segments wrote over fewer than 2 delivered ones: {}\n{}",
        recycled(&d),
        d.ctl(&["segments"])
    );
    assert!(
        most_free <= 1,
        "{most_free} segments waited set aside at once"
    );
    assert!(shard_files_ending(&d, ".free") <= 1);

    // A segment set aside when the daemon stopped (planted here, so the
    // check does not depend on when the sealer last took one) is removed
    // by the next start, before it takes pushes.
    d.terminate();
    let (_, shard_dir) = d.shard_dirs().into_iter().next().unwrap();
    let planted = shard_dir.join("00000000000000ff.free");
    fs::write(&planted, b"records every sink confirmed").unwrap();
    d.spawn();
    assert!(!planted.exists(), "a start kept a set-aside segment");
    let more = push_tagged(&d, "after", 1500);
    web.wait_for_payloads(&more, DELIVERY_TIMEOUT);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || file_payloads(&archive).len()
            >= sent.len() + more.len()),
        "the file sink did not get the records pushed after the restart"
    );
}

/// A SIGKILL while three sinks deliver: after the restart every sink has
/// every acknowledged record.
#[test]
fn a_sigkill_loses_nothing_on_any_sink() {
    let a = HttpReceiver::start();
    let b = HttpReceiver::start();
    b.set_delay(Duration::from_millis(20));
    let mut d = Daemon::configure("");
    let archive = d.dir().join("archive.ndjson");
    d.reconfigure(&format!(
        "[server]\nshards = 2\n{}{}[sinks.archive]\ntype = \"file\"\npath = \"{}\"\n",
        http_table("a", &a),
        http_table("b", &b),
        archive.display()
    ));
    d.spawn();
    let mut sent = push_tagged(&d, "before", 2000);
    d.kill9();
    d.spawn();
    sent.extend(push_tagged(&d, "after", 200));
    a.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    b.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || {
            let got = file_payloads(&archive);
            sent.iter().all(|p| got.contains(p))
        }),
        "the file sink is missing records after a SIGKILL"
    );
}

/// Reload adds a sink at the end (only new records) and one at the oldest
/// record held (everything still pending for another sink), then removes
/// the lagging one: its cursor files go and the segments it held are
/// deleted.
#[test]
fn reload_adds_and_removes_sinks_while_records_flow() {
    let first = HttpReceiver::start();
    let held = HttpReceiver::start();
    held.set_status(503);
    let mut d = Daemon::configure("");
    let base = format!(
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 1048576\n{}{}",
        http_table("first", &first),
        http_table("held", &held)
    );
    d.reconfigure(&base);
    d.spawn();
    let old = push_tagged(&d, "old", 1500);
    first.wait_for_payloads(&old, DELIVERY_TIMEOUT);

    let at_end = HttpReceiver::start();
    let at_oldest = HttpReceiver::start();
    let added = format!(
        "{base}{}start = \"end\"\n{}start = \"oldest\"\n",
        http_table("at_end", &at_end),
        http_table("at_oldest", &at_oldest)
    );
    d.reconfigure(&added);
    let report = d.ctl(&["reload"]);
    assert!(report.contains("sink at_end added"), "{report}");
    assert!(report.contains("sink at_oldest added"), "{report}");
    let new = push_tagged(&d, "new", 300);
    at_end.wait_for_payloads(&new, DELIVERY_TIMEOUT);
    at_oldest.wait_for_payloads(&old, DELIVERY_TIMEOUT);
    at_oldest.wait_for_payloads(&new, DELIVERY_TIMEOUT);
    let got_old: usize = at_end
        .accepted_records()
        .iter()
        .filter(|r| r.text().starts_with("old:"))
        .count();
    assert_eq!(got_old, 0, "a sink added at the end got older records");

    // Remove the sink that held everything back.
    let segments_before = sealed_segments(&d);
    assert!(segments_before >= 1, "the held sink kept no segment");
    let removed = base.replace(&http_table("held", &held), "")
        + &http_table("at_end", &at_end)
        + "start = \"end\"\n"
        + &http_table("at_oldest", &at_oldest)
        + "start = \"oldest\"\n";
    d.reconfigure(&removed);
    let report = d.ctl(&["reload"]);
    assert!(report.contains("sink held removed"), "{report}");
    assert!(
        wait_until(DELIVERY_TIMEOUT, || sealed_segments(&d) == 0),
        "the removed sink's segments were kept: {}",
        sealed_segments(&d)
    );
    let cursor = d.data_dir().join("shard-000").join("cursor-held");
    assert!(
        wait_until(DELIVERY_TIMEOUT, || !cursor.exists()),
        "the removed sink's cursor file stayed"
    );
    assert!(d.data_dir().join("shard-000").join("cursor-first").exists());
}

/// `start = "oldest"` backfills from the oldest record the shard still
/// holds, records every other sink already confirmed included (here: all
/// of them, in the active segment, which retention keeps): the floor comes
/// down for the new sink, as a rewind brings it down.
#[test]
fn a_sink_added_at_the_oldest_gets_records_every_other_sink_confirmed() {
    let first = HttpReceiver::start();
    let mut d = Daemon::configure("");
    let base = format!(
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 1048576\n{}",
        http_table("first", &first)
    );
    d.reconfigure(&base);
    d.spawn();
    let old = push_tagged(&d, "old", 200);
    first.wait_for_payloads(&old, DELIVERY_TIMEOUT);
    // Every sink has confirmed every record: the floor reaches the end.
    let floor = || {
        let s = d.ctl(&["stats", "--flat"]);
        shard_stat_sum(&s, "checkpoint")
    };
    assert!(
        wait_until(DELIVERY_TIMEOUT, || floor() >= 200),
        "the floor never reached 200: {}",
        floor()
    );

    let late = HttpReceiver::start();
    d.reconfigure(&format!(
        "{base}{}start = \"oldest\"\n",
        http_table("late", &late)
    ));
    let report = d.ctl(&["reload"]);
    assert!(report.contains("sink late added"), "{report}");
    late.wait_for_payloads(&old, DELIVERY_TIMEOUT);
    let new = push_tagged(&d, "new", 20);
    late.wait_for_payloads(&new, DELIVERY_TIMEOUT);
    first.wait_for_payloads(&new, DELIVERY_TIMEOUT);
    let again: usize = first
        .accepted_records()
        .iter()
        .filter(|r| r.text().starts_with("old:"))
        .count();
    assert_eq!(again, old.len(), "the first sink got the old records again");
}

/// A data folder of the single-sink layout (`checkpoint` in each shard, no
/// cursor files, `dead-letter/` at the top) keeps its checkpoint as the
/// `default` sink's: exactly what was pending is delivered.
#[test]
fn a_single_sink_data_folder_delivers_exactly_what_was_pending() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n[sink]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 300\n",
        rx.url()
    ));
    let delivered = push_tagged(&d, "done", 100);
    rx.set_status(200);
    rx.wait_for_payloads(&delivered, DELIVERY_TIMEOUT);
    assert!(wait_until(DELIVERY_TIMEOUT, || {
        shard_stat_sum(&d.ctl(&["stats", "--flat"]), "checkpoint") >= 100
    }));
    rx.set_status(503);
    let pending = push_tagged(&d, "pending", 50);
    d.terminate();
    // Make it look like the previous release left it: the shard's
    // checkpoint says how far its one sink confirmed; no cursor files.
    let shard = d.data_dir().join("shard-000");
    let cursor = shard.join("cursor-default");
    let confirmed =
        spillway_wab::read_checkpoint_file(&spillway_wab::FsStorage, &shard, "cursor-default")
            .unwrap();
    assert_eq!(confirmed, 100, "the cursor file after a clean stop");
    spillway_wab::write_checkpoint(&spillway_wab::FsStorage, &shard, confirmed).unwrap();
    fs::remove_file(&cursor).unwrap();
    let sinks_dir = d.data_dir().join("sinks");
    fs::rename(
        sinks_dir.join("default").join("dead-letter"),
        d.data_dir().join("dead-letter"),
    )
    .unwrap();
    fs::remove_dir_all(&sinks_dir).unwrap();

    let before = rx.accepted_records().len();
    rx.set_status(200);
    d.spawn();
    rx.wait_for_payloads(&pending, DELIVERY_TIMEOUT);
    let after: Vec<String> = rx.accepted_records()[before..]
        .iter()
        .map(|r| r.text())
        .collect();
    assert!(
        after.iter().all(|p| p.starts_with("pending:")),
        "records confirmed before the upgrade were delivered again: {after:?}"
    );
    assert!(
        cursor.exists(),
        "the default sink's cursor file was not made"
    );
    assert!(
        d.data_dir().join("sinks/default/dead-letter").is_dir(),
        "the dead-letter store did not move to the default sink's folder"
    );
}

/// `[sink]` and `[sinks.*]` together are refused with both named; a bad
/// sink name is refused with the offending character.
#[test]
fn sink_tables_are_checked() {
    let both = "[sink]\ntype = \"noop\"\n[sinks.a]\ntype = \"noop\"\n";
    let mut d = Daemon::configure(both);
    let out = d.run_to_exit(Duration::from_secs(10));
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("[sink]") && out.stderr.contains("[sinks.a]"),
        "{}",
        out.stderr
    );
    d.reconfigure("[sinks.Bad]\ntype = \"noop\"\n");
    let out = d.run_to_exit(Duration::from_secs(10));
    assert!(!out.status.success());
    assert!(out.stderr.contains("'B'"), "{}", out.stderr);
}

/// `on_lag = "skip"`: a dead sink with a small `lag_bytes_max` stops
/// neither ingest nor the other sink; what it skipped is counted, in its
/// `skipped` file, and exactly those records never reach it.
#[test]
fn a_skipping_sink_lets_ingest_and_the_others_go_on_and_reports_what_it_skipped() {
    let healthy = HttpReceiver::start();
    let dead = HttpReceiver::start();
    dead.set_status(503);
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n[wab]\nsegment_bytes_max = 1048576\nwab_bytes_max = 8388608\n{}{}lag_bytes_max = 1048576\non_lag = \"skip\"\n",
        http_table("healthy", &healthy),
        http_table("dead", &dead)
    ));
    // 12 MiB through an 8 MiB WAB: only possible if the dead sink lets go.
    let sent = push_tagged(&d, "lag", 12_000);
    healthy.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
    assert!(
        sink_stat(&d, "dead", "records_skipped") > 0,
        "nothing skipped"
    );
    // The dead sink comes back; it may skip again while it catches up, so
    // what it skipped is read once its backlog is gone.
    dead.set_status(200);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || sink_stat(
            &d,
            "dead",
            "backlog_records"
        ) == 0),
        "the sink that came back did not catch up"
    );
    let skipped = sink_stat(&d, "dead", "records_skipped");
    let file = d.data_dir().join("sinks/dead/skipped");
    let lines = fs::read_to_string(&file).expect("the skipped file");
    let mut ranges = Vec::new();
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        ranges.push((
            v["first_seq"].as_u64().unwrap(),
            v["end_seq"].as_u64().unwrap(),
        ));
    }
    let in_file: u64 = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["records"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(
        in_file, skipped,
        "the skipped file and the counter disagree:\n{lines}"
    );
    // It gets everything except the skipped ranges.
    let skipped_seq = |seq: u64| ranges.iter().any(|(a, b)| (*a..*b).contains(&seq));
    let expected: Vec<String> = sent
        .iter()
        .enumerate()
        .filter(|(seq, _)| !skipped_seq(*seq as u64))
        .map(|(_, p)| p.clone())
        .collect();
    let got = dead.wait_for_payloads(&expected, DELIVERY_TIMEOUT);
    for r in &got {
        assert!(
            !skipped_seq(r.id().1),
            "skipped record {:?} was delivered",
            r.id()
        );
    }
    assert_eq!(
        expected.len() as u64 + skipped,
        sent.len() as u64,
        "every record either reached the sink or was reported skipped"
    );
}

/// `ctl sink pause` holds one sink (and survives a restart); `resume`
/// catches up; `rewind --to oldest` replays exactly what the shard holds,
/// to that sink alone.
#[test]
fn pause_holds_one_sink_resume_catches_up_and_rewind_replays_to_it_alone() {
    let a = HttpReceiver::start();
    let b = HttpReceiver::start();
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}{}",
        http_table("a", &a),
        http_table("b", &b)
    ));
    let report = d.ctl(&["sink", "pause", "b"]);
    assert!(report.contains("sink b paused"), "{report}");
    let first = push_tagged(&d, "p", 200);
    a.wait_for_payloads(&first, DELIVERY_TIMEOUT);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(b.accepted_records().len(), 0, "a paused sink delivered");
    assert!(d.health().contains("sink b of shard 0 Paused"));
    d.terminate();
    d.spawn();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        b.accepted_records().len(),
        0,
        "the pause did not survive a restart"
    );
    d.ctl(&["sink", "resume", "b"]);
    b.wait_for_payloads(&first, DELIVERY_TIMEOUT);

    // Replay: b gets exactly what the shard holds again; a nothing new.
    // (The segments from before the restart are gone once both sinks had
    // them; the active one is kept.)
    let second = push_tagged(&d, "q", 100);
    a.wait_for_payloads(&second, DELIVERY_TIMEOUT);
    b.wait_for_payloads(&second, DELIVERY_TIMEOUT);
    std::thread::sleep(Duration::from_millis(300));
    let held: HashSet<String> = texts(&d.read_all_records()).into_iter().collect();
    assert!(
        second.iter().all(|p| held.contains(p)),
        "the active segment no longer holds the last records"
    );
    let a_before = a.accepted_records().len();
    let b_before = b.accepted_records().len();
    let report = d.ctl(&["sink", "rewind", "b", "--to", "oldest"]);
    assert!(report.contains("rewind"), "{report}");
    assert!(
        wait_until(DELIVERY_TIMEOUT, || b.accepted_records().len()
            >= b_before + held.len()),
        "the rewind replayed {} of the {} records held",
        b.accepted_records().len() - b_before,
        held.len()
    );
    std::thread::sleep(Duration::from_millis(300));
    let replayed: HashSet<String> = b.accepted_records()[b_before..]
        .iter()
        .map(|r| r.text())
        .collect();
    assert_eq!(
        replayed, held,
        "the replay is not exactly what the shard holds"
    );
    assert_eq!(
        a.accepted_records().len(),
        a_before,
        "the rewind of b reached a"
    );
    // An unknown sink is refused, naming it and the ones there are.
    let f = ctl_run(&d, &["sink", "pause", "nope"]);
    assert!(!f.status.success(), "{f:?}");
    assert!(
        f.stderr.contains("no sink \"nope\"; sinks: a, b"),
        "{}",
        f.stderr
    );
}

/// With several sinks, `ctl dead-letter requeue --sink NAME` sends the
/// records back to that sink alone: the other sink, which took them the
/// first time, does not get them again.
#[test]
fn a_requeue_goes_back_to_its_sink_alone() {
    let a = HttpReceiver::start();
    let b = HttpReceiver::start();
    b.reject_containing(Some(b"poison"));
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}{}",
        http_table("a", &a),
        http_table("b", &b)
    ));
    let poison = push_tagged(&d, "poison", 1);
    a.wait_for_payloads(&poison, DELIVERY_TIMEOUT);
    let listed = || d.ctl(&["dead-letter", "list", "--sink", "b"]);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || listed().starts_with("1 dead letters")),
        "b did not dead-letter the record: {}",
        listed()
    );
    assert!(d
        .ctl(&["dead-letter", "list", "--sink", "a"])
        .starts_with("0 dead letters"));
    let after = push_tagged(&d, "after", 20);
    a.wait_for_payloads(&after, DELIVERY_TIMEOUT);
    b.wait_for_payloads(&after, DELIVERY_TIMEOUT);

    b.reject_containing(None);
    let report = d.ctl(&["dead-letter", "requeue", "all", "--sink", "b"]);
    assert_eq!(report, "requeued 1\n");
    b.wait_for_payloads(&poison, DELIVERY_TIMEOUT);
    assert!(listed().starts_with("0 dead letters"), "{}", listed());
    std::thread::sleep(Duration::from_millis(500));
    let a_copies = a
        .accepted_records()
        .iter()
        .filter(|r| r.text() == poison[0])
        .count();
    assert_eq!(a_copies, 1, "the requeue for b reached a");
    // Which sink must be said when there are several.
    let f = ctl_run(&d, &["dead-letter", "requeue", "all"]);
    assert!(!f.status.success(), "{f:?}");
    assert!(f.stderr.contains("--sink NAME"), "{}", f.stderr);
}

/// A cursor lingering for a fuller batch sleeps until the commit that
/// fills it or its linger's end, not through every group commit: with
/// three sinks every commit used to wake all three drain threads of the
/// shard (actors/src/shard/durable.rs).
#[test]
fn lingering_cursors_are_not_woken_by_every_commit() {
    const PUSHES: u64 = 3000;
    // Long, so that lingers ending are few however slow the machine is:
    // with 50 ms, 3,000 serial commits on a loaded 2-core machine took long
    // enough for the lingers alone to pass the bound (1,837 wakes, issue 39
    // session), while a wake per commit is ~9,000 at any speed.
    const LINGER_MS: u64 = 1000;
    let sinks: String = ["a", "b", "c"]
        .iter()
        .map(|s| {
            format!("[sinks.{s}]\ntype = \"noop\"\nlinger_ms = {LINGER_MS}\nbatch_records_max = 100000\n")
        })
        .collect();
    let d = Daemon::start(&format!("[server]\nshards = 1\n{sinks}"));
    let pid = d.pid().unwrap();
    let delivered = |n: u64| {
        wait_until(DELIVERY_TIMEOUT, || {
            ["a", "b", "c"]
                .iter()
                .all(|s| sink_stat(&d, s, "delivered_records") >= n)
        })
    };
    push_tagged(&d, "warm", 10);
    assert!(delivered(10), "the warm-up records were not delivered");
    let before = voluntary_switches(pid, "drain");
    let started = std::time::Instant::now();
    // One serial producer: a group commit per record.
    push_tagged(&d, "serial", PUSHES);
    assert!(delivered(10 + PUSHES), "not every sink got every record");
    let woken = voluntary_switches(pid, "drain") - before;
    // Wakes the clock owes, per sink and second: a linger's end, the
    // cursor file's sync after the batch it ends, and slack (x2). Only on
    // a run slower than ten minutes could this reach a wake per commit.
    let secs = started.elapsed().as_secs() + 1;
    let timed = 3 * secs * 2 * 2 * 1000 / LINGER_MS;
    eprintln!("{PUSHES} commits: the three drain threads went to sleep {woken} times");
    // Woken per commit: about 3 x 3000. By lingers, answers, the
    // checkpoint interval (100 ms) and the idle turn (500 ms): a few
    // hundred over the push and the delivery after it, more on a slow run.
    assert!(
        woken < PUSHES / 2 + timed,
        "the three drain threads woke {woken} times over {PUSHES} group commits in {secs} s: \
         a lingering cursor is woken by commits that do not fill its batch"
    );
}
