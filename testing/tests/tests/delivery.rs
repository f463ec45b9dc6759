//! Delivery end to end: the real binary delivers to a real HTTP receiver on
//! loopback (`spillway_tests::receiver`), through outages, permanent rejections, SIGKILL,
//! backpressure and graceful shutdown; and the embedded default config
//! delivers to its file sink.
//!
//! Timing is only ever bounded from above by generous liveness timeouts;
//! nothing here asserts performance.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::receiver::{duplicates, HttpReceiver, Received};
use spillway_tests::*;

/// Upper bound for "eventually delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A `[sink]` table for the receiver, plus extra `key = value` lines.
fn http_sink(rx: &HttpReceiver, extra: &str) -> String {
    format!("[sink]\ntype = \"http\"\nurl = \"{}\"\n{extra}\n", rx.url())
}

/// Push `n` records `"{tag}:{i}"` at Sync, each of which must be acked.
fn push_tagged(client: &mut Client, tag: &str, n: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p = format!("{tag}:{i}");
            client
                .push(Tier::Sync, p.as_bytes())
                .unwrap_or_else(|e| panic!("push {p}: {e}"));
            p
        })
        .collect()
}

/// Push from one client per tag, concurrently; returns every payload.
fn push_concurrently(d: &Daemon, tags: &[&str], per_tag: u64) -> Vec<String> {
    let handles: Vec<_> = tags
        .iter()
        .map(|tag| {
            let mut c = d.client();
            let tag = tag.to_string();
            thread::spawn(move || push_tagged(&mut c, &tag, per_tag))
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("producer thread"))
        .collect()
}

/// For each tag, the numbers of its records in the order they were
/// accepted (repeats included).
fn arrival_order(recs: &[Received]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in recs {
        if let Some((tag, n)) = parse_tagged(&r.payload) {
            out.entry(tag).or_default().push(n);
        }
    }
    out
}

/// Each tag's first occurrences, in order: redelivery may repeat a suffix,
/// but the first time each record arrives is in push order.
fn first_occurrences(ns: &[u64]) -> Vec<u64> {
    let mut seen = HashSet::new();
    ns.iter().copied().filter(|n| seen.insert(*n)).collect()
}

/// The same identity must always carry the same payload (identities are
/// stable across redeliveries and restarts).
fn check_identity_stable(recs: &[Received], context: &str) {
    let mut by_id: HashMap<(u32, u64), &[u8]> = HashMap::new();
    for r in recs {
        let prev = by_id.entry(r.id()).or_insert(&r.payload);
        assert_eq!(
            *prev,
            r.payload.as_slice(),
            "{context}: identity {:?} arrived with two different payloads: {:?} and {:?}",
            r.id(),
            String::from_utf8_lossy(prev),
            r.text()
        );
    }
}

// ---------------------------------------------------------------- 1. batched

#[test]
fn batched_delivery_is_ndjson_exactly_once_in_push_order() {
    let rx = HttpReceiver::start();
    let d = Daemon::start(&http_sink(&rx, "delivery = \"batched\"\nlinger_ms = 20"));
    let expected = push_concurrently(&d, &["a", "b"], 250);
    assert_eq!(expected.len(), 500);
    let recs = rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);

    let reqs = rx.requests();
    let mut sizes = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let ctx = || format!("request #{i}:\n{}", spillway_tests::receiver::describe(r));
        assert_eq!(r.status, Some(200), "{}", ctx());
        assert_eq!(r.method, "POST", "{}", ctx());
        assert_eq!(r.path, "/ingest", "{}", ctx());
        assert_eq!(
            r.header("content-type"),
            Some("application/x-ndjson"),
            "{}",
            ctx()
        );
        assert!(
            r.header("user-agent")
                .is_some_and(|u| u.starts_with("spillway/")),
            "{}",
            ctx()
        );
        let decoded = spillway_tests::receiver::decode_request(r, i)
            .unwrap_or_else(|e| panic!("{e}; {}", ctx()));
        // Exactly NDJSON: the body is each payload followed by "\n", nothing else.
        let mut rebuilt = Vec::new();
        for rec in &decoded {
            assert!(
                expected.contains(&rec.text()),
                "{}: unexpected line {:?}",
                ctx(),
                rec.text()
            );
            rebuilt.extend_from_slice(&rec.payload);
            rebuilt.push(b'\n');
        }
        assert_eq!(rebuilt, r.body, "{}", ctx());
        // Contiguous seqs: no Spillway-Seqs, key
        // spillway-{instance}-{shard}-{first}-{last}.
        assert_eq!(r.header("spillway-seqs"), None, "{}", ctx());
        let (first, last) = (decoded.first().unwrap(), decoded.last().unwrap());
        assert_eq!(last.seq - first.seq + 1, decoded.len() as u64, "{}", ctx());
        let instance = r.header("spillway-instance").unwrap_or_default();
        assert!(
            instance.len() == 32 && instance.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}: Spillway-Instance {instance:?}",
            ctx()
        );
        let key = format!(
            "spillway-{instance}-{}-{}-{}",
            first.shard, first.seq, last.seq
        );
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()), "{}", ctx());
        sizes.push(decoded.len());
    }

    // Exactly once, by payload and by identity.
    assert_eq!(
        recs.len(),
        500,
        "records delivered more than once: {:?}",
        duplicates(&recs)
    );
    assert!(duplicates(&recs).is_empty());
    let payloads: HashSet<String> = recs.iter().map(Received::text).collect();
    assert_eq!(payloads.len(), 500);

    // Each connection's records in push order, and each shard in seq order.
    for (tag, ns) in arrival_order(&recs) {
        assert_eq!(
            ns,
            (0..250).collect::<Vec<_>>(),
            "connection {tag} delivered out of push order"
        );
    }
    let mut last_seq: HashMap<u32, u64> = HashMap::new();
    for r in &recs {
        if let Some(prev) = last_seq.insert(r.shard, r.seq) {
            assert!(
                prev < r.seq,
                "shard {} delivered seq {} after {}",
                r.shard,
                r.seq,
                prev
            );
        }
    }
    let max = *sizes.iter().max().unwrap();
    eprintln!(
        "batched: {} requests for 500 records, records per request max {max}, sizes {sizes:?}",
        reqs.len()
    );
    assert!(
        max > 1,
        "no batching happened: every request carried one record ({} requests)",
        reqs.len()
    );
}

