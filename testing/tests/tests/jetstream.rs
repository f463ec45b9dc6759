//! The NATS JetStream sink against a real 3-node cluster on loopback
//! (testing/tests/src/nats.rs): records reach an R3 stream exactly once through a
//! leader's SIGKILL and through spillway's own SIGKILL (the stream's
//! duplicate window removes what is published again, by `Nats-Msg-Id`); a
//! server frozen by SIGSTOP is left for the others (and what it held is
//! dropped as a duplicate once it runs again); a
//! dead HTTP sink beside it costs the stream nothing; a missing stream, a
//! subject outside the stream, a refused credential and an oversized record
//! each give their error, the same in `check` and `run`.
//!
//! Under CI a cluster that cannot start fails the test; outside CI the test
//! skips with the reason.

use std::collections::HashMap;
use std::time::Duration;

use spillway_tests::nats::{Guard, NatsCluster, StoredMessage, TlsFiles};
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
const STREAM: &str = "EVENTS";
/// The stream's duplicate window: longer than any test's outage.
const WINDOW: Duration = Duration::from_secs(600);

fn nats_table(cluster: &NatsCluster, name: &str, extra: &str) -> String {
    format!(
        "[sinks.{name}]\ntype = \"nats\"\nservers = {}\nsubject = \"events.{{shard}}\"\nstream = \"{STREAM}\"\nretry_initial_ms = 50\nretry_max_ms = 500\nack_timeout_ms = 2000\nserver_sync_always = true\n{extra}",
        cluster.servers_toml()
    )
}

/// `n` records `"{tag}:{i}"`, pushed in batches of 1,000 at Sync.
fn push_many(d: &Daemon, tag: &str, n: usize) -> Vec<String> {
    let mut c = d.client();
    let all: Vec<String> = (0..n).map(|i| format!("{tag}:{i}")).collect();
    for chunk in all.chunks(1000) {
        c.push_batch(Tier::Sync, chunk)
            .unwrap_or_else(|e| panic!("pushing {tag} records: {e}"));
    }
    all
}

/// Every payload in `sent` is in the stream exactly once, and nothing else
/// is (a payload stored twice, or missing, is named).
fn assert_exactly_once(stored: &[StoredMessage], sent: &[String]) {
    let mut count: HashMap<&[u8], usize> = HashMap::new();
    for m in stored {
        *count.entry(m.payload.as_slice()).or_default() += 1;
    }
    let twice: Vec<String> = count
        .iter()
        .filter(|(_, n)| **n > 1)
        .take(5)
        .map(|(p, n)| format!("{} x{n}", String::from_utf8_lossy(p)))
        .collect();
    assert!(twice.is_empty(), "stored more than once: {twice:?}");
    let missing: Vec<&String> = sent
        .iter()
        .filter(|p| !count.contains_key(p.as_bytes()))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "never stored: {missing:?}");
    assert_eq!(stored.len(), sent.len(), "the stream holds other messages");
    if let Some(m) = stored.iter().find(|m| m.msg_id.is_none()) {
        panic!("a message without Nats-Msg-Id: {m:?}");
    }
}

/// A 3-node cluster with the R3 stream `STREAM` (`None`: skipped, said
/// why, outside CI).
fn r3_cluster() -> Option<NatsCluster> {
    let cluster = NatsCluster::start(3)?;
    cluster.create_stream(STREAM, &["events.>"], 3, WINDOW);
    Some(cluster)
}

/// A daemon with two shards and a NATS sink into `STREAM` (`extra`: more
/// keys of its table).
fn two_shards_into_the_stream(cluster: &NatsCluster, extra: &str) -> Daemon {
    Daemon::start(&format!(
        "[server]\nshards = 2\n{}",
        nats_table(cluster, "stream", extra)
    ))
}

