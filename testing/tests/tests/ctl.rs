//! Every `spillway ctl` subcommand against a running daemon, as prose and
//! with `--json`: the JSON parses and has the documented fields.

use serde_json::Value;
use spillway_tests::*;

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = d.ctl(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ctl {args:?} --json: {e}: {out}"))
}

#[test]
fn every_subcommand_answers_in_prose_and_in_json() {
    let d = Daemon::start("[server]\nshards = 2\n");
    let mut c = d.client();
    for i in 0..5 {
        c.push(Tier::Sync, format!("r{i}").as_bytes()).unwrap();
    }

    let health = d.health();
    assert!(health.contains("shard 0 Running"), "{health}");
    let h = d.health_json();
    assert_eq!(h["shards"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["shards"][0]["state"], "running", "{h}");
    for field in ["state", "since", "reason", "last_delivery"] {
        assert!(
            h["shards"][0]["sinks"]["default"].get(field).is_some(),
            "{field}: {h}"
        );
    }
    assert!(h["ready"].is_boolean() && h["failing"].is_array(), "{h}");

    let stats = d.ctl(&["stats", "--flat"]);
    assert!(stats.contains("connections_accepted "), "{stats}");
    // For people: grouped, with units, the five records counted.
    let view = d.ctl(&["stats"]);
    for section in [
        "\nINGEST\n",
        "\nWAB  ",
        "\nDELIVERY\n",
        "\nDEAD LETTERS\n",
        "\nRELOADS  ",
    ] {
        assert!(view.contains(section), "no {section:?} in:\n{view}");
    }
    assert!(view.starts_with("spillway: up "), "{view}");
    assert!(view.contains("  records       5 written"), "{view}");
    assert!(view.contains("  default: "), "{view}");
    assert!(view.contains(" B "), "no byte unit in:\n{view}");
    let s = json(&d, &["stats"]);
    assert!(
        s["global"]["connections_accepted"].as_u64().unwrap() >= 1,
        "{s}"
    );
    assert_eq!(s["nacks"]["bad_magic"], 0, "{s}");
    let written: u64 = s["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sh| sh["records_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 5, "{s}");
    assert!(s["shards"][0]["pending_records"].is_u64(), "{s}");
    assert!(
        s["reloads"]["failed"].is_u64() && s["sinks"]["default"]["description"].is_string(),
        "{s}"
    );

    let segments = d.ctl(&["segments"]);
    assert!(segments.contains("shard 0: "), "{segments}");
    assert!(segments.contains(".open "), "{segments}");
    let g = json(&d, &["segments"]);
    let seg = &g["shards"][0]["segments"][0];
    for field in ["id", "state", "bytes", "first_seq", "confirmed"] {
        assert!(seg.get(field).is_some(), "{field}: {g}");
    }
    let durable: u64 = g["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sh| sh["durable_next_seq"].as_u64().unwrap())
        .sum();
    assert_eq!(durable, 5, "{g}");
    // The held sink confirms nothing: every segment with records is pending.
    assert!(
        g["shards"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|sh| sh["segments"].as_array().unwrap())
            .all(|s| s["confirmed"] == "pending" || s["confirmed"] == "empty"),
        "{g}"
    );

    let metrics = d.ctl(&["metrics"]);
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    let m = json(&d, &["metrics"]);
    let written: f64 = m["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["name"] == "spillway_records_written_total")
        .map(|x| x["value"].as_f64().unwrap())
        .sum();
    assert_eq!(written, 5.0, "{m}");

    assert!(d
        .ctl(&["dead-letter", "list"])
        .starts_with("0 dead letters"));
    let l = json(&d, &["dead-letter", "list"]);
    assert_eq!(l["count"], 0, "{l}");
    assert_eq!(l["dead_letters"], serde_json::json!([]));
    assert_eq!(d.ctl(&["dead-letter", "drop", "all"]), "dropped 0\n");
    assert_eq!(json(&d, &["dead-letter", "drop", "all"])["dropped"], 0);
    assert_eq!(d.ctl(&["dead-letter", "requeue", "all"]), "requeued 0\n");
    assert_eq!(json(&d, &["dead-letter", "requeue", "all"])["requeued"], 0);

    assert!(d.ctl(&["reload"]).contains("sinks unchanged"));
    let r = json(&d, &["reload"]);
    assert_eq!(r["report"], serde_json::json!(["sinks unchanged"]), "{r}");
}

#[test]
fn top_prints_one_plain_line_per_interval_off_a_terminal() {
    let d = Daemon::start("");
    let mut c = d.client();
    c.push(Tier::Sync, b"x").unwrap();
    let out = d.ctl(&["top", "--interval", "0.2", "--count", "3"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for l in lines {
        assert!(l.contains(" ingest ") && l.contains("/s delivered "), "{l}");
        assert!(l.contains(" backlog ") && l.contains(" fsync p99 "), "{l}");
        // The one record, held by the sink: 16 header bytes and 1 of payload.
        assert!(l.contains(" backlog 1 (17 B) "), "{l}");
        // The test harness's sink holds every batch: it may stall.
        assert!(
            l.ends_with("NOT READY") || l.ends_with("DEGRADED") || l.ends_with("ready"),
            "{l}"
        );
    }
}

#[test]
fn an_error_in_json_mode_is_a_json_object_and_a_failure() {
    let d = Daemon::start("");
    let config = d.config_path().as_os_str();
    let out = run_spillway(
        &[
            "ctl".as_ref(),
            "--config".as_ref(),
            config,
            "--json".as_ref(),
            "dead-letter".as_ref(),
            "drop".as_ref(),
            "nope".as_ref(),
        ],
        std::time::Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("\"nope\" is not SHARD:SEQ"),
        "{v}"
    );
}

/// Without `--config` the CLI finds the daemon's config: `$SPILLWAY_CONFIG`,
/// else `./spillway.toml`, else `/etc/spillway/spillway.toml`, else the
/// embedded default; `-v` says which and why, and a variable naming no
/// file is an error naming it.
#[test]
fn the_cli_finds_its_config_without_flags_and_says_which_with_v() {
    let d = Daemon::start("[server]\nshards = 1\n");
    let here = tempfile::tempdir().unwrap();
    std::fs::copy(d.config_path(), here.path().join("spillway.toml")).unwrap();
    let in_dir = |dir: &std::path::Path, env: Option<&std::path::Path>| {
        let dir = dir.to_path_buf();
        let env = env.map(|p| p.to_path_buf());
        move |c: &mut std::process::Command| {
            c.current_dir(&dir);
            if let Some(p) = &env {
                c.env("SPILLWAY_CONFIG", p);
            }
        }
    };
    let argv =
        |words: &[&str]| -> Vec<std::ffi::OsString> { words.iter().map(|w| w.into()).collect() };
    let run = |words: &[&str], setup: Box<dyn FnOnce(&mut std::process::Command)>| {
        let args = argv(words);
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        run_spillway_with(&refs, std::time::Duration::from_secs(20), setup)
    };

    // ./spillway.toml in the current folder.
    let f = run(
        &["-v", "ctl", "health"],
        Box::new(in_dir(here.path(), None)),
    );
    assert!(matches!(f.status.code(), Some(0 | 3)), "{f:?}");
    assert!(f.stdout.contains("shard 0 Running"), "{f:?}");
    assert!(
        f.stderr
            .contains("spillway: config: spillway.toml (./spillway.toml in the current folder"),
        "{f:?}"
    );
    let f = run(
        &["push", "found-by-cwd"],
        Box::new(in_dir(here.path(), None)),
    );
    assert!(f.status.success(), "push without --config: {f:?}");

    // $SPILLWAY_CONFIG, from a folder without one.
    let elsewhere = tempfile::tempdir().unwrap();
    let f = run(
        &["-v", "ctl", "health"],
        Box::new(in_dir(elsewhere.path(), Some(d.config_path()))),
    );
    assert!(matches!(f.status.code(), Some(0 | 3)), "{f:?}");
    assert!(
        f.stderr.contains(&format!(
            "spillway: config: {} (from $SPILLWAY_CONFIG)",
            d.config_path().display()
        )),
        "{f:?}"
    );
    let gone = elsewhere.path().join("gone.toml");
    let f = run(
        &["ctl", "health"],
        Box::new(in_dir(elsewhere.path(), Some(&gone))),
    );
    assert_eq!(f.status.code(), Some(1), "{f:?}");
    assert!(
        f.stderr
            .contains(&format!("SPILLWAY_CONFIG={}: no such file", gone.display())),
        "{f:?}"
    );

    // Nothing to find: the embedded default (unless this machine has the
    // package's config).
    let f = run(&["-v", "check"], Box::new(in_dir(elsewhere.path(), None)));
    if std::path::Path::new("/etc/spillway/spillway.toml").exists() {
        assert!(
            f.stderr.contains("config: /etc/spillway/spillway.toml"),
            "{f:?}"
        );
    } else {
        assert!(
            f.stderr.contains("spillway: config: the embedded default (no --config, $SPILLWAY_CONFIG unset, no ./spillway.toml, no /etc/spillway/spillway.toml)"),
            "{f:?}"
        );
    }
    let mut c = d.client();
    c.push(Tier::Sync, b"still here").unwrap();
}

/// A socket the caller may not open says so: the socket's and its
/// folder's owner, group and mode, who the caller is, and what would let
/// them in (the group to join, or the user to be), not "is the daemon
/// running?".
#[test]
fn a_permission_error_on_a_socket_names_owner_group_mode_and_what_to_do() {
    if !require_root("run the CLI as the nobody user") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d =
        Daemon::start("[server]\nshards = 1\nsocket_mode = \"0660\"\nsocket_group = \"daemon\"\n");
    // The folders are 0700 (tempdirs): open them to others, so the
    // socket's own mode is what refuses.
    for dir in [
        d.dir().to_path_buf(),
        d.socket_path().parent().unwrap().to_path_buf(),
    ] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let admin = d.dir().join("admin");
    std::fs::set_permissions(&admin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |c: &mut std::process::Command| {
        // SAFETY: between fork and exec, only raw system calls.
        unsafe {
            c.pre_exec(|| {
                let groups = [65534 as libc::gid_t];
                if libc::setgroups(1, groups.as_ptr()) != 0
                    || libc::setgid(65534) != 0
                    || libc::setuid(65534) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let admin_socket = admin.join("admin.sock");
    let f = run_spillway_with(
        &[
            "ctl".as_ref(),
            "--admin-socket".as_ref(),
            admin_socket.as_os_str(),
            "health".as_ref(),
        ],
        std::time::Duration::from_secs(20),
        as_nobody,
    );
    assert_eq!(f.status.code(), Some(2), "{f:?}");
    for needle in [
        "permission denied",
        &format!(
            "{} is owned by root, group root, mode 0600",
            admin_socket.display()
        ),
        "you run as nobody (uid 65534)",
        "only root may connect to the admin socket",
    ] {
        assert!(f.stderr.contains(needle), "{needle:?} missing: {f:?}");
    }
    assert!(!f.stderr.contains("is the daemon running"), "{f:?}");
    let f = run_spillway_with(
        &[
            "push".as_ref(),
            "--socket".as_ref(),
            d.socket_path().as_os_str(),
            "x".as_ref(),
        ],
        std::time::Duration::from_secs(20),
        as_nobody,
    );
    assert!(!f.status.success(), "{f:?}");
    for needle in [
        "permission denied",
        "group daemon, mode 0660",
        "join its group daemon (`sudo usermod -aG daemon nobody`, then log in again)",
    ] {
        assert!(f.stderr.contains(needle), "{needle:?} missing: {f:?}");
    }
}

/// A `spillway ctl tap …` running beside the test, its stdout read line by
/// line on a thread of its own.
struct TapProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: std::path::PathBuf,
}

impl TapProcess {
    /// Starts `ctl [--json] tap ARGS` and waits until the daemon says the
    /// tap watches.
    fn start(d: &Daemon, json: bool, args: &[&str]) -> TapProcess {
        let watching = "ctl tap: a client watches records";
        let before = d.stderr().matches(watching).count();
        let stderr = d.dir().join(format!("tap-{before}.err"));
        let mut cmd = std::process::Command::new(spillway_bin());
        cmd.env_remove("SPILLWAY_CONFIG")
            .arg("ctl")
            .arg("--config")
            .arg(d.config_path());
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd
            .arg("tap")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while d.stderr().matches(watching).count() == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the tap never attached; its stderr: {}\ndaemon log:\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default(),
                d.stderr()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        TapProcess {
            child,
            lines,
            stderr,
        }
    }

    fn next(&self, within: std::time::Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// Waits for the process to end (it must, by --limit) and returns its
    /// remaining stdout lines and its stderr.
    fn finish(mut self) -> (Vec<String>, String) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(std::time::Instant::now() < deadline, "ctl tap did not end");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let stderr = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(status.success(), "ctl tap: {status}; stderr: {stderr}");
        (self.lines.iter().collect(), stderr)
    }
}

/// `ctl tap` prints records as they are acknowledged: only the tier asked
/// for, in order, with the shard and number each got, escaped; it stops at
/// `--limit` and says what it skipped.
#[test]
fn tap_prints_acknowledged_records_of_one_tier_up_to_its_limit() {
    let d = Daemon::start("[server]\nshards = 1\n");
    let mut c = d.client();
    c.push(Tier::Sync, b"before").unwrap();
    let tap = TapProcess::start(&d, false, &["--tier", "batched", "--limit", "3"]);
    for i in 0..3 {
        c.push(Tier::Sync, format!("s{i}").as_bytes()).unwrap();
        c.push(Tier::Batched, format!("b{i}\tx").as_bytes())
            .unwrap();
    }
    let (lines, stderr) = tap.finish();
    // Numbers: "before" is 0, then s0 1, b0 2, s1 3, b1 4, ...
    assert_eq!(
        lines,
        [
            "0:2 batched b0\\tx",
            "0:4 batched b1\\tx",
            "0:6 batched b2\\tx"
        ],
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("tap ended: 3 records shown; 0 skipped over --rate, 0 dropped"),
        "{stderr}"
    );
}

/// `--json`: one object per record, a payload that is not UTF-8 as base64,
/// and a closing object with the counts.
#[test]
fn tap_json_gives_payloads_that_are_not_utf8_as_base64() {
    let d = Daemon::start("[server]\nshards = 1\n");
    let mut c = d.client();
    let tap = TapProcess::start(&d, true, &["--limit", "2"]);
    c.push(Tier::Buffered, &[0xff, 0xfe, 0x00]).unwrap();
    c.push(Tier::Sync, "é\n".as_bytes()).unwrap();
    let (lines, _) = tap.finish();
    let v: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(v.len(), 3, "{lines:?}");
    assert_eq!(v[0]["payload_base64"], "//4A", "{lines:?}");
    assert_eq!(v[0]["tier"], "buffered");
    assert!(v[0].get("payload").is_none(), "{lines:?}");
    assert_eq!(v[1]["payload"], "é\n");
    assert_eq!(
        (v[1]["shard"].as_u64(), v[1]["seq"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(v[1]["arrival_unix_us"].as_u64().unwrap() > 0);
    assert_eq!(v[2]["end"], true, "{lines:?}");
    assert_eq!(v[2]["shown"], 2);
}

/// `--sink NAME` shows records as that sink confirms them: nothing while
/// it is paused, each once it has delivered it.
#[test]
fn tap_of_a_sink_shows_records_when_the_sink_confirms_them() {
    let rx = spillway_tests::receiver::HttpReceiver::start();
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n[sink]\ntype = \"http\"\nurl = \"{}\"\nlinger_ms = 0\n",
        rx.url()
    ));
    d.ctl(&["sink", "pause", "default"]);
    let tap = TapProcess::start(&d, false, &["--sink", "default", "--limit", "3"]);
    let mut c = d.client();
    for i in 0..3 {
        c.push(Tier::Sync, format!("r{i}").as_bytes()).unwrap();
    }
    // Acknowledged, not delivered: the sink's tap stays silent.
    assert_eq!(tap.next(std::time::Duration::from_millis(500)), None);
    assert!(rx.accepted_records().is_empty());
    d.ctl(&["sink", "resume", "default"]);
    let (lines, stderr) = tap.finish();
    assert_eq!(
        lines,
        ["0:0 sync r0", "0:1 sync r1", "0:2 sync r2"],
        "{stderr}"
    );
    assert_eq!(
        rx.wait_distinct(3, std::time::Duration::from_secs(10))
            .len(),
        3
    );
}

/// A tap nobody reads never holds up a push: the records it has no room
/// for are dropped and counted, and what it shows plus what it dropped is
/// every record acknowledged. `--sink` of an unknown sink is refused by
/// name.
#[test]
fn a_tap_nobody_reads_drops_records_and_never_holds_up_producers() {
    use std::io::{BufRead, Write};
    let d = Daemon::start("[server]\nshards = 2\n");
    let admin = d.dir().join("admin").join("admin.sock");
    let mut unknown = std::os::unix::net::UnixStream::connect(&admin).unwrap();
    unknown.write_all(b"tap --sink nope\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut unknown, &mut answer).unwrap();
    assert_eq!(answer, "error: no sink \"nope\"; sinks: default\n");

    let mut stalled = std::os::unix::net::UnixStream::connect(&admin).unwrap();
    stalled.write_all(b"tap --rate 0 --json\n").unwrap();
    let watching = "ctl tap: a client watches records";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !d.stderr().contains(watching) {
        assert!(std::time::Instant::now() < deadline, "{}", d.stderr());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // 32 MiB of records, four times what a tap may hold, with the reader
    // asleep: every push is acknowledged (the client's timeouts bound it).
    let payload = vec![b'x'; 4096];
    let mut c = d.client();
    let pushed = 8192u64;
    for _ in 0..pushed / 64 {
        c.push_batch(Tier::Batched, &vec![&payload[..]; 64])
            .unwrap();
    }
    // Now read: records, then (within a second) the counts; the records
    // shown and those dropped add up to every record pushed.
    stalled
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut reader = std::io::BufReader::new(stalled);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n");
    // (The counts line comes when they changed, at most once a second,
    // between records or after them.)
    let (mut shown, mut dropped) = (0u64, 0u64);
    while shown + dropped < pushed {
        line.clear();
        let n = reader.read_line(&mut line).unwrap_or_else(|e| {
            panic!("reading the tap after {shown} records ({dropped} dropped): {e}")
        });
        assert!(n > 0, "the tap ended early after {shown} records");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v.get("seq").is_some() {
            shown += 1;
        } else {
            assert_eq!(v["skipped"], 0, "{line}");
            dropped = v["dropped"].as_u64().unwrap();
        }
    }
    assert_eq!(
        shown + dropped,
        pushed,
        "no record is both shown and dropped"
    );
    assert!(dropped > 0, "nothing was dropped: {shown} shown");
    assert!(shown > 0, "nothing was shown");
}
