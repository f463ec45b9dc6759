//! Limits and hostile conditions: a full WAB, too many connections, a
//! stalled frame, the socket's permissions, stale and live sockets, bad
//! configs, and a graceful stop under load.

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::*;

fn mode_of(path: &std::path::Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// A client whose health check was answered, retried for a while (a
/// connection the daemon has not yet noticed closing may still count
/// against `connections_max`).
fn connect_healthy(d: &Daemon) -> Client {
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match Client::connect(d.socket_path()) {
            Ok(mut c) => {
                c.set_timeout(Some(Duration::from_secs(5))).unwrap();
                match c.health() {
                    Ok(()) => return c,
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!("no healthy connection within 10 s: {last}");
}

#[test]
fn full_wab_nacks_overloaded_and_keeps_the_connection() {
    const WAB_MAX: u64 = 4_194_304;
    let d = Daemon::start("[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 1048576\n");
    let mut client = d.client();
    let record = |i: u64| {
        let mut p = format!("full-{i:06}-").into_bytes();
        p.resize(1024, b'x');
        p
    };
    let mut acked = 0u64;
    let mut overloaded = false;
    // Fill most of the way with a pipeline (fast), then one push at a time.
    {
        let mut p = client.pipeline(64);
        let mut sent = 0u64;
        while sent < 3000 {
            p.push(Tier::Sync, &record(sent)).unwrap();
            sent += 1;
            while p.outstanding() >= 64 {
                match p.recv() {
                    Ok(Reply::Ack) if !overloaded => acked += 1,
                    Err(ClientError::Nack(NackReason::Overloaded)) => overloaded = true,
                    other => panic!(
                        "record {acked}: unexpected {other:?} (overloaded seen: {overloaded})"
                    ),
                }
            }
            if overloaded {
                break;
            }
        }
        while p.outstanding() > 0 {
            match p.recv() {
                Ok(Reply::Ack) if !overloaded => acked += 1,
                Err(ClientError::Nack(NackReason::Overloaded)) => overloaded = true,
                other => panic!("unexpected {other:?} (overloaded seen: {overloaded})"),
            }
        }
    }
    let mut n = acked;
    while !overloaded {
        assert!(
            n < 10_000,
            "10000 KiB pushed into a 4 MiB WAB and no Overloaded nack"
        );
        match client.push(Tier::Sync, &record(n)) {
            Ok(()) => acked += 1,
            Err(ClientError::Nack(NackReason::Overloaded)) => overloaded = true,
            Err(e) => panic!("push {n}: expected Ack or Overloaded, got {e}"),
        }
        n += 1;
    }
    // The same connection is still usable: health answered, pushes still Overloaded.
    client.health().expect("health check after Overloaded");
    for tier in Tier::ALL {
        match client.push(tier, &record(999_999)) {
            Err(ClientError::Nack(NackReason::Overloaded)) => {}
            other => panic!("{tier} push on a full WAB: expected Overloaded, got {other:?}"),
        }
    }
    match client.push_batch(Tier::Sync, &[record(999_998)]) {
        Err(ClientError::Nack(NackReason::Overloaded)) => {}
        other => panic!("push batch on a full WAB: expected Overloaded, got {other:?}"),
    }
    client
        .health()
        .expect("health check after more Overloaded nacks");

    // Exact bytes on a raw connection, which stays open.
    let mut raw = d.raw();
    raw.send(&push_frame(Tier::Sync, &record(999_997)));
    raw.expect_frame(&expected_nack(NackReason::Overloaded), "Overloaded nack");
    raw.expect_health();
    raw.send(&push_frame(Tier::Buffered, &record(999_996)));
    raw.expect_frame(
        &expected_nack(NackReason::Overloaded),
        "second Overloaded nack",
    );
    raw.expect_health();

    // Exactly the acked records were stored, within the budget.
    let recs = d.read_all_records();
    assert_eq!(recs.len() as u64, acked, "records on disk vs records acked");
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r.payload[..], record(i as u64)[..], "record {i}");
    }
    let held: u64 = recs.iter().map(|r| r.payload.len() as u64 + 16).sum();
    assert!(
        held <= WAB_MAX,
        "{held} bytes of records in a {WAB_MAX}-byte WAB"
    );
    // The budget is for records: at least half of it must be usable.
    assert!(
        held >= WAB_MAX / 2,
        "Overloaded after only {acked} records ({held} bytes) of a {WAB_MAX}-byte WAB"
    );

    // The budget is rebuilt from disk on restart: still full.
    drop(client);
    drop(raw);
    let mut d = d;
    d.kill9();
    d.spawn();
    let mut client = d.client();
    match client.push(Tier::Sync, &record(999_995)) {
        Err(ClientError::Nack(NackReason::Overloaded)) => {}
        other => panic!("push into a full WAB after a restart: expected Overloaded, got {other:?}"),
    }
    client.health().unwrap();
    assert_eq!(d.read_all_records().len() as u64, acked);
}

#[test]
fn connections_max_closes_the_extra_connection_at_once() {
    // Eviction off: both holders may be idle long enough to be evicted on a
    // slow machine; this test is about the refusal (idle_eviction.rs is
    // about eviction).
    let d = Daemon::start("[server]\nconnections_max = 2\nevict_idle_connections = false\n");
    let mut c1 = connect_healthy(&d);
    let mut c2 = connect_healthy(&d);

    let mut c3 = d.raw();
    // Whether the write lands before the close or not, nothing is answered.
    let _ = c3.try_send(&health_frame());
    c3.expect_closed_within(Duration::from_secs(5));

    c1.push(Tier::Sync, b"c1-after-refusal").unwrap();
    c2.push(Tier::Sync, b"c2-after-refusal").unwrap();
    c1.health().unwrap();
    c2.health().unwrap();

    // Freeing a slot lets a new connection in.
    drop(c1);
    let mut c4 = connect_healthy(&d);
    c4.push(Tier::Sync, b"c4").unwrap();
    c2.push(Tier::Sync, b"c2-again").unwrap();
    let mut got = texts(&d.read_all_records());
    got.sort();
    assert_eq!(
        got,
        ["c1-after-refusal", "c2-after-refusal", "c2-again", "c4"]
    );
}

#[test]
fn stalled_frame_is_closed_after_the_read_timeout_while_others_are_served() {
    let d = Daemon::start("[server]\nconnection_read_timeout_ms = 300\n");
    let mut idle = d.raw();
    let mut good = d.client();
    good.health().unwrap();

    let mut slow = d.raw();
    let started = Instant::now();
    slow.send(&push_frame(Tier::Sync, b"never finished")[..10]);
    let watcher = thread::spawn(move || {
        slow.expect_closed_within(Duration::from_secs(10));
        started.elapsed()
    });
    let mut acked = 0;
    while !watcher.is_finished() {
        good.push(Tier::Sync, format!("good-{acked}").as_bytes())
            .expect("the other connection keeps getting acks");
        acked += 1;
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the stalled connection was never closed"
        );
    }
    let closed_after = watcher
        .join()
        .expect("the stalled connection must be closed");
    assert!(
        closed_after >= Duration::from_millis(250),
        "closed after {closed_after:?}, before the 300 ms timeout"
    );
    assert!(
        closed_after <= Duration::from_secs(2),
        "a 10-byte stall was closed only after {closed_after:?}"
    );
    assert!(
        acked > 0,
        "no push was acked on the other connection meanwhile"
    );
    good.health().unwrap();

    // A connection that has not started a frame is not subject to the timeout.
    thread::sleep(Duration::from_millis(800).saturating_sub(started.elapsed()));
    idle.expect_health();

    let recs = texts(&d.read_all_records());
    assert_eq!(
        recs,
        (0..acked).map(|i| format!("good-{i}")).collect::<Vec<_>>()
    );
    assert!(!recs.iter().any(|r| r.contains("never")));
}

#[test]
fn read_timeout_applies_to_each_frame_not_to_a_busy_connection() {
    // server.connection_read_timeout_ms: "A frame that has started must be
    // complete within this." Here every frame completes within ~80 ms, but
    // each write ends part-way into the next frame, so the daemon's buffer
    // is never empty. The connection must not be closed.
    let d = Daemon::start("[server]\nconnection_read_timeout_ms = 300\n");
    let mut c = d.raw();
    let frames: Vec<Vec<u8>> = (0..13)
        .map(|i| push_frame(Tier::Sync, format!("stream-{i:02}").as_bytes()))
        .collect();
    let half = frames[0].len() / 2;
    let started = Instant::now();
    c.send(&frames[0][..half]);
    let mut write_error = None;
    for i in 0..12 {
        thread::sleep(Duration::from_millis(80));
        let mut chunk = frames[i][half..].to_vec();
        chunk.extend_from_slice(&frames[i + 1][..half]);
        if let Err(e) = c.try_send(&chunk) {
            write_error = Some(format!("write {i} after {:?}: {e}", started.elapsed()));
            break;
        }
    }
    if write_error.is_none() {
        thread::sleep(Duration::from_millis(80));
        if let Err(e) = c.try_send(&frames[12][half..]) {
            write_error = Some(format!("last write after {:?}: {e}", started.elapsed()));
        }
    }
    let mut answers = 0;
    for i in 0..13 {
        match c.read_frame_within(Duration::from_secs(5)) {
            ReadOutcome::Frame(f) => {
                assert_eq!(f, expected_ack(), "answer {i}");
                answers += 1;
            }
            other => panic!(
                "frame {i}: expected an Ack, got {other:?}: the daemon closed a connection whose every frame \
                 completed within 80 ms of starting (write error: {write_error:?}); daemon log:\n{}",
                d.stderr()
            ),
        }
    }
    assert_eq!(answers, 13);
    assert!(write_error.is_none(), "{write_error:?}");
    c.expect_health();
}

#[test]
fn socket_is_0600_in_a_0700_folder_created_by_the_daemon() {
    let d = Daemon::configure("");
    let run_dir = d.socket_path().parent().unwrap().to_path_buf();
    assert!(
        !run_dir.exists(),
        "the test must leave the socket folder to the daemon"
    );
    let mut d = d;
    d.spawn();
    let meta = fs::symlink_metadata(d.socket_path()).unwrap();
    assert!(
        meta.file_type().is_socket(),
        "{} is not a socket",
        d.socket_path().display()
    );
    assert_eq!(mode_of(d.socket_path()), 0o600, "socket mode");
    assert_eq!(mode_of(&run_dir), 0o700, "socket folder mode");
    // Directories 0700, files 0600 in the data folder too.
    d.client().push(Tier::Sync, b"x").unwrap();
    assert_eq!(mode_of(d.data_dir()), 0o700, "data dir mode");
    for (_, shard) in d.shard_dirs() {
        assert_eq!(mode_of(&shard), 0o700, "{} mode", shard.display());
        for entry in fs::read_dir(&shard).unwrap() {
            let path = entry.unwrap().path();
            let want = if path.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode_of(&path), want, "{} mode", path.display());
        }
    }
}