// ---------------------------------------------------------------- 2. per record

#[test]
fn per_record_delivery_sends_raw_bodies_with_record_keys() {
    let rx = HttpReceiver::start();
    let d = Daemon::start(&http_sink(&rx, "delivery = \"per_record\""));
    let mut c = d.client();
    // Any bytes go in a per-record body: newlines and non-UTF-8 included.
    let mut expected: Vec<Vec<u8>> = (0..30).map(|i| format!("pr:{i}").into_bytes()).collect();
    expected.insert(10, b"two\nlines\r\n".to_vec());
    expected.insert(20, vec![0x00, 0xff, 0x0a, 0x80, b'x']);
    for p in &expected {
        c.push(Tier::Sync, p)
            .unwrap_or_else(|e| panic!("push {p:?}: {e}"));
    }
    rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);

    let reqs = rx.requests();
    let mut recs = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        let ctx = || format!("request #{i}:\n{}", spillway_tests::receiver::describe(r));
        assert_eq!(r.status, Some(200), "{}", ctx());
        assert_eq!(r.method, "POST", "{}", ctx());
        assert_eq!(
            r.header("content-type"),
            Some("application/octet-stream"),
            "{}",
            ctx()
        );
        assert_eq!(r.header("spillway-record-count"), Some("1"), "{}", ctx());
        let shard = r.header("spillway-shard").unwrap().to_string();
        let seq = r.header("spillway-seq-first").unwrap().to_string();
        assert_eq!(
            r.header("spillway-seq-last"),
            Some(seq.as_str()),
            "{}",
            ctx()
        );
        let instance = r.header("spillway-instance").unwrap_or_default();
        let key = format!("spillway-{instance}-{shard}-{seq}");
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()), "{}", ctx());
        assert!(
            expected.contains(&r.body),
            "{}: body is not one pushed payload",
            ctx()
        );
        recs.push((
            shard.parse::<u32>().unwrap(),
            seq.parse::<u64>().unwrap(),
            r.body.clone(),
        ));
    }
    assert_eq!(
        recs.len(),
        expected.len(),
        "one request per record, each record once"
    );
    // Requests run concurrently, so arrival order may differ; seq order is push order.
    recs.sort_by_key(|r| (r.0, r.1));
    assert!(
        recs.iter().all(|r| r.0 == recs[0].0),
        "one connection's records span shards"
    );
    let bodies: Vec<Vec<u8>> = recs.into_iter().map(|r| r.2).collect();
    assert_eq!(bodies, expected, "seq order is not push order");
}

// ---------------------------------------------------------------- 3. latency

#[test]
fn light_load_records_arrive_promptly() {
    let rx = HttpReceiver::start();
    let d = Daemon::start(&http_sink(&rx, ""));
    let mut c = d.client();
    let mut latencies = Vec::new();
    for i in 0..5 {
        let p = format!("lat:{i}");
        let t0 = Instant::now();
        c.push(Tier::Sync, p.as_bytes()).unwrap();
        let acked = t0.elapsed();
        let recs = rx.wait_for_payloads(&[p.as_bytes()], Duration::from_secs(5));
        let arrived = recs.iter().find(|r| r.payload == p.as_bytes()).unwrap().at;
        latencies.push((acked, arrived.duration_since(t0)));
        thread::sleep(Duration::from_millis(20));
    }
    for (i, (ack, arrival)) in latencies.iter().enumerate() {
        eprintln!("light load: record {i} acked after {ack:?}, received by the HTTP receiver {arrival:?} after the push");
    }
}

