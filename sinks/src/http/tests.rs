//! The HTTP sink against a real HTTP server on loopback.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Health, Outcome, Record, RecordOutcome, Sink};

use super::{Delivery, HttpConfig, HttpEncoding, HttpMethod};
use crate::{DeliveryConfig, SinkConfig, TypeConfig};
use spillway_test_http::{Receiver, Reply, Request};

fn http_config(url: &str) -> HttpConfig {
    HttpConfig {
        url: Some(url.to_string()),
        ..HttpConfig::default()
    }
}

/// A `[sink]` table of `type = "http"` with these keys and the delivery keys.
fn table(http: &HttpConfig, delivery: DeliveryConfig) -> SinkConfig {
    SinkConfig::new(TypeConfig::new(http.clone()), delivery)
}

fn sink(cfg: &HttpConfig) -> Box<dyn Sink> {
    sink_with(cfg, DeliveryConfig::default())
}

fn sink_with(cfg: &HttpConfig, delivery: DeliveryConfig) -> Box<dyn Sink> {
    crate::build(&table(cfg, delivery), &crate::SinkEnv::detached())
        .expect("valid config")
        .create(0)
        .expect("instance")
}

/// Records of `shard` with the given seqs and payloads.
fn records<'a>(shard: u32, seqs: &[u64], payloads: &[&'a [u8]]) -> Vec<Record<'a>> {
    assert_eq!(seqs.len(), payloads.len());
    seqs.iter()
        .zip(payloads)
        .map(|(&seq, payload)| Record {
            shard,
            seq,
            tier: 2,
            arrival_unix_us: 1,
            payload,
        })
        .collect()
}

fn deliver(sink: &mut dyn Sink, recs: &[Record<'_>]) -> Outcome {
    sink.deliver(&Batch::new(recs[0].shard, recs))
}

fn only_request(server: &Receiver) -> Request {
    let received = server.requests();
    assert_eq!(received.len(), 1, "expected one request, got {received:#?}");
    received.into_iter().next().unwrap()
}

fn crc_key(shard: u32, seqs: &[u64]) -> String {
    let mut bytes = Vec::new();
    for s in seqs {
        bytes.extend_from_slice(&s.to_le_bytes());
    }
    format!(
        "spillway-unset-{shard}-{}-{}-{:08x}",
        seqs[0],
        seqs[seqs.len() - 1],
        crc32fast::hash(&bytes)
    )
}

#[test]
fn batched_ndjson_body_and_headers() {
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        headers: Some(BTreeMap::from([(
            "X-Tenant".to_string(),
            "blue".to_string(),
        )])),
        ..http_config(&server.url("/ingest"))
    };
    let mut sink = sink(&cfg);
    assert_eq!(sink.name(), "http");
    let recs = records(3, &[10, 11, 12], &[b"{\"a\":1}", b"plain text", b""]);
    assert_eq!(deliver(&mut *sink, &recs), Outcome::Committed);

    let r = only_request(&server);
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/ingest"));
    assert_eq!(r.body, b"{\"a\":1}\nplain text\n\n");
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(r.header("content-length"), Some("20"));
    assert_eq!(r.header("idempotency-key"), Some("spillway-unset-3-10-12"));
    assert_eq!(r.header("spillway-shard"), Some("3"));
    assert_eq!(r.header("spillway-seq-first"), Some("10"));
    assert_eq!(r.header("spillway-seq-last"), Some("12"));
    assert_eq!(r.header("spillway-record-count"), Some("3"));
    assert_eq!(r.header("spillway-seqs"), None);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("authorization"), None);
    assert_eq!(r.header("x-tenant"), Some("blue"));
    assert!(r.header("user-agent").unwrap().starts_with("spillway/"));
}