#[test]
fn stale_socket_file_is_replaced() {
    let mut d = Daemon::configure("");
    let run_dir = d.socket_path().parent().unwrap().to_path_buf();
    fs::create_dir(&run_dir).unwrap();
    fs::set_permissions(&run_dir, fs::Permissions::from_mode(0o700)).unwrap();
    // A listener bound and abandoned: the file stays, nobody accepts.
    drop(UnixListener::bind(d.socket_path()).unwrap());
    assert!(fs::symlink_metadata(d.socket_path())
        .unwrap()
        .file_type()
        .is_socket());
    assert!(
        UnixStream::connect(d.socket_path()).is_err(),
        "the stale socket must refuse connections"
    );

    d.spawn();
    let mut c = d.client();
    c.health().unwrap();
    c.push(Tier::Sync, b"after-stale").unwrap();
    assert_eq!(mode_of(d.socket_path()), 0o600);
    assert_eq!(texts(&d.read_all_records()), ["after-stale"]);
}

#[test]
fn a_file_that_is_not_a_socket_is_not_replaced() {
    let d = Daemon::configure("");
    let run_dir = d.socket_path().parent().unwrap().to_path_buf();
    fs::create_dir(&run_dir).unwrap();
    fs::write(d.socket_path(), b"precious").unwrap();
    let out = d.run_to_exit(Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "started on top of a regular file: {out:?}"
    );
    assert!(
        out.stderr.contains(&d.socket_path().display().to_string()),
        "{}",
        out.stderr
    );
    assert_eq!(fs::read(d.socket_path()).unwrap(), b"precious");
}