// ---------------------------------------------------------------- 4. outage

#[test]
fn outage_is_ridden_out_with_retries() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let d = Daemon::start(&http_sink(&rx, "retry_initial_ms = 50\nretry_max_ms = 500"));
    let outage = Instant::now();
    let mut c = d.client();
    let mut expected = Vec::new();
    for i in 0..300u64 {
        let p = format!("out:{i}");
        c.push(Tier::Sync, p.as_bytes())
            .unwrap_or_else(|e| panic!("push during the outage: {e}"));
        expected.push(p);
        thread::sleep(Duration::from_millis(5));
    }
    let remaining = Duration::from_secs(3).saturating_sub(outage.elapsed());
    thread::sleep(remaining);
    let failed = rx
        .requests()
        .iter()
        .filter(|r| r.status == Some(503))
        .count();
    assert!(
        failed > 0,
        "the sink never tried during the outage:\n{}",
        rx.summary()
    );
    assert_eq!(rx.accepted_records().len(), 0);
    rx.set_status(200);

    let recs = rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);
    let order = arrival_order(&recs);
    assert_eq!(
        first_occurrences(&order["out"]),
        (0..300).collect::<Vec<_>>(),
        "out of push order"
    );
    let stats = d.ctl(&["stats", "--flat"]);
    let retries = shard_stat_sum(&stats, "delivery_retries");
    eprintln!(
        "outage: {failed} requests answered 503, delivery_retries = {retries}, {} requests in all",
        rx.request_count()
    );
    assert!(retries > 0, "ctl stats shows no delivery retries:\n{stats}");
    assert!(retries as usize >= failed.min(1));
}

#[test]
fn retry_after_is_honoured_up_to_retry_max() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    rx.set_retry_after(Some("1"));
    // Retry-After: 1 s, capped by retry_max_ms = 400: every attempt waits
    // exactly 400 ms (jitter alone would often wait less, honouring 1 s more).
    let d = Daemon::start(&http_sink(&rx, "retry_initial_ms = 1\nretry_max_ms = 400"));
    let mut c = d.client();
    c.push(Tier::Sync, b"ra:0").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || rx.request_count() >= 5),
        "{}",
        rx.summary()
    );
    rx.set_status(200);
    rx.wait_for_payloads(&[b"ra:0"], DELIVERY_TIMEOUT);
    let reqs = rx.requests();
    let gaps: Vec<Duration> = reqs
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at))
        .collect();
    eprintln!("retry-after: gaps between attempts {gaps:?}");
    assert!(
        gaps.iter().all(|g| *g >= Duration::from_millis(395)),
        "an attempt came sooner than the Retry-After (capped at 400 ms) allows: {gaps:?}"
    );
    assert!(
        gaps.iter().any(|g| *g < Duration::from_millis(1000)),
        "Retry-After: 1 s was not capped by retry_max_ms = 400: {gaps:?}"
    );
}

// ---------------------------------------------------------------- 5. dead letters

/// The `ctl dead-letter list` rows and their count.
fn dead_letters(d: &Daemon) -> (usize, Vec<String>) {
    dead_letter_rows(&d.ctl(&["dead-letter", "list"]))
}

