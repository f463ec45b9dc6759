//! The Kafka sink against a real 3-node Kafka 4.4 KRaft cluster on
//! loopback (testing/test-kafka): a `read_committed` consumer sees every
//! acknowledged Sync record exactly once, in order per shard, through the
//! partition leader's SIGKILL, spillway's SIGKILL, and both, in a loop;
//! the offsets topic behind, ahead of and deleted under the local
//! checkpoint; a missing topic, a record over the topic's
//! `max.message.bytes`, a broker down at start and a reload from an HTTP
//! sink to Kafka and back; `ctl sink tail` reading the topic back.
//!
//! Under CI a cluster that cannot start fails the test; outside CI (no
//! Java, no jars: `.ci/kafka.sh` fetches them) the test skips with the
//! reason.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use spillway_tests::kafka::{Guard, KafkaCluster, SaslUser, StoredMessage, TlsFiles};
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

const DELIVERY_TIMEOUT: Duration = Duration::from_secs(180);
const TOPIC: &str = "events";

fn kafka_table(cluster: &KafkaCluster, name: &str, extra: &str) -> String {
    format!(
        "[sinks.{name}]\ntype = \"kafka\"\nbrokers = [{}]\ntopic = \"{TOPIC}\"\nretry_initial_ms = 50\nretry_max_ms = 1000\ntransaction_timeout_ms = 20000\n{extra}",
        cluster
            .bootstrap()
            .split(',')
            .map(|b| format!("\"{b}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// A 3-node cluster with `TOPIC` (3 partitions, replication 3,
/// min.insync.replicas 2). `None`: skipped, said why, outside CI.
fn cluster() -> Option<KafkaCluster> {
    let cluster = KafkaCluster::start(3)?;
    cluster.create_topic(TOPIC, 3, 3, &[("min.insync.replicas", "2")]);
    Some(cluster)
}

/// `n` records `"{tag}:{i}"`, pushed in batches of 500 at Sync.
fn push_many(d: &Daemon, tag: &str, n: usize) -> Vec<String> {
    let mut c = d.client();
    let all: Vec<String> = (0..n).map(|i| format!("{tag}:{i}")).collect();
    for chunk in all.chunks(500) {
        c.push_batch(Tier::Sync, chunk)
            .unwrap_or_else(|e| panic!("pushing {tag} records: {e}"));
    }
    all
}

/// A sink's counter from `ctl stats --flat`.
fn stat(d: &Daemon, sink: &str, key: &str) -> Option<u64> {
    let prefix = format!("sink{{sink=\"{sink}\"}}.{key} ");
    d.ctl(&["stats", "--flat"])
        .lines()
        .find_map(|l| {
            l.strip_prefix(prefix.as_str())
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
}

/// Waits until the sink has nothing left to deliver.
fn wait_drained(d: &Daemon, sink: &str) {
    if wait_until(DELIVERY_TIMEOUT, || {
        stat(d, sink, "backlog_records") == Some(0)
    }) {
        return;
    }
    let log = d.stderr();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    panic!(
        "sink {sink} still has a backlog; ctl health:\n{}\nthe daemon's last log lines:\n{}",
        d.health(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

/// Every payload of `sent` is in the committed messages exactly once,
/// nothing else is, and each shard's records are in seq order on their
/// partition (the key is the shard).
fn assert_exactly_once_in_order(stored: &[StoredMessage], sent: &[String]) {
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
    assert!(twice.is_empty(), "written more than once: {twice:?}");
    let missing: Vec<&String> = sent
        .iter()
        .filter(|p| !count.contains_key(p.as_bytes()))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "never written ({} of {}): {missing:?}",
        sent.iter()
            .filter(|p| !count.contains_key(p.as_bytes()))
            .count(),
        sent.len()
    );
    assert_eq!(stored.len(), sent.len(), "the topic holds other messages");
    // Per shard: one partition, seqs rising with the offsets.
    let mut last: BTreeMap<u32, (i32, u64)> = BTreeMap::new();
    let mut by_offset: Vec<&StoredMessage> = stored.iter().collect();
    by_offset.sort_by_key(|m| (m.partition, m.offset));
    for m in by_offset {
        let shard: u32 = m
            .header("spillway-shard")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no spillway-shard header: {m:?}"));
        let seq: u64 = m
            .header("spillway-seq")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no spillway-seq header: {m:?}"));
        assert!(
            m.header("spillway-arrival-unix-us")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some(),
            "no spillway-arrival-unix-us header: {m:?}"
        );
        assert_eq!(m.key.as_deref(), Some(shard.to_string().as_bytes()));
        if let Some((partition, prev)) = last.get(&shard) {
            assert_eq!(*partition, m.partition, "shard {shard} on two partitions");
            assert!(
                seq > *prev,
                "shard {shard}: seq {seq} after {prev} (partition {}, offset {})",
                m.partition,
                m.offset
            );
        }
        last.insert(shard, (m.partition, seq));
    }
}

/// Ten cycles (and more with `SPILLWAY_KAFKA_CYCLES`), each pushing
/// records while the sink delivers and then killing, in turn, the leader
/// of a partition the shards write to, spillway itself, or both at once:
/// a read_committed consumer sees every acknowledged record once, in order
/// per shard.
#[test]
fn exactly_once_through_leader_and_spillway_kills_in_a_loop() {
    let Some(mut cluster) = cluster() else {
        return;
    };
    let cycles: usize = std::env::var("SPILLWAY_KAFKA_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 2\n{}",
        kafka_table(&cluster, "k", "batch_records_max = 200\n")
    ));
    let mut sent = Vec::new();
    for cycle in 0..cycles {
        let before = stat(&d, "k", "delivered_records").unwrap_or(0);
        sent.extend(push_many(&d, &format!("c{cycle}"), 3_000));
        // Mid-delivery: some of this cycle's records are out.
        assert!(
            wait_until(DELIVERY_TIMEOUT, || stat(&d, "k", "delivered_records")
                .is_some_and(|n| n >= before + 200)),
            "cycle {cycle}: nothing delivered; health:\n{}",
            d.health()
        );
        let kill_leader = cycle % 3 != 1;
        let kill_spillway = cycle % 3 != 0;
        let mut killed = None;
        if kill_leader {
            let leader = cluster
                .leader(TOPIC, (cycle % 3) as i32)
                .expect("the partition has a leader");
            cluster.kill(leader);
            killed = Some(leader);
        }
        if kill_spillway {
            d.kill9();
            d.spawn();
        }
        if let Some(node) = killed {
            // Delivery goes on without the node for a while.
            sent.extend(push_many(&d, &format!("c{cycle}-down"), 500));
            cluster.restart(node);
        }
    }
    wait_drained(&d, "k");
    let stored = cluster.read(TOPIC, true);
    assert_exactly_once_in_order(&stored, &sent);
    let log = d.stderr();
    assert!(
        log.contains("resumes after seq"),
        "no restart read the committed position back:\n{log}"
    );
}

/// The offsets topic against the local checkpoint:
/// - ahead (the cursor files rolled back, as after a crash between the
///   commit and the checkpoint): what the position covers is confirmed
///   without being written again;
/// - behind (a position older than the checkpoint): the sink resumes from
///   the checkpoint and says so; nothing is written twice;
/// - deleted: the sink creates it again and resumes from the checkpoint,
///   saying that the shard has no position.
#[test]
fn the_offsets_topic_ahead_of_behind_and_deleted_under_the_checkpoint() {
    let Some(cluster) = cluster() else {
        return;
    };
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}",
        kafka_table(&cluster, "k", "")
    ));
    let mut sent = push_many(&d, "first", 2_000);
    wait_drained(&d, "k");
    d.terminate();
    let last_seq = cluster
        .read(TOPIC, true)
        .iter()
        .filter_map(|m| m.header("spillway-seq")?.parse::<u64>().ok())
        .max()
        .expect("records in the topic");

    // Ahead: the cursor file says nothing was delivered.
    let shard = d.data_dir().join("shard-000");
    let cursor = shard.join("cursor-k");
    assert!(cursor.exists(), "no cursor file at {}", cursor.display());
    std::fs::remove_file(&cursor).unwrap();
    d.reconfigure(&format!(
        "[server]\nshards = 1\n{}",
        kafka_table(&cluster, "k", "start = \"oldest\"\n")
    ));
    d.spawn();
    sent.extend(push_many(&d, "second", 500));
    wait_drained(&d, "k");
    assert_exactly_once_in_order(&cluster.read(TOPIC, true), &sent);
    let log = d.stderr();
    assert!(
        log.contains(&format!("shard 0 resumes after seq {last_seq}")),
        "the restart did not resume after the committed position:\n{log}"
    );
    d.terminate();

    // Deleted: the position is gone; the sink makes the topic again and
    // resumes from its checkpoint.
    cluster.delete_topic("spillway-offsets");
    d.spawn();
    sent.extend(push_many(&d, "third", 500));
    wait_drained(&d, "k");
    assert_exactly_once_in_order(&cluster.read(TOPIC, true), &sent);
    let log = d.stderr();
    assert!(
        log.contains("created the offsets topic") && log.contains("has no position in"),
        "the deleted offsets topic was not made again and said so:\n{log}"
    );
    d.terminate();

    // Behind: an older position than the checkpoint (as a restored or
    // truncated offsets topic would hold).
    let id = std::fs::read_to_string(d.data_dir().join("instance-id")).unwrap();
    let key = format!("spillway-{}-k-0", id.trim());
    // The sink's partition of a key: CRC-32 of the key, modulo the 5
    // partitions of the offsets topic it created.
    let partition = (crc32fast::hash(key.as_bytes()) % 5) as i32;
    cluster.produce(
        "spillway-offsets",
        partition,
        key.as_bytes(),
        br#"{"seq":10}"#,
    );
    d.spawn();
    sent.extend(push_many(&d, "fourth", 500));
    wait_drained(&d, "k");
    assert_exactly_once_in_order(&cluster.read(TOPIC, true), &sent);
    let log = d.stderr();
    assert!(
        log.contains("behind the first record offered"),
        "the position behind the checkpoint was not reported:\n{log}"
    );
}

/// A missing topic is refused by `check` and `run`, naming `topic`; a good
/// config's check reports the topic's shape, transactions and a weak
/// topic; a record over the topic's `max.message.bytes` is dead-lettered
/// with the topic's limit while the records around it are written (in
/// one batch: the broker would refuse their produce batch whole).
#[test]
fn check_reports_the_cluster_and_a_record_too_large_is_dead_lettered() {
    let Some(cluster) = cluster() else {
        return;
    };
    check_and_run_refuse(
        &kafka_table(&cluster, "k", "").replace("topic = \"events\"", "topic = \"nope\""),
        &[],
        "sinks.k.topic: the cluster",
    );
    cluster.create_topic("weak", 1, 1, &[]);
    let d = Daemon::configure(&kafka_table(&cluster, "k", ""));
    let check = std::process::Command::new(spillway_bin())
        .arg("check")
        .arg(d.config_path())
        .env("NO_COLOR", "1")
        .output()
        .expect("running spillway check");
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(check.status.success(), "check failed:\n{out}");
    for want in [
        "topic \"events\": 3 partitions, replication 3, min.insync.replicas 2",
        "transactions: this client may run them",
    ] {
        assert!(out.contains(want), "check does not say {want:?}:\n{out}");
    }
    let weak = Daemon::configure(
        &kafka_table(&cluster, "k", "").replace("topic = \"events\"", "topic = \"weak\""),
    );
    let check = std::process::Command::new(spillway_bin())
        .arg("check")
        .arg(weak.config_path())
        .env("NO_COLOR", "1")
        .output()
        .expect("running spillway check");
    let out = String::from_utf8_lossy(&check.stderr).to_string()
        + &String::from_utf8_lossy(&check.stdout);
    assert!(
        out.contains("has replication 1"),
        "check does not warn of a topic with one replica:\n{out}"
    );

    // A topic that takes at most 10,000-byte messages.
    cluster.create_topic(
        "small",
        3,
        3,
        &[("max.message.bytes", "10000"), ("min.insync.replicas", "2")],
    );
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}",
        kafka_table(&cluster, "k", "").replace("topic = \"events\"", "topic = \"small\"")
    ));
    let mut c = d.client();
    c.push(Tier::Sync, b"before").unwrap();
    c.push(Tier::Sync, &vec![b'x'; 50_000]).unwrap();
    c.push(Tier::Sync, b"after").unwrap();
    wait_drained(&d, "k");
    let dead = d.ctl(&["--json", "dead-letter", "list", "--sink", "k"]);
    assert!(
        dead.contains(
            "a record of 50000 bytes is over the largest message the topic takes (10000 bytes"
        ),
        "the oversized record was not dead-lettered with the topic's limit:\n{dead}"
    );
    let stored = cluster.read("small", true);
    let payloads: Vec<String> = stored
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(
        payloads,
        ["before", "after"],
        "the records around the refused one; uncommitted: {:?}; the daemon's log:\n{}",
        cluster
            .read("small", false)
            .iter()
            .map(|m| m.payload.len())
            .collect::<Vec<_>>(),
        d.stderr()
    );

    // `ctl sink tail`: the topic's committed records, read back by
    // spillway itself (the aborted attempts that held the refused record
    // are not shown), each with the record it is.
    let tail = d.ctl(&["sink", "tail", "k", "--limit", "5"]);
    let want: Vec<String> = stored
        .iter()
        .map(|m| {
            format!(
                "small/{}@{} 0:{} {}",
                m.partition,
                m.offset,
                m.header("spillway-seq").unwrap(),
                String::from_utf8_lossy(&m.payload)
            )
        })
        .collect();
    assert_eq!(tail.lines().collect::<Vec<_>>(), want, "{tail}");
    let json = d.ctl(&["--json", "sink", "tail", "k", "--limit", "1"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let records = v["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{json}");
    assert_eq!(records[0]["payload"], "after", "{json}");
    assert_eq!(
        records[0]["seq"].as_u64().map(|s| s.to_string()).as_deref(),
        stored[1].header("spillway-seq"),
        "{json}"
    );
}

/// One broker down when spillway starts: it starts and delivers through
/// the other two. Then a reload from an HTTP sink to the Kafka sink and
/// back loses nothing: every record is in one place or the other (or
/// both, for what was in flight at the switch).
#[test]
fn a_broker_down_at_start_and_reloads_between_http_and_kafka_lose_nothing() {
    let Some(mut cluster) = cluster() else {
        return;
    };
    cluster.kill(0);
    let http = HttpReceiver::start();
    let http_table = format!(
        "[sinks.k]\ntype = \"http\"\nurl = \"{}\"\nstart = \"oldest\"\n",
        http.url()
    );
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 2\n{}",
        kafka_table(&cluster, "k", "")
    ));
    let sent = push_many(&d, "down", 2_000);
    wait_drained(&d, "k");
    cluster.restart(0);

    d.reconfigure(&format!("[server]\nshards = 2\n{http_table}"));
    let out = d.ctl(&["reload"]);
    assert!(out.contains("switched to http"), "ctl reload said: {out}");
    let to_http = push_many(&d, "http", 2_000);
    http.wait_for_payloads(&to_http, DELIVERY_TIMEOUT);

    d.reconfigure(&format!(
        "[server]\nshards = 2\n{}",
        kafka_table(&cluster, "k", "")
    ));
    let out = d.ctl(&["reload"]);
    assert!(out.contains("switched to kafka"), "ctl reload said: {out}");
    let back = push_many(&d, "back", 2_000);
    wait_drained(&d, "k");
    let stored = cluster.read(TOPIC, true);
    let in_kafka: std::collections::HashSet<&[u8]> =
        stored.iter().map(|m| m.payload.as_slice()).collect();
    // Each shard switches at its next batch boundary: the first records
    // pushed after the reload may still go to the HTTP sink (a CI run saw
    // back:0..4 there). Every one is in one place or the other.
    let in_http: std::collections::HashSet<String> =
        http.accepted_records().iter().map(|r| r.text()).collect();
    let missing: Vec<&String> = sent
        .iter()
        .filter(|p| !in_kafka.contains(p.as_bytes()))
        .chain(
            back.iter()
                .filter(|p| !in_kafka.contains(p.as_bytes()) && !in_http.contains(*p)),
        )
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "not in the topic (nor, for back:*, at the HTTP receiver): {missing:?}"
    );
    assert!(
        back.iter().any(|p| in_kafka.contains(p.as_bytes())),
        "no record pushed after the switch back reached Kafka"
    );
    assert_eq!(
        stored.len(),
        in_kafka.len(),
        "a record written twice into the topic"
    );
}