fn wait_for_stream(cluster: &NatsCluster, d: &Daemon, n: u64) {
    if wait_until(DELIVERY_TIMEOUT, || cluster.stream_messages(STREAM) >= n) {
        return;
    }
    let log = d.stderr();
    let tail: Vec<&str> = log.lines().rev().take(30).collect();
    panic!(
        "the stream has {} of {n} messages; ctl health:\n{}\nthe daemon's last log lines:\n{}",
        cluster.stream_messages(STREAM),
        d.health(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

/// 100,000 records into an R3 stream; its leader SIGKILLed mid-delivery,
/// then started again on its store: delivery resumes by itself, and the
/// stream holds every record once.
#[test]
fn a_leader_killed_mid_delivery_loses_nothing_and_stores_nothing_twice() {
    let Some(mut cluster) = r3_cluster() else {
        return;
    };
    let d = two_shards_into_the_stream(&cluster, "");
    let mut sent = push_many(&d, "lead", 50_000);
    // Mid-delivery: some, not all, of the first half is in.
    assert!(wait_until(DELIVERY_TIMEOUT, || cluster
        .stream_messages(STREAM)
        >= 5_000));
    let leader = cluster
        .stream_leader(STREAM)
        .expect("the stream has a leader");
    cluster.kill(leader);
    sent.extend(push_many(&d, "during", 50_000));
    // The remaining two elect a leader; delivery resumes without help.
    wait_for_stream(&cluster, &d, sent.len() as u64);
    cluster.restart(leader);
    let stored = cluster.read_stream(STREAM);
    assert_exactly_once(&stored, &sent);
    let health = d.health();
    assert!(
        health.ends_with("\nready\n"),
        "the sink did not recover:\n{health}"
    );
}

/// How long delivery may stay stopped by a frozen server: two PubAck
/// timeouts of 2 s, a backoff and a connect take about 5 s; the 60 s leave
/// room for a loaded machine and a stream leader election, and are half
/// the two minutes async-nats alone took at best to give up on the frozen
/// server (three unanswered pings 60 s apart, postponed by every publish).
const RESUME_BOUND: Duration = Duration::from_secs(60);

/// The server the sink is connected to SIGSTOPped (a frozen VM) while
/// records are pushed: the sink leaves it for the other two within
/// [`RESUME_BOUND`] and delivers everything while it is still frozen; once
/// it runs again (SIGCONT, and the publishes it held are processed) the
/// stream holds every acknowledged record once.
#[test]
fn a_frozen_server_is_left_for_the_others_and_nothing_is_stored_twice() {
    let Some(mut cluster) = r3_cluster() else {
        return;
    };
    let d = two_shards_into_the_stream(&cluster, "");
    let mut sent = push_many(&d, "before", 5_000);
    wait_for_stream(&cluster, &d, sent.len() as u64);
    // The sink's one connection, named spillway/<version>.
    let mut on = Vec::new();
    assert!(
        wait_until(DELIVERY_TIMEOUT, || {
            on = cluster.nodes_with_client("spillway/");
            on.len() == 1
        }),
        "the sink is connected to {on:?}, not to one node"
    );
    let frozen = on[0];
    cluster.freeze(frozen);
    let frozen_at = std::time::Instant::now();
    sent.extend(push_many(&d, "frozen", 5_000));
    let others = cluster.client();
    let mut stored = 0;
    while frozen_at.elapsed() < RESUME_BOUND {
        stored = cluster.messages_via(&others, STREAM).unwrap_or(stored);
        if stored >= sent.len() as u64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = frozen_at.elapsed();
    eprintln!("node {frozen} frozen: every record delivered through the others {took:?} after the SIGSTOP");
    for line in d.stderr().lines().filter(|l| l.contains("nats sink")) {
        eprintln!("  {line}");
    }
    if stored < sent.len() as u64 {
        let log = d.stderr();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "{RESUME_BOUND:?} after node {frozen} was frozen the stream has {stored} of {} messages; the daemon's last log lines:\n{}",
            sent.len(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    assert!(
        d.stderr().contains("dropped that connection"),
        "delivery resumed, but the log does not say the sink left the frozen server:\n{}",
        d.stderr()
    );
    // The sink is on another node now.
    let now_on = cluster.nodes_with_client("spillway/");
    assert!(
        !now_on.is_empty() && !now_on.contains(&frozen),
        "the sink is connected to {now_on:?}"
    );
    cluster.resume(frozen);
    // Running again: it answers its monitoring endpoint; then give the
    // publishes it held (the dropped connection's) time to reach the
    // stream, where a second copy would show.
    assert!(wait_until(DELIVERY_TIMEOUT, || cluster
        .connection_names(frozen)
        .is_ok()));
    std::thread::sleep(Duration::from_secs(3));
    sent.extend(push_many(&d, "after", 1_000));
    wait_for_stream(&cluster, &d, sent.len() as u64);
    assert_exactly_once(&cluster.read_stream(STREAM), &sent);
}

/// spillway SIGKILLed mid-delivery and started again: what it publishes
/// again is removed by the stream (same message ids: the instance id in
/// the data folder survives), and nothing is lost.
#[test]
fn a_sigkill_of_spillway_mid_delivery_stores_every_record_once() {
    let Some(cluster) = r3_cluster() else {
        return;
    };
    let mut d = two_shards_into_the_stream(&cluster, "batches_in_flight = 4\n");
    let id_file = d.data_dir().join("instance-id");
    let id = std::fs::read_to_string(&id_file).expect("the instance id file");
    let mut sent = push_many(&d, "before", 30_000);
    assert!(wait_until(DELIVERY_TIMEOUT, || cluster
        .stream_messages(STREAM)
        >= 3_000));
    d.kill9();
    // Published but not in a cursor file: what the restart publishes again
    // (the stream must drop it as a duplicate).
    let confirmed: u64 = (0..2)
        .map(|shard| {
            let dir = d.data_dir().join(format!("shard-{shard:03}"));
            spillway_wab::read_checkpoint_file(&spillway_wab::FsStorage, &dir, "cursor-stream")
                .unwrap_or(0)
        })
        .sum();
    let in_stream = cluster.stream_messages(STREAM);
    eprintln!(
        "at the kill: {in_stream} messages in the stream, {confirmed} records in the cursor files: about {} to be published again",
        in_stream.saturating_sub(confirmed)
    );
    d.spawn();
    assert_eq!(
        std::fs::read_to_string(&id_file).unwrap(),
        id,
        "the instance id changed across a restart"
    );
    sent.extend(push_many(&d, "after", 5_000));
    wait_for_stream(&cluster, &d, sent.len() as u64);
    // Give a redelivery that would be stored twice the time to land.
    assert!(wait_until(DELIVERY_TIMEOUT, || {
        d.ctl(&["stats", "--flat"])
            .lines()
            .find_map(|l| l.strip_prefix("sink{sink=\"stream\"}.backlog_records "))
            .is_some_and(|v| v.trim() == "0")
    }));
    let stored = cluster.read_stream(STREAM);
    assert_exactly_once(&stored, &sent);
    let prefix = format!("{}:", id.trim());
    assert!(
        stored
            .iter()
            .all(|m| m.msg_id.as_deref().is_some_and(|i| i.starts_with(&prefix))),
        "a message id that does not start with the instance id"
    );
}

/// Issue 40: two daemons (two data folders, each numbering from 0) and
/// one made anew publish into one stream with its duplicate window: every
/// record of each is stored once (the message ids carry the instance id,
/// so one daemon's records are never the other's duplicates).
#[test]
fn two_daemons_and_a_recreated_folder_share_one_stream() {
    let Some(cluster) = r3_cluster() else {
        return;
    };
    let mut a = two_shards_into_the_stream(&cluster, "");
    let b = two_shards_into_the_stream(&cluster, "");
    let mut sent = push_many(&a, "a", 2_000);
    sent.extend(push_many(&b, "b", 2_000));
    wait_for_stream(&cluster, &a, sent.len() as u64);
    a.terminate();
    std::fs::remove_dir_all(a.data_dir()).unwrap();
    a.spawn();
    sent.extend(push_many(&a, "a2", 2_000));
    wait_for_stream(&cluster, &a, sent.len() as u64);
    for d in [&a, &b] {
        assert!(wait_until(DELIVERY_TIMEOUT, || {
            d.ctl(&["stats", "--flat"])
                .lines()
                .find_map(|l| l.strip_prefix("sink{sink=\"stream\"}.backlog_records "))
                .is_some_and(|v| v.trim() == "0")
        }));
    }
    assert_exactly_once(&cluster.read_stream(STREAM), &sent);
}

/// The stream and a dead HTTP sink at once: the stream gets everything
/// while the HTTP receiver answers 503.
#[test]
fn a_dead_http_sink_beside_it_costs_the_stream_nothing() {
    let Some(cluster) = r3_cluster() else {
        return;
    };
    let http = HttpReceiver::start();
    http.set_status(503);
    let d = Daemon::start(&format!(
        "[server]\nshards = 2\n{}[sinks.web]\ntype = \"http\"\nurl = \"{}\"\nretry_initial_ms = 50\nretry_max_ms = 300\n",
        nats_table(&cluster, "stream", ""),
        http.url()
    ));
    let sent = push_many(&d, "fan", 20_000);
    wait_for_stream(&cluster, &d, sent.len() as u64);
    assert_eq!(http.accepted_records().len(), 0);
    let stored = cluster.read_stream(STREAM);
    assert_exactly_once(&stored, &sent);

    // `ctl sink tail`: the stream's newest messages, read back by spillway
    // itself (no `nats` CLI), each with the record it is.
    let tail = d.ctl(&["sink", "tail", "stream", "--limit", "3"]);
    let lines: Vec<&str> = tail.lines().collect();
    assert_eq!(lines.len(), 3, "{tail}");
    for (i, (line, m)) in lines.iter().zip(&stored[stored.len() - 3..]).enumerate() {
        let seq = stored.len() - 2 + i;
        let payload = String::from_utf8_lossy(&m.payload);
        assert!(
            line.starts_with(&format!("{STREAM}:{seq} {} ", m.subject))
                && line.ends_with(&format!(" {payload}")),
            "{line:?} against stream seq {seq}, {m:?}"
        );
        // The record's identity, from the message's own headers.
        let id = line.split(' ').nth(2).unwrap();
        let (shard, seq) = id.split_once(':').unwrap();
        assert!(
            shard.parse::<u32>().is_ok_and(|s| s < 2) && seq.parse::<u64>().is_ok(),
            "{line}"
        );
    }
    let json = d.ctl(&["--json", "sink", "tail", "stream", "--limit", "2"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["records"].as_array().unwrap().len(), 2, "{json}");
    assert_eq!(
        v["records"][1]["payload"].as_str().map(str::as_bytes),
        Some(stored.last().unwrap().payload.as_slice())
    );
    assert!(v["records"][1]["seq"].is_u64(), "{json}");
    // The HTTP sink cannot be read back: said so, exit 1.
    let refused = run_spillway(
        &[
            "ctl".as_ref(),
            "--config".as_ref(),
            d.config_path().as_os_str(),
            "sink".as_ref(),
            "tail".as_ref(),
            "web".as_ref(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("reads back only nats sinks"),
        "{refused:?}"
    );
    http.set_status(200);
    http.wait_for_payloads(&sent, DELIVERY_TIMEOUT);
}

/// A missing stream, a subject outside the stream, an unset and a refused
/// credential: `check` and `run` both refuse, naming the key; an oversized
/// record is dead-lettered with the server's limit in its reason.
#[test]
fn bad_streams_subjects_credentials_and_records_each_get_their_error() {
    let Some(cluster) = r3_cluster() else {
        return;
    };
    let servers = cluster.servers_toml();
    check_and_run_refuse(
        &format!("[sinks.js]\ntype = \"nats\"\nservers = {servers}\nsubject = \"events.a\"\nstream = \"NOPE\"\n"),
        &[],
        "sinks.js.stream: no stream \"NOPE\"",
    );
    check_and_run_refuse(
        &format!("[sinks.js]\ntype = \"nats\"\nservers = {servers}\nsubject = \"logs.{{shard}}\"\nstream = \"{STREAM}\"\n"),
        &[],
        "sinks.js.subject: \"logs.{shard}\" is not a subject of stream \"EVENTS\"",
    );
    check_and_run_refuse(
        &format!("[sinks.js]\ntype = \"nats\"\nservers = {servers}\nsubject = \"events.a\"\ntoken_env = \"SPILLWAY_TEST_UNSET_TOKEN\"\n"),
        &[],
        "sinks.js.token_env: the environment variable SPILLWAY_TEST_UNSET_TOKEN is not set",
    );
    // A server that wants a token refuses a wrong one.
    let guarded = NatsCluster::start_with(
        1,
        Guard {
            token: Some("right-token".into()),
            tls: None,
        },
    )
    .expect("a server with a token");
    let table = format!(
        "[sinks.js]\ntype = \"nats\"\nservers = {}\nsubject = \"events.a\"\ntoken_env = \"SPILLWAY_TEST_NATS_TOKEN\"\n",
        guarded.servers_toml()
    );
    check_and_run_refuse(
        &table,
        &[("SPILLWAY_TEST_NATS_TOKEN", "wrong-token")],
        "sinks.js.token_env: the servers refused the credentials",
    );
    // The right one is taken.
    let mut ok = Daemon::configure(&table);
    ok.spawn_with(|c| {
        c.env("SPILLWAY_TEST_NATS_TOKEN", "right-token");
    });
    ok.terminate();

    // A record over the server's max_payload (1 MiB by default).
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}",
        nats_table(&cluster, "js", "batch_bytes_max = 4194304\n")
    ));
    let mut c = d.client();
    c.push(Tier::Sync, &vec![b'x'; 2 << 20]).unwrap();
    c.push(Tier::Sync, b"small").unwrap();
    wait_for_stream(&cluster, &d, 1);
    assert!(
        wait_until(DELIVERY_TIMEOUT, || d
            .ctl(&["--json", "dead-letter", "list", "--sink", "js"])
            .contains("max_payload")),
        "the oversized record was not dead-lettered with the server's limit:\n{}",
        d.ctl(&["dead-letter", "list", "--sink", "js"])
    );
}

/// A stream with one replica and a duplicate window shorter than the
/// sink's retry horizon: the sink starts and says both, and that a PubAck
/// may not be durable on the server.
#[test]
fn a_weak_stream_is_warned_about_at_start() {
    let Some(cluster) = NatsCluster::start(3) else {
        return;
    };
    cluster.create_stream("WEAK", &["weak.>"], 1, Duration::from_secs(30));
    let mut d = Daemon::configure(&format!(
        "[sinks.js]\ntype = \"nats\"\nservers = {}\nsubject = \"weak.{{shard}}\"\nstream = \"WEAK\"\nretry_duration_max_ms = 600000\n",
        cluster.servers_toml()
    ));
    d.spawn();
    let sent = push_many(&d, "weak", 10);
    assert!(wait_until(DELIVERY_TIMEOUT, || cluster
        .stream_messages("WEAK")
        >= 10));
    d.terminate();
    let log = d.stderr();
    for want in [
        "removes duplicates within 30 s, shorter than this sink may retry a batch (retry_duration_max_ms = 600000)",
        "has 1 replica",
        "sync_interval: always",
    ] {
        assert!(log.contains(want), "no warning {want:?} in:\n{log}");
    }
    // Said once, in one line: what to change.
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("things to change"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("sinks.js: 3 things to change: (1) "),
        "{}",
        lines[0]
    );
    let stored = cluster.read_stream("WEAK");
    assert_eq!(stored.len(), sent.len());
}

/// A server that speaks only TLS, its certificate signed by a CA of the
/// test's own: with `ca_file` the sink verifies it and delivers; the
/// `tls://` URL alone (the system's roots) cannot.
#[test]
fn tls_servers_are_verified_against_ca_file() {
    let certs = tempfile::tempdir().unwrap();
    let tls = match TlsFiles::make(certs.path()) {
        Ok(t) => t,
        Err(why) if !in_ci() => {
            eprintln!("SKIPPED: cannot make test certificates: {why}");
            return;
        }
        Err(why) => panic!("cannot make test certificates under CI: {why}"),
    };
    let Some(cluster) = NatsCluster::start_with(
        1,
        Guard {
            token: None,
            tls: Some(tls.clone()),
        },
    ) else {
        return;
    };
    cluster.create_stream(STREAM, &["events.>"], 1, WINDOW);
    let table = |ca: &str| {
        format!(
            "[server]\nshards = 1\n[sinks.js]\ntype = \"nats\"\nservers = {}\nsubject = \"events.{{shard}}\"\nstream = \"{STREAM}\"\n{ca}",
            cluster.servers_toml()
        )
    };
    let d = Daemon::start(&table(&format!("ca_file = \"{}\"\n", tls.ca.display())));
    let sent = push_many(&d, "tls", 100);
    wait_for_stream(&cluster, &d, 100);
    assert_exactly_once(&cluster.read_stream(STREAM), &sent);
    drop(d);
    // Without the CA the server's certificate is not trusted.
    let mut untrusted = Daemon::configure(&table(""));
    let check = std::process::Command::new(spillway_bin())
        .arg("check")
        .arg(untrusted.config_path())
        .output()
        .expect("running spillway check");
    let said = String::from_utf8_lossy(&check.stderr).to_string()
        + &String::from_utf8_lossy(&check.stdout);
    assert!(
        said.to_lowercase().contains("tls") || said.to_lowercase().contains("certificate"),
        "check said nothing of the untrusted certificate:\n{said}"
    );
    // `run` agrees with `check`: it refuses as check did, or it starts as
    // check warned, and then nothing reaches the untrusted server.
    match untrusted.run_to_exit_or_start(Duration::from_secs(30)) {
        StartOrExit::Exited(run) => assert!(
            !check.status.success() && !run.status.success(),
            "run refused but check passed:\n{}",
            run.stderr
        ),
        StartOrExit::Started => {
            assert!(
                check.status.success(),
                "check refused but run started:\n{said}"
            );
            push_many(&untrusted, "untrusted", 10);
            std::thread::sleep(Duration::from_secs(2));
            assert_eq!(
                cluster.stream_messages(STREAM),
                100,
                "records reached a server whose certificate was not verified"
            );
        }
    }
}