fn wait_dead_letters(d: &Daemon, n: usize) -> Vec<String> {
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    loop {
        let (count, lines) = dead_letters(d);
        if count == n {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} dead letters, have {count}: {lines:?}\nlog:\n{}",
            d.stderr()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// `ctl dead-letter requeue` is admitted like a producer's push: at
/// `wab.wab_bytes_max` it is refused as Overloaded (retryable), nothing is
/// requeued and the dead letter stays listed; once delivery frees space the
/// same requeue goes through and the record arrives.
#[test]
fn dead_letter_requeue_gets_overloaded_at_the_wab_cap_like_a_push() {
    const POISON_BYTES: usize = 512 * 1024;
    const FILLER_BYTES: usize = 64 * 1024;
    let rx = HttpReceiver::start();
    rx.reject_containing(Some(b"poison"));
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 1048576\n{}",
        http_sink(
            &rx,
            "batch_records_max = 1\nretry_initial_ms = 50\nretry_max_ms = 200"
        )
    ));
    let mut c = d.client();
    let mut poison = b"poison".to_vec();
    poison.resize(POISON_BYTES, b'p');
    c.push(Tier::Sync, &poison).unwrap();
    wait_dead_letters(&d, 1);

    // Hold delivery (503) and fill the WAB to its cap.
    rx.set_status(503);
    let mut fillers = Vec::new();
    let overloaded = (0..200).find_map(|i| {
        let mut p = format!("fill:{i}:").into_bytes();
        p.resize(FILLER_BYTES, b'f');
        match c.push(Tier::Sync, &p) {
            Ok(()) => {
                fillers.push(p);
                None
            }
            Err(e) => Some(e.to_string()),
        }
    });
    let overloaded = overloaded.expect("the WAB never filled");
    assert!(
        overloaded.to_lowercase().contains("overloaded"),
        "{overloaded}"
    );

    let config = d.config_path().as_os_str();
    let argv = [
        "ctl".as_ref(),
        "--config".as_ref(),
        config,
        "dead-letter".as_ref(),
        "requeue".as_ref(),
        "all".as_ref(),
    ];
    let refused = run_spillway(&argv, Duration::from_secs(20));
    assert!(
        !refused.status.success(),
        "requeue at the cap succeeded: {refused:?}"
    );
    assert!(
        refused.stderr.to_lowercase().contains("overloaded")
            && refused.stderr.contains("nothing was requeued"),
        "{refused:?}"
    );
    assert_eq!(
        dead_letters(&d).0,
        1,
        "the refused requeue lost the dead letter"
    );

    // Delivery resumes and frees space; the same requeue now goes through.
    rx.set_status(200);
    rx.reject_containing(None);
    rx.wait_for_payloads(&fillers, DELIVERY_TIMEOUT);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    loop {
        let f = run_spillway(&argv, Duration::from_secs(20));
        if f.status.success() {
            assert_eq!(f.stdout.trim(), "requeued 1");
            break;
        }
        assert!(f.stderr.to_lowercase().contains("overloaded"), "{f:?}");
        assert!(
            Instant::now() < deadline,
            "the WAB never freed: {f:?}\n{}",
            d.stderr()
        );
        thread::sleep(Duration::from_millis(100));
    }
    rx.wait_for_payloads(&[&poison], DELIVERY_TIMEOUT);
    assert_eq!(dead_letters(&d).0, 0);
}

/// A receiver that answers 500 to any request holding one record, for
/// ever (a poison record), beside 999 good ones pushed as one batch: the
/// batch is halved until that record is alone, the 999 arrive, and the
/// poison record alone is dead-lettered once `retry_duration_max_ms` has
/// passed, with the receiver's answer as its reason.
#[test]
fn a_record_the_receiver_always_fails_is_isolated_and_dead_lettered_alone() {
    let rx = HttpReceiver::start();
    rx.fail_containing(Some((b"poison", 500)));
    let d = Daemon::start(&format!(
        "[server]\nshards = 1\n{}",
        http_sink(
            &rx,
            "batch_records_max = 1000\nretry_duration_max_ms = 3000"
        )
    ));
    d.ctl(&["sink", "pause", "default"]);
    let payloads: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            if i == 421 {
                b"poison".to_vec()
            } else {
                format!("ok:{i}").into_bytes()
            }
        })
        .collect();
    d.client().push_batch(Tier::Sync, &payloads).unwrap();
    let started = Instant::now();
    d.ctl(&["sink", "resume", "default"]);
    let good: Vec<&Vec<u8>> = payloads.iter().filter(|p| &p[..] != b"poison").collect();
    rx.wait_for_payloads(&good, DELIVERY_TIMEOUT);
    let lines = wait_dead_letters(&d, 1);
    let took = started.elapsed();
    assert!(
        lines[0].starts_with("0:421 ")
            && lines[0].contains("retried for 3 s: ")
            && lines[0].contains("500"),
        "{lines:?}"
    );
    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(shard_stat_sum(&stats, "poison_records"), 1, "{stats}");
    assert!(shard_stat_sum(&stats, "batch_splits") >= 10, "{stats}");
    assert_eq!(shard_stat_sum(&stats, "delivered_records"), 999, "{stats}");
    eprintln!(
        "HTTP 500 poison record dead-lettered {took:?} after delivery started, {} requests",
        rx.request_count()
    );
    assert!(
        took < Duration::from_secs(20),
        "isolated and given up within 20 s: {took:?}"
    );
}