#[test]
fn batched_ndjson_rejects_records_with_newlines_and_sends_the_rest() {
    let server = Receiver::replying(204);
    let mut sink = sink(&http_config(&server.url("/")));
    let recs = records(1, &[10, 11, 12], &[b"first", b"two\nlines", b"third"]);
    let outcome = deliver(&mut *sink, &recs);
    assert_eq!(
        outcome,
        Outcome::Split(vec![
            RecordOutcome::Committed,
            RecordOutcome::Rejected(
                "record contains a newline byte at offset 3; use encoding = \"length_prefixed\" or \"json_array\""
                    .into()
            ),
            RecordOutcome::Committed,
        ])
    );
    let r = only_request(&server);
    assert_eq!(r.body, b"first\nthird\n");
    assert_eq!(r.header("spillway-record-count"), Some("2"));
    assert_eq!(r.header("spillway-seq-first"), Some("10"));
    assert_eq!(r.header("spillway-seq-last"), Some("12"));
    assert_eq!(r.header("spillway-seqs"), Some("10,12"));
    assert_eq!(
        r.header("idempotency-key"),
        Some(crc_key(1, &[10, 12]).as_str())
    );
}

#[test]
fn batch_of_only_unframeable_records_sends_nothing() {
    let server = Receiver::replying(200);
    let mut sink = sink(&http_config(&server.url("/")));
    let recs = records(0, &[1], &[b"a\nb"]);
    assert!(
        matches!(deliver(&mut *sink, &recs), Outcome::Split(o) if matches!(o[..], [RecordOutcome::Rejected(_)]))
    );
    assert!(server.requests().is_empty());
}

#[test]
fn batched_json_array_body_and_invalid_json_rejected() {
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        encoding: Some(HttpEncoding::JsonArray),
        ..http_config(&server.url("/j"))
    };
    let mut sink = sink(&cfg);
    let recs = records(
        2,
        &[5, 6, 7, 8],
        &[b"{\"a\":1}", b"{oops", b"[1,2]", b"\"s\""],
    );
    let Outcome::Split(outcomes) = deliver(&mut *sink, &recs) else {
        panic!("expected a split")
    };
    assert_eq!(outcomes[0], RecordOutcome::Committed);
    match &outcomes[1] {
        RecordOutcome::Rejected(reason) => {
            assert!(
                reason.starts_with("record is not a JSON value: key must be a string"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        outcomes[2..],
        [RecordOutcome::Committed, RecordOutcome::Committed]
    );
    let r = only_request(&server);
    assert_eq!(r.body, b"[{\"a\":1},[1,2],\"s\"]");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("spillway-seqs"), Some("5,7-8"));
    assert_eq!(r.header("spillway-record-count"), Some("3"));
    let parsed: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(parsed.as_array().unwrap().len(), 3);
}

#[test]
fn batched_length_prefixed_body() {
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        encoding: Some(HttpEncoding::LengthPrefixed),
        ..http_config(&server.url("/b"))
    };
    let mut sink = sink(&cfg);
    let recs = records(0, &[100, 101], &[b"a\nb", b"\x00\xff"]);
    assert_eq!(deliver(&mut *sink, &recs), Outcome::Committed);
    let r = only_request(&server);
    assert_eq!(r.body, b"\x03\x00\x00\x00a\nb\x02\x00\x00\x00\x00\xff");
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    assert_eq!(
        r.header("idempotency-key"),
        Some("spillway-unset-0-100-101")
    );
}

#[test]
fn gzip_body_decompresses_to_the_ndjson() {
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        gzip: Some(true),
        ..http_config(&server.url("/z"))
    };
    let mut sink = sink(&cfg);
    let recs = records(0, &[1, 2], &[b"{\"k\":\"v\"}", b"{\"k\":\"w\"}"]);
    assert_eq!(deliver(&mut *sink, &recs), Outcome::Committed);
    let r = only_request(&server);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let mut plain = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut plain)
        .unwrap();
    assert_eq!(plain, b"{\"k\":\"v\"}\n{\"k\":\"w\"}\n");
}