/// Brokers with a TLS listener and a SASL listener of their own: one sink
/// over TLS (the brokers' certificate checked against `ca_file`), one
/// with SCRAM-SHA-512, both exactly once; a wrong password and a
/// certificate the client does not trust are refused by `check` and `run`,
/// naming the key.
#[test]
fn tls_and_scram_listeners() {
    let certs = tempfile::tempdir().unwrap();
    let tls = TlsFiles::make(certs.path()).expect("certificates");
    let guard = Guard {
        tls: Some(tls.clone()),
        scram: Some(SaslUser {
            name: "alice".into(),
            password: "alice-secret".into(),
        }),
    };
    let Some(cluster) = KafkaCluster::start_with(3, guard) else {
        return;
    };
    for topic in ["over-tls", "over-scram"] {
        cluster.create_topic(topic, 3, 3, &[("min.insync.replicas", "2")]);
    }
    let list = |bootstrap: String| {
        bootstrap
            .split(',')
            .map(|b| format!("\"{b}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let tls_brokers = list(cluster.bootstrap_tls().expect("a TLS listener"));
    let scram_brokers = list(cluster.bootstrap_scram().expect("a SASL listener"));
    let tls_table = |ca: &str| {
        format!(
            "[sinks.tls]\ntype = \"kafka\"\nbrokers = [{tls_brokers}]\ntopic = \"over-tls\"\n{ca}retry_initial_ms = 50\nretry_max_ms = 1000\n"
        )
    };
    let scram_table = format!(
        "[sinks.scram]\ntype = \"kafka\"\nbrokers = [{scram_brokers}]\ntopic = \"over-scram\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nuser = \"alice\"\npassword_env = \"SPILLWAY_TEST_KAFKA_PASSWORD\"\nretry_initial_ms = 50\nretry_max_ms = 1000\n"
    );
    check_and_run_refuse(
        &scram_table,
        &[("SPILLWAY_TEST_KAFKA_PASSWORD", "wrong")],
        "sinks.scram.password_env: the brokers refused the login",
    );
    check_and_run_refuse(
        &tls_table("tls = true\n"),
        &[],
        "sinks.tls.brokers: TLS with the brokers failed",
    );
    let mut d = Daemon::configure(&format!(
        "[server]\nshards = 2\n{}{scram_table}",
        tls_table(&format!("ca_file = {:?}\n", tls.ca.display().to_string()))
    ));
    d.spawn_with(|c| {
        c.env("SPILLWAY_TEST_KAFKA_PASSWORD", "alice-secret");
    });
    let sent = push_many(&d, "guarded", 2_000);
    for (sink, topic) in [("tls", "over-tls"), ("scram", "over-scram")] {
        wait_drained(&d, sink);
        assert_exactly_once_in_order(&cluster.read(topic, true), &sent);
    }
}

/// Power cuts of spillway's host (its data folder on a file system that
/// drops what was not synced: `spillway-lazyfs`), each after a SIGKILL
/// mid-delivery: the cursor files roll back to their last fsync, the
/// batches after it are offered again, and the positions read back keep
/// them from being written twice. Needs FUSE (as `power_cut.rs`).
#[test]
fn power_cuts_of_spillways_host_write_nothing_twice() {
    let Some(cluster) = cluster() else {
        return;
    };
    let mut d = Daemon::configure(&format!(
        "[server]\nshards = 2\n{}",
        kafka_table(&cluster, "k", "batch_records_max = 100\n")
    ));
    std::fs::create_dir(d.data_dir()).expect("creating the mount point");
    let backing = tempfile::Builder::new()
        .prefix("lazyfs-backing")
        .tempdir()
        .expect("tempdir");
    let mut fs = match spillway_lazyfs::LazyFs::mount(backing.path(), d.data_dir()) {
        Ok(fs) => fs,
        Err(e) if in_ci() => panic!("this test must run in CI, but FUSE cannot be used: {e}"),
        Err(e) => {
            eprintln!("SKIPPED: FUSE cannot be used here ({e}); CI runs this test");
            return;
        }
    };
    d.spawn();
    let mut sent = Vec::new();
    for cut in 0..5 {
        let before = stat(&d, "k", "delivered_records").unwrap_or(0);
        sent.extend(push_many(&d, &format!("cut{cut}"), 2_000));
        assert!(
            wait_until(DELIVERY_TIMEOUT, || stat(&d, "k", "delivered_records")
                .is_some_and(|n| n >= before + 500)),
            "cut {cut}: nothing delivered; health:\n{}",
            d.health()
        );
        d.kill9();
        let report = fs.power_cut().expect("the power cut");
        eprintln!("cut {cut}: {report:?}");
        d.spawn();
    }
    wait_drained(&d, "k");
    assert_exactly_once_in_order(&cluster.read(TOPIC, true), &sent);
    d.kill9();
    drop(fs);
}