#[test]
fn second_daemon_on_a_live_socket_fails_and_leaves_the_first_alone() {
    let first = Daemon::start("");
    let mut c = first.client();
    c.push(Tier::Sync, b"first").unwrap();

    let second = Daemon::configure(&format!(
        "[server]\nsocket_path = {:?}\n",
        first.socket_path().display().to_string()
    ));
    let out = second.run_to_exit(Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "a second daemon started on a live socket: {out:?}"
    );
    assert!(
        out.stderr.contains("already listening"),
        "stderr of the second daemon:\n{}",
        out.stderr
    );
    assert!(!out.stdout.contains("listening on"), "{}", out.stdout);

    // The first daemon still owns its socket and serves new connections.
    assert!(fs::symlink_metadata(first.socket_path())
        .unwrap()
        .file_type()
        .is_socket());
    c.push(Tier::Sync, b"first-after").unwrap();
    let mut fresh = first.client();
    fresh.health().unwrap();
    fresh.push(Tier::Sync, b"fresh").unwrap();
    let mut got = texts(&first.read_all_records());
    got.sort();
    assert_eq!(got, ["first", "first-after", "fresh"]);
}

#[test]
fn bad_configs_are_refused_naming_the_key() {
    let cases: &[(&str, &str)] = &[
        ("[server]\nbogus_key = 1\n", "bogus_key"),
        ("[bogus_section]\nx = 1\n", "bogus_section"),
        (
            "[wab]\nsegment_bytes_maxx = 1048576\n",
            "segment_bytes_maxx",
        ),
        ("[server]\nconnections_max = 0\n", "server.connections_max"),
        (
            "[server]\nconnection_read_timeout_ms = 50\n",
            "server.connection_read_timeout_ms",
        ),
        (
            "[server]\npayload_bytes_max = 16777217\n",
            "server.payload_bytes_max",
        ),
        (
            "[server]\ninflight_bytes_max = 1000\n",
            "server.inflight_bytes_max",
        ),
        ("[server]\nshards = \"four\"\n", "shards"),
        ("[wab]\nsegment_bytes_max = 1000\n", "wab.segment_bytes_max"),
        ("[wab]\nwab_bytes_max = 2097152\n", "wab.wab_bytes_max"),
        (
            "[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 8388608\n",
            "wab.wab_bytes_max",
        ),
    ];
    for (overrides, key) in cases {
        let d = Daemon::configure(overrides);
        let out = d.run_to_exit(Duration::from_secs(20));
        assert!(
            !out.status.success(),
            "config {overrides:?} was accepted:\n{}",
            d.config_text()
        );
        assert!(
            out.stderr.contains(key),
            "config {overrides:?}: the error does not name {key:?}:\n{}",
            out.stderr
        );
        assert!(
            !d.socket_path().exists(),
            "config {overrides:?}: a socket was created"
        );
        assert!(!out.stdout.contains("listening"), "{}", out.stdout);
    }
}