#[test]
fn permanent_rejection_is_dead_lettered_requeued_and_dropped() {
    let rx = HttpReceiver::start();
    rx.reject_containing(Some(b"poison"));
    let d = Daemon::start(&http_sink(
        &rx,
        "batch_records_max = 1\nretry_initial_ms = 50\nretry_max_ms = 500",
    ));
    let mut c = d.client();
    let mut good = Vec::new();
    for i in 0..20 {
        let p = if i == 7 {
            "poison".to_string()
        } else {
            format!("ok:{i}")
        };
        c.push(Tier::Sync, p.as_bytes()).unwrap();
        if i != 7 {
            good.push(p);
        }
    }
    let recs = rx.wait_for_payloads(&good, DELIVERY_TIMEOUT);
    assert_eq!(
        recs.len(),
        19,
        "{:?}",
        recs.iter().map(Received::text).collect::<Vec<_>>()
    );
    let order: Vec<u64> = arrival_order(&recs)["ok"].clone();
    assert_eq!(order, (0..20).filter(|i| *i != 7).collect::<Vec<_>>());
    let poison_requests: Vec<_> = rx
        .requests()
        .into_iter()
        .filter(|r| r.body == b"poison\n")
        .collect();
    assert_eq!(
        poison_requests.len(),
        1,
        "a permanent rejection must not be retried:\n{}",
        rx.summary()
    );
    assert_eq!(poison_requests[0].status, Some(400));

    let lines = wait_dead_letters(&d, 1);
    let line = &lines[0];
    assert!(line.ends_with("\"poison\""), "preview missing: {line}");
    assert!(
        line.contains("HTTP 400"),
        "reason does not name the status: {line}"
    );
    let old_id = line.split_whitespace().next().unwrap().to_string();
    let old_seq: u64 = old_id.split_once(':').unwrap().1.parse().unwrap();

    // Fix the receiver, requeue: the record arrives (as a new record).
    rx.reject_containing(None);
    let out = d.ctl(&["dead-letter", "requeue", "all"]);
    assert_eq!(out.trim(), "requeued 1");
    let recs = rx.wait_for_payloads(&[b"poison"], DELIVERY_TIMEOUT);
    let requeued: Vec<&Received> = recs.iter().filter(|r| r.payload == b"poison").collect();
    assert_eq!(requeued.len(), 1);
    assert!(
        requeued[0].seq > old_seq,
        "requeued record kept its old seq {old_seq}: {:?}",
        requeued[0]
    );
    assert_eq!(dead_letters(&d).0, 0, "the requeued record is still listed");

    // A second poison record, dropped: never delivered.
    rx.reject_containing(Some(b"poison"));
    c.push(Tier::Sync, b"poison-2").unwrap();
    let lines = wait_dead_letters(&d, 1);
    assert!(lines[0].ends_with("\"poison-2\""), "{lines:?}");
    let id = lines[0].split_whitespace().next().unwrap().to_string();
    let out = d.ctl(&["dead-letter", "drop", &id]);
    assert_eq!(out.trim(), "dropped 1");
    assert_eq!(dead_letters(&d).0, 0);
    rx.reject_containing(None);
    c.push(Tier::Sync, b"after-drop").unwrap();
    let recs = rx.wait_for_payloads(&[b"after-drop"], DELIVERY_TIMEOUT);
    assert!(
        !recs.iter().any(|r| r.payload == b"poison-2"),
        "a dropped dead letter was delivered"
    );
    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(shard_stat_sum(&stats, "dead_lettered"), 2, "{stats}");
}

// ---------------------------------------------------------------- 6. crash

#[test]
fn sigkill_during_delivery_loses_no_acked_record() {
    const PRODUCERS: usize = 3;
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx, "retry_initial_ms = 50\nretry_max_ms = 500"));
    let mut expected: Vec<String> = Vec::new();
    let mut outcomes_all: Vec<ProducerOutcome> = Vec::new();
    let mut extra_before = 0usize;
    for (round, kill_after_ms) in [(0u32, 100u64), (1, 350), (2, 700)] {
        let context = format!("round {round} (kill after {kill_after_ms} ms)");
        rx.set_delay(Duration::from_millis(30));
        let before = rx.request_count();
        let handles: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let mut c = d.client();
                let tag = format!("r{round}p{p}");
                thread::spawn(move || produce(&mut c, &tag, Mode::Single(Tier::Sync), u64::MAX))
            })
            .collect();
        // Let delivery of this round get going, then kill while a request
        // is being answered (the receiver holds each one 30 ms).
        assert!(
            wait_until(Duration::from_secs(10), || rx.request_count() > before),
            "{context}: no delivery started"
        );
        thread::sleep(Duration::from_millis(kill_after_ms));
        let in_flight = wait_until(Duration::from_secs(2), || rx.in_flight() > 0);
        d.kill9();
        let outcomes: Vec<ProducerOutcome> = handles
            .into_iter()
            .map(|h| h.join().expect("producer"))
            .collect();
        eprintln!(
            "{context}: batch in flight at the kill: {in_flight}; (acked, sent) per producer {:?}",
            outcomes
                .iter()
                .map(|o| (o.acked, o.sent))
                .collect::<Vec<_>>()
        );
        for o in &outcomes {
            assert!(
                o.acked > 0,
                "{context}: producer {} got no ack before the kill: {o:?}",
                o.tag
            );
            expected.extend((0..o.acked).map(|n| format!("{}:{n}", o.tag)));
        }
        outcomes_all.extend(outcomes);

        // Restart on the same data with a fast receiver: every acked
        // record of every round so far is delivered.
        rx.set_delay(Duration::ZERO);
        d.restart();
        let recs = rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);
        check_identity_stable(&recs, &context);
        let order = arrival_order(&recs);
        for o in &outcomes_all {
            let ns = order.get(&o.tag).cloned().unwrap_or_default();
            let first = first_occurrences(&ns);
            let k = first.len() as u64;
            assert_eq!(
                first,
                (0..k).collect::<Vec<_>>(),
                "{context}: producer {} first arrivals not in push order",
                o.tag
            );
            assert!(
                k >= o.acked && k <= o.sent,
                "{context}: producer {} delivered {k}, acked {}, sent {}",
                o.tag,
                o.acked,
                o.sent
            );
        }
        let dups = duplicates(&recs);
        let extra: usize = dups.values().map(|n| n - 1).sum();
        eprintln!(
            "{context}: so far {} records accepted, {} distinct identities, {} identities received more than once; \
             duplicate copies: {} from this crash, {extra} in all",
            recs.len(),
            recs.iter().map(Received::id).collect::<HashSet<_>>().len(),
            dups.len(),
            extra - extra_before
        );
        extra_before = extra;
    }
}

