//! The harness itself on a real 3-node cluster: transactions are seen as
//! committed or aborted, a killed leader is replaced and its node comes
//! back, and the TLS and SASL listeners take clients. Skipped, with the
//! reason printed, outside CI when Java or Kafka's jars are missing.

use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use spillway_test_kafka::{Guard, KafkaCluster, SaslUser, TlsFiles};

/// How long a transaction call may take.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the cluster may take to give a killed leader's partition
/// another leader: a broker session times out after 3 s.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `payloads` to `topic` in one transaction, committed or aborted.
fn transaction(producer: &BaseProducer, topic: &str, payloads: &[&str], commit: bool) {
    producer.begin_transaction().expect("begin_transaction");
    for (i, p) in payloads.iter().enumerate() {
        let key = format!("k{i}");
        let headers = OwnedHeaders::new().insert(Header {
            key: "spillway-id",
            value: Some(*p),
        });
        producer
            .send(BaseRecord::to(topic).key(&key).payload(*p).headers(headers))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    // A BaseProducer serves its delivery reports only when polled:
    // commit_transaction flushes by itself, abort_transaction does not.
    producer.flush(TXN_TIMEOUT).expect("flush");
    if commit {
        producer
            .commit_transaction(TXN_TIMEOUT)
            .expect("commit_transaction");
    } else {
        producer
            .abort_transaction(TXN_TIMEOUT)
            .expect("abort_transaction");
    }
}

fn payloads(messages: &[spillway_test_kafka::StoredMessage]) -> Vec<String> {
    let mut p: Vec<String> = messages
        .iter()
        .map(|m| String::from_utf8(m.payload.clone()).unwrap())
        .collect();
    p.sort();
    p
}

#[test]
fn transactions_are_read_back_and_a_killed_leader_is_replaced() {
    let started = Instant::now();
    let Some(mut cluster) = KafkaCluster::start(3) else {
        return;
    };
    eprintln!("the 3-node cluster started in {:?}", started.elapsed());

    let topic = "harness";
    cluster.create_topic(topic, 3, 3, &[("compression.type", "zstd")]);
    assert_eq!(
        cluster.topic_config(topic, "compression.type").as_deref(),
        Some("zstd")
    );
    assert_eq!(
        cluster
            .topic_config(topic, "min.insync.replicas")
            .as_deref(),
        Some("2")
    );

    let producer: BaseProducer = cluster
        .client_config()
        .set("transactional.id", "harness-test")
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(TXN_TIMEOUT)
        .expect("init_transactions");
    transaction(&producer, topic, &["a", "b", "c"], true);
    transaction(&producer, topic, &["x", "y"], false);
    transaction(&producer, topic, &["d"], true);

    let committed = cluster.read(topic, true);
    assert_eq!(payloads(&committed), ["a", "b", "c", "d"]);
    let a = committed.iter().find(|m| m.payload == b"a").unwrap();
    assert_eq!(a.header("spillway-id"), Some("a"));
    assert_eq!(a.key.as_deref(), Some(&b"k0"[..]));
    let everything = cluster.read(topic, false);
    assert_eq!(payloads(&everything), ["a", "b", "c", "d", "x", "y"]);

    let leader = cluster.leader(topic, 0).expect("partition 0 has a leader");
    let killed = Instant::now();
    cluster.kill(leader);
    assert!(!cluster.is_running(leader));
    let new_leader = loop {
        match cluster.leader(topic, 0) {
            Some(l) if l != leader => break l,
            _ if killed.elapsed() > FAILOVER_TIMEOUT => {
                panic!("partition 0 still led by killed node {leader} after {FAILOVER_TIMEOUT:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    eprintln!(
        "node {new_leader} leads partition 0 {:?} after node {leader} was killed",
        killed.elapsed()
    );
    // Two replicas in sync are enough to take a transaction.
    transaction(&producer, topic, &["e"], true);
    drop(producer);

    let restarted = Instant::now();
    cluster.restart(leader);
    assert!(cluster.is_running(leader));
    eprintln!("node {leader} was back in {:?}", restarted.elapsed());
    assert_eq!(
        payloads(&cluster.read(topic, true)),
        ["a", "b", "c", "d", "e"]
    );

    cluster.delete_topic(topic);
    assert_eq!(cluster.leader(topic, 0), None);

    cluster.create_topic("perf", 3, 3, &[]);
    let perf_started = Instant::now();
    let perf = cluster
        .perf_test("perf", 20_000, 100, "zstd")
        .expect("ProducerPerformance");
    eprintln!(
        "ProducerPerformance in {:?}: {perf:?}",
        perf_started.elapsed()
    );
    assert_eq!(perf.records, 20_000);
    assert!(
        perf.records_per_sec > 0.0 && perf.p99_ms >= perf.p50_ms,
        "{perf:?}"
    );
    assert_eq!(cluster.read("perf", false).len(), 20_000);
    eprintln!("the whole test took {:?}", started.elapsed());
}

#[test]
fn the_tls_and_sasl_listeners_take_clients() {
    let certs = tempfile::tempdir().unwrap();
    let tls = match TlsFiles::make(certs.path()) {
        Ok(tls) => tls,
        Err(why) if std::env::var_os("CI").is_none() => {
            eprintln!("skipped: no certificates: {why}");
            return;
        }
        Err(why) => panic!("no certificates: {why}"),
    };
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
    cluster.create_topic("guarded", 3, 3, &[]);

    let tls_bootstrap = cluster.bootstrap_tls().expect("a TLS listener");
    let sasl_bootstrap = cluster.bootstrap_scram().expect("a SASL listener");
    let clients: [(&str, Vec<(&str, &str)>); 4] = [
        (
            tls_bootstrap.as_str(),
            vec![
                ("security.protocol", "ssl"),
                ("ssl.ca.location", tls.ca.to_str().unwrap()),
            ],
        ),
        (
            sasl_bootstrap.as_str(),
            vec![
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "SCRAM-SHA-256"),
            ],
        ),
        (
            sasl_bootstrap.as_str(),
            vec![
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
            ],
        ),
        (
            sasl_bootstrap.as_str(),
            vec![
                ("security.protocol", "sasl_plaintext"),
                ("sasl.mechanism", "PLAIN"),
            ],
        ),
    ];
    for (i, (bootstrap, settings)) in clients.iter().enumerate() {
        let mut config = rdkafka::ClientConfig::new();
        config
            .set("bootstrap.servers", *bootstrap)
            .set("acks", "all")
            .set("message.timeout.ms", "20000");
        for (k, v) in settings {
            config.set(*k, *v);
        }
        if settings.iter().any(|(k, _)| *k == "sasl.mechanism") {
            config
                .set("sasl.username", "alice")
                .set("sasl.password", "alice-secret");
        }
        let producer: BaseProducer = config.create().expect("a producer");
        let payload = format!("via {settings:?}");
        producer
            .send(BaseRecord::<str, str>::to("guarded").payload(&payload))
            .map_err(|(e, _)| e)
            .expect("send");
        producer
            .flush(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("client {i} ({settings:?}): {e}"));
        assert_eq!(
            cluster.read("guarded", false).len(),
            i + 1,
            "client {i} ({settings:?})"
        );
    }

    // A wrong password is refused: the record times out unsent.
    let refused: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &sasl_bootstrap)
        .set("security.protocol", "sasl_plaintext")
        .set("sasl.mechanism", "SCRAM-SHA-256")
        .set("sasl.username", "alice")
        .set("sasl.password", "wrong")
        .set("message.timeout.ms", "3000")
        .create()
        .expect("a producer");
    refused
        .send(BaseRecord::<str, str>::to("guarded").payload("nope"))
        .map_err(|(e, _)| e)
        .expect("send");
    let _ = refused.flush(Duration::from_secs(10));
    assert_eq!(cluster.read("guarded", false).len(), clients.len());
}