#[test]
fn sigterm_exits_0_with_every_acked_record_on_disk() {
    let mut d = Daemon::start("");
    let modes = [
        Mode::Single(Tier::Sync),
        Mode::Single(Tier::Batched),
        Mode::Batch(Tier::Sync, 5),
        Mode::Single(Tier::Buffered),
    ];
    let ready = Arc::new(Barrier::new(modes.len() + 1));
    let handles: Vec<_> = modes
        .iter()
        .enumerate()
        .map(|(i, mode)| {
            let mut client = d.client();
            client.health().unwrap();
            let ready = ready.clone();
            let mode = *mode;
            thread::spawn(move || {
                ready.wait();
                produce(&mut client, &format!("t{i}"), mode, u64::MAX)
            })
        })
        .collect();
    ready.wait();
    thread::sleep(Duration::from_millis(250));
    d.terminate();
    let outcomes: Vec<ProducerOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        outcomes.iter().all(|o| !o.error.is_empty()),
        "every producer must have been stopped: {outcomes:?}"
    );
    assert!(
        outcomes.iter().map(|o| o.acked).sum::<u64>() > 0,
        "nothing was acked in 250 ms: {outcomes:?}"
    );
    let shards = d.read_shards();
    check_producers(&shards, &outcomes, "after SIGTERM");
    check_seqs(&shards, "after SIGTERM");
    assert!(
        !d.socket_path().exists(),
        "the socket file is left behind after a clean stop"
    );
}

#[test]
fn sigint_stops_gracefully_too() {
    let mut d = Daemon::start("");
    let mut c = d.client();
    for i in 0..20 {
        c.push(Tier::Sync, format!("int-{i}").as_bytes()).unwrap();
    }
    let status = d.stop_with(libc::SIGINT);
    assert!(
        status.success(),
        "exit after SIGINT: {status}; stderr:\n{}",
        d.stderr()
    );
    assert_eq!(
        texts(&d.read_all_records()),
        (0..20).map(|i| format!("int-{i}")).collect::<Vec<_>>()
    );
    // The client sees the connection end, not a hang.
    match c.push(Tier::Sync, b"after-stop") {
        Err(e) => assert!(is_disconnect(&e), "push after the daemon stopped: {e}"),
        Ok(()) => panic!("a push was acked by a daemon that has exited"),
    }
}