// ---------------------------------------------------------------- 7. backpressure

fn kib_payload(n: u64) -> Vec<u8> {
    let mut p = format!("bp:{n}:").into_bytes();
    p.resize(1024, b'x');
    p
}

#[test]
fn backpressure_nacks_overloaded_then_lifts_when_the_sink_recovers() {
    let rx = HttpReceiver::start();
    rx.set_status(503);
    let d = Daemon::start(&format!(
        "[wab]\nwab_bytes_max = 4194304\nsegment_bytes_max = 1048576\n{}",
        http_sink(&rx, "retry_initial_ms = 50\nretry_max_ms = 500")
    ));
    let mut c = d.client();
    let mut acked: Vec<Vec<u8>> = Vec::new();
    let started = Instant::now();
    let mut n = 0u64;
    loop {
        let p = kib_payload(n);
        match c.push(Tier::Sync, &p) {
            Ok(()) => acked.push(p),
            Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => break,
            Err(e) => panic!("push {n}: {e} (expected an ack or Overloaded)"),
        }
        n += 1;
        assert!(
            n < 20_000,
            "no Overloaded after {n} KiB into a 4 MiB WAB with a stalled sink"
        );
    }
    eprintln!(
        "backpressure: Overloaded after {} acked 1 KiB records ({:?})",
        acked.len(),
        started.elapsed()
    );
    assert!(
        acked.len() >= 2000,
        "Overloaded far below the cap: after {} KiB",
        acked.len()
    );
    // The connection stays usable after the retryable nack.
    c.health().expect("health check after Overloaded");
    match c.push(Tier::Sync, &kib_payload(n)) {
        Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {}
        other => panic!("still-full WAB: expected Overloaded again, got {other:?}"),
    }

    rx.set_status(200);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let p = kib_payload(n);
        match c.push(Tier::Sync, &p) {
            Ok(()) => {
                acked.push(p);
                break;
            }
            Err(e) if e.nack_reason() == Some(NackReason::Overloaded) => {
                assert!(
                    Instant::now() < deadline,
                    "still Overloaded {DELIVERY_TIMEOUT:?} after the sink recovered:\n{}",
                    rx.summary()
                );
                thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("push after recovery: {e}"),
        }
    }
    eprintln!("backpressure: accepted again after {attempts} attempts");
    let recs = rx.wait_for_payloads(&acked, DELIVERY_TIMEOUT);
    let distinct: HashSet<(u32, u64)> = recs.iter().map(Received::id).collect();
    assert!(distinct.len() >= acked.len());
}