#[test]
fn method_and_content_type_override() {
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        method: Some(HttpMethod::Put),
        headers: Some(BTreeMap::from([(
            "Content-Type".to_string(),
            "text/plain".to_string(),
        )])),
        ..http_config(&server.url("/put"))
    };
    let mut sink = sink(&cfg);
    assert_eq!(
        deliver(&mut *sink, &records(0, &[1], &[b"x"])),
        Outcome::Committed
    );
    let r = only_request(&server);
    assert_eq!(r.method, "PUT");
    assert_eq!(r.header("content-type"), Some("text/plain"));
}

#[test]
fn bearer_token_from_the_environment() {
    let var = "SPILLWAY_SINKS_TEST_BEARER_TOKEN";
    std::env::set_var(var, "t0ken-123");
    let server = Receiver::replying(200);
    let cfg = HttpConfig {
        token_env: Some(var.into()),
        ..http_config(&server.url("/"))
    };
    let factory = crate::build(
        &table(&cfg, DeliveryConfig::default()),
        &crate::SinkEnv::detached(),
    )
    .unwrap();
    assert!(
        !factory.describe().contains("t0ken"),
        "{}",
        factory.describe()
    );
    let mut sink = factory.create(0).unwrap();
    assert_eq!(
        deliver(&mut *sink, &records(0, &[1], &[b"x"])),
        Outcome::Committed
    );
    assert_eq!(
        only_request(&server).header("authorization"),
        Some("Bearer t0ken-123")
    );

    let unset = HttpConfig {
        token_env: Some("SPILLWAY_SINKS_TEST_UNSET".into()),
        ..cfg
    };
    let err = crate::build(
        &table(&unset, DeliveryConfig::default()),
        &crate::SinkEnv::detached(),
    )
    .err()
    .expect("unset variable must fail the build")
    .to_string();
    assert!(
        err.starts_with("sink.token_env: environment variable SPILLWAY_SINKS_TEST_UNSET"),
        "{err}"
    );
}

#[test]
fn idempotency_keys_follow_the_records() {
    let server = Receiver::replying(200);
    let mut sink = sink(&http_config(&server.url("/")));
    let a = records(4, &[7, 8, 9], &[b"a", b"b", b"c"]);
    let same_ids_other_bytes = records(4, &[7, 8, 9], &[b"x", b"y", b"z"]);
    let other = records(4, &[7, 8, 10], &[b"a", b"b", b"c"]);
    for recs in [&a, &a, &same_ids_other_bytes, &other] {
        assert_eq!(deliver(&mut *sink, recs), Outcome::Committed);
    }
    // A new instance (after a panic, a restart) derives the same key.
    let mut fresh = crate::build(
        &table(&http_config(&server.url("/")), DeliveryConfig::default()),
        &crate::SinkEnv::detached(),
    )
    .unwrap()
    .create(4)
    .unwrap();
    assert_eq!(deliver(&mut *fresh, &a), Outcome::Committed);

    let keys: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.header("idempotency-key").unwrap().to_string())
        .collect();
    assert_eq!(keys[0], "spillway-unset-4-7-9");
    assert_eq!(keys[1], keys[0], "redelivery of the same records");
    assert_eq!(
        keys[2], keys[0],
        "the key depends on identities, not payloads"
    );
    assert_eq!(keys[3], crc_key(4, &[7, 8, 10]));
    assert_ne!(keys[3], keys[0]);
    assert_eq!(keys[4], keys[0]);
}