/// A sink slower than ingest while segments rotate: the drain's reader
/// stops at the durable watermark inside segment N, the flusher meanwhile
/// fills N and moves on to N+1; every record of N must still be delivered.
#[test]
fn records_written_across_segment_rotations_while_the_sink_is_busy_are_all_delivered() {
    let rx = HttpReceiver::start();
    rx.set_delay(Duration::from_millis(300));
    let d = Daemon::start(&format!(
        "[wab]\nsegment_bytes_max = 1048576\n{}",
        http_sink(&rx, "")
    ));
    let mut c = d.client();
    let mut acked = Vec::new();
    // ~2.5 MiB from one connection (one shard): at least two rotations.
    for n in 0..2500u64 {
        let p = kib_payload(n);
        c.push(Tier::Sync, &p)
            .unwrap_or_else(|e| panic!("push {n}: {e}"));
        acked.push(p);
    }
    rx.set_delay(Duration::ZERO);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let recs = loop {
        let recs = rx.accepted_records();
        let have: HashSet<&[u8]> = recs.iter().map(|r| r.payload.as_slice()).collect();
        let missing: Vec<u64> = (0..acked.len() as u64)
            .filter(|n| !have.contains(acked[*n as usize].as_slice()))
            .collect();
        if missing.is_empty() {
            break recs;
        }
        if Instant::now() >= deadline {
            let runs = |v: &[u64]| {
                let mut out: Vec<(u64, u64)> = Vec::new();
                for &x in v {
                    match out.last_mut() {
                        Some(r) if r.1 + 1 == x => r.1 = x,
                        _ => out.push((x, x)),
                    }
                }
                out
            };
            let gapped: Vec<String> = rx
                .requests()
                .iter()
                .filter_map(|r| {
                    r.header("spillway-seqs")
                        .map(|s| format!("{:?}: {s}", r.header("idempotency-key")))
                })
                .collect();
            panic!(
                "{} of {} acked records never delivered; missing record numbers (runs) {:?};\n\
                 requests with seq gaps (no record was dead-lettered): {gapped:?}\n{}\nstats:\n{}",
                missing.len(),
                acked.len(),
                runs(&missing),
                rx.summary(),
                d.ctl(&["stats", "--flat"])
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut seqs: Vec<u64> = recs.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs, (0..acked.len() as u64).collect::<Vec<_>>());
}

// ---------------------------------------------------------------- 8. shutdown

#[test]
fn sigterm_with_a_slow_sink_exits_cleanly_and_redelivers_after_restart() {
    let rx = HttpReceiver::start();
    rx.set_delay(Duration::from_millis(200));
    let mut d = Daemon::start(&format!(
        "[server]\nshutdown_timeout_ms = 1000\n{}",
        http_sink(&rx, "")
    ));
    let expected = push_concurrently(&d, &["sa", "sb"], 100);
    assert!(
        wait_until(Duration::from_secs(10), || rx.in_flight() > 0),
        "no batch in flight:\n{}",
        rx.summary()
    );
    let t0 = Instant::now();
    let status = d.terminate_status();
    let took = t0.elapsed();
    eprintln!("shutdown with a 200 ms receiver took {took:?} ({status})");
    assert!(
        status.success(),
        "exit status {status} after SIGTERM; log:\n{}",
        d.stderr()
    );
    assert!(
        took < Duration::from_millis(1000) + Duration::from_secs(5),
        "shutdown took {took:?}"
    );

    rx.set_delay(Duration::ZERO);
    d.restart();
    let recs = rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);
    check_identity_stable(&recs, "after the restart");
    for (tag, ns) in arrival_order(&recs) {
        assert_eq!(
            first_occurrences(&ns),
            (0..100).collect::<Vec<_>>(),
            "{tag}: first arrivals out of order"
        );
    }
}

#[test]
fn sigterm_abandons_a_batch_slower_than_the_shutdown_timeout() {
    let rx = HttpReceiver::start();
    rx.set_delay(Duration::from_secs(4));
    let mut d = Daemon::start(&format!(
        "[server]\nshutdown_timeout_ms = 500\n{}",
        http_sink(&rx, "")
    ));
    let expected = push_concurrently(&d, &["ab"], 20);
    assert!(
        wait_until(Duration::from_secs(10), || rx.in_flight() > 0),
        "no batch in flight:\n{}",
        rx.summary()
    );
    let stuck: Vec<usize> = rx
        .requests()
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status.is_none())
        .map(|(i, _)| i)
        .collect();
    let t0 = Instant::now();
    let status = d.terminate_status();
    let took = t0.elapsed();
    eprintln!(
        "shutdown with a 4 s receiver and shutdown_timeout_ms = 500 took {took:?} ({status})"
    );
    assert!(
        status.success(),
        "exit status {status} after SIGTERM; log:\n{}",
        d.stderr()
    );
    assert!(
        took < Duration::from_millis(500) + Duration::from_secs(3),
        "shutdown did not give up on the batch in time: {took:?}"
    );

    rx.set_delay(Duration::ZERO);
    d.restart();
    rx.wait_for_payloads(&expected, DELIVERY_TIMEOUT);
    // The abandoned request's records must come again in a later request.
    let all = rx.requests();
    let later: HashSet<(u32, u64)> = all
        .iter()
        .enumerate()
        .filter(|(i, r)| !stuck.contains(i) && r.accepted())
        .flat_map(|(i, r)| spillway_tests::receiver::decode_request(r, i).unwrap())
        .map(|r| r.id())
        .collect();
    for &i in &stuck {
        for rec in spillway_tests::receiver::decode_request(&all[i], i).unwrap() {
            assert!(
                later.contains(&rec.id()),
                "abandoned record {:?} ({}) was not delivered again",
                rec.id(),
                rec.text()
            );
        }
    }
}

// ---------------------------------------------------------------- 9. default config

/// A daemon started without --config; killed when dropped.
struct Bare(Option<Child>);

impl Drop for Bare {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn embedded_default_config_delivers_to_the_local_file() {
    let dir = tempfile::Builder::new().prefix("swdef").tempdir().unwrap();
    let log = dir.path().join("daemon.log");
    let child = spillway_tests::spawn_on_embedded_default(dir.path(), &log);
    let mut bare = Bare(Some(child));
    let socket = dir.path().join("spillway-data/spillway.sock");
    let log_text = || String::from_utf8_lossy(&fs::read(&log).unwrap_or_default()).into_owned();
    let up = wait_until(START_TIMEOUT, || answers_health(&socket));
    assert!(
        up,
        "the daemon on the embedded default did not come up; log:\n{}",
        log_text()
    );

    let mut c = Client::connect(&socket).unwrap();
    c.set_timeout(Some(IO_TIMEOUT)).unwrap();
    let expected: Vec<String> = (0..10).map(|i| format!("{{\"default\":{i}}}")).collect();
    for p in &expected {
        c.push(Tier::Sync, p.as_bytes()).unwrap();
    }
    let delivered = dir.path().join("spillway-data/delivered.ndjson");
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_default();
    let ok = wait_until(DELIVERY_TIMEOUT, || {
        read(&delivered).lines().count() >= expected.len()
    });
    let text = read(&delivered);
    assert!(
        ok,
        "delivered.ndjson holds {:?}; log:\n{}",
        text,
        log_text()
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines, expected,
        "one connection's records, in push order, each once"
    );
    assert!(dir.path().join("spillway-data/wab").is_dir());

    let child = bare.0.as_mut().unwrap();
    // SAFETY: kill(2) on our own unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_timeout(child, STOP_TIMEOUT).expect("no exit after SIGTERM");
    bare.0 = None;
    assert!(status.success(), "exit {status}; log:\n{}", log_text());
}

/// Issue 40: two daemons (two data folders, each numbering from 0: the
/// fleet shape) and one made anew send to one receiver that drops a
/// request whose `Idempotency-Key` it has seen (as docs/sinks.md says a
/// receiver may). One record per request and one shard each, so before
/// the keys carried the instance id every record of the second daemon
/// repeated a key of the first and was dropped.
#[test]
fn two_daemons_and_a_recreated_folder_never_share_an_idempotency_key() {
    let rx = HttpReceiver::start();
    let config = format!(
        "[server]\nshards = 1\n{}",
        http_sink(&rx, "delivery = \"per_record\"")
    );
    let mut a = Daemon::start(&config);
    let b = Daemon::start(&config);
    let mut sent = push_tagged(&mut a.client(), "a", 100);
    sent.extend(push_tagged(&mut b.client(), "b", 100));
    rx.wait_distinct(100, DELIVERY_TIMEOUT);
    let settled = |n: usize| {
        wait_until(DELIVERY_TIMEOUT, || {
            rx.requests().iter().filter(|r| r.accepted()).count() >= n
        })
    };
    assert!(settled(200), "{} requests accepted", rx.request_count());
    a.terminate();
    fs::remove_dir_all(a.data_dir()).unwrap();
    a.spawn();
    sent.extend(push_tagged(&mut a.client(), "a2", 100));
    assert!(settled(300), "{} requests accepted", rx.request_count());
    // The receiver that dedupes on the key.
    let mut seen_keys = HashSet::new();
    let mut kept: HashSet<Vec<u8>> = HashSet::new();
    let mut instances = HashSet::new();
    for r in rx.requests().iter().filter(|r| r.accepted()) {
        instances.insert(r.header("spillway-instance").unwrap_or("").to_string());
        let key = r.header("idempotency-key").expect("a key").to_string();
        if seen_keys.insert(key) {
            kept.insert(r.body.clone());
        }
    }
    assert_eq!(instances.len(), 3, "three instance ids: {instances:?}");
    let lost: Vec<&String> = sent
        .iter()
        .filter(|p| !kept.contains(p.as_bytes()))
        .take(10)
        .collect();
    assert!(
        lost.is_empty(),
        "records a key-deduping receiver dropped as another's repeat: {lost:?}"
    );
    a.terminate();
}

/// The file sink neither dedupes nor writes identities, so two daemons
/// appending to one file cannot take each other's records for repeats:
/// every record of both is in it.
#[test]
fn two_daemons_appending_to_one_file_keep_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fleet.ndjson");
    let config = format!(
        "[sink]\ntype = \"file\"\npath = {:?}\n",
        out.display().to_string()
    );
    let a = Daemon::start(&config);
    let b = Daemon::start(&config);
    let mut sent = push_tagged(&mut a.client(), "a", 500);
    sent.extend(push_tagged(&mut b.client(), "b", 500));
    let lines = || -> HashSet<Vec<u8>> {
        fs::read(&out)
            .unwrap_or_default()
            .split(|&c| c == b'\n')
            .map(<[u8]>::to_vec)
            .collect()
    };
    assert!(
        wait_until(DELIVERY_TIMEOUT, || sent
            .iter()
            .all(|p| lines().contains(p.as_bytes()))),
        "missing from {}: {:?}",
        out.display(),
        sent.iter()
            .filter(|p| !lines().contains(p.as_bytes()))
            .take(10)
            .collect::<Vec<_>>()
    );
}