#[test]
fn status_503_is_retried_with_the_status_and_url() {
    let server = Receiver::start(|_| Reply::status(503).body(b"down for maintenance"));
    let url = server.url("/busy");
    let mut sink = sink(&http_config(&url));
    match deliver(&mut *sink, &records(0, &[1, 2], &[b"a", b"b"])) {
        Outcome::Retry { after, reason } => {
            assert_eq!(after, None);
            assert_eq!(
                reason,
                format!("HTTP 503 Service Unavailable: down for maintenance (POST {url})")
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn status_429_honours_retry_after_seconds() {
    let server = Receiver::start(|_| Reply::status(429).header("Retry-After", "2"));
    let mut sink = sink(&http_config(&server.url("/")));
    match deliver(&mut *sink, &records(0, &[1], &[b"a"])) {
        Outcome::Retry { after, reason } => {
            assert_eq!(after, Some(Duration::from_secs(2)));
            assert!(
                reason.starts_with(
                    "HTTP 429 Too Many Requests: (empty body) (POST http://127.0.0.1:"
                ),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn retry_after_date_and_cap() {
    let in_90s = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(90));
    let server = Receiver::start(move |_| Reply::status(503).header("Retry-After", &in_90s));
    let delivery = DeliveryConfig {
        retry_max_ms: 300_000,
        ..DeliveryConfig::default()
    };
    let mut sink = sink_with(&http_config(&server.url("/")), delivery);
    let Outcome::Retry {
        after: Some(after), ..
    } = deliver(&mut *sink, &records(0, &[1], &[b"a"]))
    else {
        panic!("expected a retry with a delay")
    };
    assert!(
        after > Duration::from_secs(85) && after <= Duration::from_secs(90),
        "{after:?}"
    );

    // Never longer than the drain's own longest backoff.
    let server = Receiver::start(|_| Reply::status(429).header("Retry-After", "86400"));
    let delivery = DeliveryConfig {
        retry_max_ms: 5000,
        ..DeliveryConfig::default()
    };
    let outcome = deliver(
        &mut *sink_with(&http_config(&server.url("/")), delivery),
        &records(0, &[1], &[b"a"]),
    );
    assert!(
        matches!(outcome, Outcome::Retry { after: Some(d), .. } if d == Duration::from_secs(5)),
        "{outcome:?}"
    );
}

/// 408, 5xx, and a status no HTTP version defines (a broken receiver or
/// proxy, which says nothing against the records) are retried; the reason
/// starts with the status.
#[test]
fn statuses_408_5xx_and_600_up_are_transient() {
    for (status, starts) in [
        (408, "HTTP 408 "),
        (500, "HTTP 500 "),
        (600, "HTTP 600 (not a status HTTP defines): "),
        (999, "HTTP 999 (not a status HTTP defines): "),
    ] {
        let server = Receiver::replying(status);
        let mut sink = sink(&http_config(&server.url("/")));
        let outcome = deliver(&mut *sink, &records(0, &[1], &[b"a"]));
        assert!(
            matches!(&outcome, Outcome::Retry { reason, .. } if reason.starts_with(starts)),
            "{outcome:?}"
        );
    }
}

#[test]
fn status_400_rejects_every_record_with_the_reason() {
    let long_body = format!("invalid event: {}", "x".repeat(500));
    let server = Receiver::start(move |_| Reply::status(400).body(long_body.as_bytes()));
    let url = server.url("/strict");
    let mut sink = sink(&http_config(&url));
    let recs = records(0, &[1, 2, 3], &[b"a", b"b\nc", b"d"]);
    let Outcome::Split(outcomes) = deliver(&mut *sink, &recs) else {
        panic!("expected a split")
    };
    let want = format!(
        "HTTP 400 Bad Request: invalid event: {} (POST {url})",
        "x".repeat(200 - 15)
    );
    assert_eq!(outcomes[0], RecordOutcome::Rejected(want.clone()));
    assert!(
        matches!(&outcomes[1], RecordOutcome::Rejected(r) if r.starts_with("record contains a newline"))
    );
    assert_eq!(outcomes[2], RecordOutcome::Rejected(want));
}

#[test]
fn redirect_is_not_followed_and_is_transient() {
    let server =
        Receiver::start(|_| Reply::status(301).header("Location", "http://elsewhere.test/"));
    let mut sink = sink(&http_config(&server.url("/old")));
    let outcome = deliver(&mut *sink, &records(0, &[1], &[b"a"]));
    match outcome {
        Outcome::Retry { reason, .. } => assert!(
            reason.starts_with("HTTP 301 Moved Permanently: redirects are not followed; point sink.url at the final address (Location: http://elsewhere.test/)"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
}

/// A loopback port with nothing listening on it.
fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/x")
}

#[test]
fn connection_refused_is_transient_and_unhealthy() {
    let url = closed_port_url();
    let mut sink = sink(&http_config(&url));
    match deliver(&mut *sink, &records(0, &[1], &[b"a"])) {
        Outcome::Retry {
            after: None,
            reason,
        } => {
            assert!(reason.starts_with("connection failed: "), "{reason}");
            assert!(reason.ends_with(&format!("(POST {url})")), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(sink.health_check(), Health::Unhealthy(r) if r.contains(&url)));
}

#[test]
fn health_check_connects_without_a_request() {
    let server = Receiver::replying(200);
    let mut sink = sink(&http_config(&server.url("/")));
    assert_eq!(sink.health_check(), Health::Healthy);
    std::thread::sleep(Duration::from_millis(50));
    assert!(server.requests().is_empty());
}

#[test]
fn timeout_is_transient() {
    let server = Receiver::start(|_| Reply::status(200).after(Duration::from_secs(3)));
    let cfg = HttpConfig {
        timeout_ms: Some(200),
        ..http_config(&server.url("/slow"))
    };
    let mut sink = sink(&cfg);
    let started = Instant::now();
    let outcome = deliver(&mut *sink, &records(0, &[1], &[b"a"]));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    match outcome {
        Outcome::Retry { reason, .. } => {
            assert!(
                reason.starts_with("no response within sink.timeout_ms = 200 (POST http://"),
                "{reason}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn keep_alive_reuses_the_connection() {
    let server = Receiver::replying(200);
    let mut sink = sink(&http_config(&server.url("/")));
    for seq in 0..5 {
        assert_eq!(
            deliver(&mut *sink, &records(0, &[seq], &[b"a"])),
            Outcome::Committed
        );
    }
    assert_eq!(server.requests().len(), 5);
    assert_eq!(server.connections(), 1);
}

fn per_record_config(url: &str, concurrency: u32) -> HttpConfig {
    HttpConfig {
        delivery: Some(Delivery::PerRecord),
        concurrency: Some(concurrency),
        ..http_config(url)
    }
}

#[test]
fn per_record_sends_raw_bodies_and_reports_in_order() {
    let server = Receiver::start(|r| {
        if r.body.starts_with(b"bad") {
            Reply::status(422).body(b"nope")
        } else {
            Reply::status(201)
        }
    });
    let url = server.url("/one");
    let mut sink = sink(&per_record_config(&url, 3));
    let payloads: [&[u8]; 5] = [b"r0", b"bad\nr1", b"r2\nwith newline", b"bad r3", b"r4"];
    let recs = records(7, &[20, 21, 22, 24, 25], &payloads);
    let rejected = format!("HTTP 422 Unprocessable Entity: nope (POST {url})");
    assert_eq!(
        deliver(&mut *sink, &recs),
        Outcome::Split(vec![
            RecordOutcome::Committed,
            RecordOutcome::Rejected(rejected.clone()),
            RecordOutcome::Committed,
            RecordOutcome::Rejected(rejected),
            RecordOutcome::Committed,
        ])
    );
    let mut received = server.requests();
    received.sort_by_key(|r| {
        r.header("spillway-seq-first")
            .unwrap()
            .parse::<u64>()
            .unwrap()
    });
    assert_eq!(received.len(), 5);
    for (r, (rec, payload)) in received.iter().zip(recs.iter().zip(payloads)) {
        let seq = rec.seq.to_string();
        assert_eq!(r.body, payload);
        assert_eq!(
            r.header("idempotency-key"),
            Some(format!("spillway-unset-7-{seq}").as_str())
        );
        assert_eq!(r.header("spillway-shard"), Some("7"));
        assert_eq!(r.header("spillway-seq-first"), Some(seq.as_str()));
        assert_eq!(r.header("spillway-seq-last"), Some(seq.as_str()));
        assert_eq!(r.header("spillway-record-count"), Some("1"));
        assert_eq!(r.header("spillway-seqs"), None);
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    }
}

#[test]
fn per_record_keeps_concurrency_requests_in_flight() {
    let server = Receiver::start(|_| Reply::status(200).after(Duration::from_millis(150)));
    let mut sink = sink(&per_record_config(&server.url("/"), 3));
    let payloads: Vec<&[u8]> = vec![b"x"; 9];
    let seqs: Vec<u64> = (0..9).collect();
    let started = Instant::now();
    assert_eq!(
        deliver(&mut *sink, &records(0, &seqs, &payloads)),
        Outcome::Committed
    );
    assert_eq!(server.requests().len(), 9);
    assert_eq!(server.in_flight_max(), 3);
    // 9 requests, 3 at a time, 150 ms each: about 450 ms, not 1350 ms.
    assert!(
        started.elapsed() < Duration::from_millis(1200),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn per_record_first_failure_retries_the_batch_and_stops_sending() {
    let server = Receiver::start(|r| {
        if r.body == b"r0" {
            Reply::status(503).header("Retry-After", "1")
        } else {
            Reply::status(200).after(Duration::from_millis(50))
        }
    });
    let mut sink = sink(&per_record_config(&server.url("/"), 2));
    let payloads: Vec<&[u8]> = vec![b"r0", b"r1", b"r2", b"r3", b"r4", b"r5"];
    let seqs: Vec<u64> = (0..6).collect();
    match deliver(&mut *sink, &records(0, &seqs, &payloads)) {
        Outcome::Retry { after, reason } => {
            assert_eq!(after, Some(Duration::from_secs(1)));
            assert!(
                reason.starts_with("HTTP 503 Service Unavailable"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // r0 and r1 start together; once r0 fails nothing new starts.
    assert!(server.requests().len() < 6, "{}", server.requests().len());
}

#[test]
fn per_record_later_failure_commits_the_prefix() {
    let server = Receiver::start(|r| {
        if r.body == b"r2" {
            Reply::status(500)
        } else {
            Reply::status(200)
        }
    });
    let mut sink = sink(&per_record_config(&server.url("/"), 1));
    let payloads: Vec<&[u8]> = vec![b"r0", b"r1", b"r2", b"r3"];
    let outcome = deliver(&mut *sink, &records(0, &[0, 1, 2, 3], &payloads));
    assert_eq!(
        outcome,
        Outcome::Split(vec![
            RecordOutcome::Committed,
            RecordOutcome::Committed,
            RecordOutcome::Retry,
            RecordOutcome::Retry
        ])
    );
    assert_eq!(
        server.requests().len(),
        3,
        "concurrency 1: nothing is sent after the failure"
    );
}

#[test]
fn describe_names_the_target_without_secrets() {
    let cfg = http_config("https://u:p@example.test/in?key=s3cret");
    let factory = crate::build(
        &table(&cfg, DeliveryConfig::default()),
        &crate::SinkEnv::detached(),
    )
    .unwrap();
    assert_eq!(
        factory.describe(),
        "http POST https://example.test/in (batched, ndjson, timeout 10000 ms)"
    );
}

#[test]
fn dropping_a_sink_inside_an_async_context_does_not_panic() {
    let server = Receiver::replying(200);
    let mut sink = sink(&http_config(&server.url("/")));
    assert_eq!(
        deliver(&mut *sink, &records(0, &[1], &[b"a"])),
        Outcome::Committed
    );
    let outer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    outer.block_on(async move { drop(sink) });
}
