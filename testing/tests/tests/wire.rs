//! The weir v1 wire protocol (plus spillway's extensions) over the real
//! socket: every nack reason from a crafted frame, close-after-nack rules,
//! ordering of answers before a refusal, and exact response bytes.

use std::thread;
use std::time::Duration;

use spillway_tests::*;

/// Recompute the header CRC (bytes 12..16) after editing header bytes 0..12.
fn fix_header_crc(f: &mut [u8]) {
    let crc = crc32fast::hash(&f[..12]);
    f[12..16].copy_from_slice(&crc.to_le_bytes());
}

/// A push frame with one header byte changed (and the header CRC still valid).
fn push_with_header_byte(at: usize, value: u8) -> Vec<u8> {
    let mut f = push_frame(Tier::Sync, b"payload");
    f[at] = value;
    fix_header_crc(&mut f);
    f
}

/// On a fresh connection: send `bytes`, expect exactly the nack for
/// `reason`, then end-of-file.
fn expect_refused(d: &Daemon, bytes: &[u8], reason: NackReason, what: &str) {
    let mut c = d.raw();
    c.send(bytes);
    let got = c.read_frame();
    assert_eq!(
        got,
        expected_nack(reason),
        "{what}: expected a {reason} nack, got {got:02x?} ({:?})",
        decode_response(&mut bytes::BytesMut::from(&got[..]))
    );
    c.expect_closed();
}

/// Every record stored so far, as text, across shards.
fn stored(d: &Daemon) -> Vec<String> {
    texts(&d.read_all_records())
}

#[test]
fn ack_and_health_response_bytes_are_exact() {
    let d = Daemon::start("");
    let mut c = d.raw();

    // Sanity of our frame builder against the spec's worked example.
    let hello = push_frame(Tier::Sync, b"hello");
    assert_eq!(
        hello,
        [
            0x57, 0x45, 0x49, 0x52, 0x01, 0x01, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x66, 0xad,
            0x7d, 0x3c, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x86, 0xa6, 0x10, 0x36
        ]
    );
    c.send(&hello);
    // WEIR 01 02 01 00 | 00000000 | crc | 00000000
    let ack = c.read_frame();
    assert_eq!(
        ack,
        [
            0x57, 0x45, 0x49, 0x52, 0x01, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc9, 0x47,
            0x4b, 0x3a, 0x00, 0x00, 0x00, 0x00
        ],
        "ack bytes: {ack:02x?}"
    );
    assert_eq!(ack, expected_ack());
    assert_eq!(
        u32::from_le_bytes(ack[12..16].try_into().unwrap()),
        crc32fast::hash(&ack[..12])
    );

    c.send(&health_frame());
    let hc = c.read_frame();
    assert_eq!(
        hc,
        [
            0x57, 0x45, 0x49, 0x52, 0x01, 0x05, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x47, 0x79,
            0xec, 0xff, 0x00, 0x00, 0x00, 0x00
        ],
        "health check response bytes: {hc:02x?}"
    );

    c.send(&batch_frame(Tier::Sync, &[b"a", b"bc", b"def"]));
    let ab = c.read_frame();
    assert_eq!(ab, expected_ack_batch(3), "ack batch bytes: {ab:02x?}");
    assert_eq!(&ab[16..20], &[3, 0, 0, 0]);

    let recs = d.read_all_records();
    assert_eq!(texts(&recs), ["hello", "a", "bc", "def"]);
    assert!(recs.iter().all(|r| r.meta.tier == 0x01), "{recs:?}");
}

#[test]
fn health_check_is_answered_and_keeps_the_connection() {
    let d = Daemon::start("");
    let mut c = d.raw();
    c.expect_health();
    c.expect_health();
    // Any tier a push could carry is taken on a health check.
    c.send(&frame(msg::HEALTH_CHECK, 0x03, 0, &[]));
    c.expect_frame(
        &expected_health_response(),
        "health check with tier byte 0x03",
    );
    // A payload on a health check is CRC-checked and ignored.
    c.send(&frame(msg::HEALTH_CHECK, 0x01, 0, b"ignored"));
    c.expect_frame(&expected_health_response(), "health check with a payload");
    // Still open and usable.
    c.send(&push_frame(Tier::Buffered, b"after-health"));
    c.expect_frame(&expected_ack(), "push after health checks");
    c.expect_health();
    assert_eq!(stored(&d), ["after-health"]);

    let mut client = d.client();
    client.health().expect("health via the client");

    // A tier byte outside 1-3 is refused on a health check too, as weir v1
    // does (it checks the whole header before the type): UnknownMessage,
    // then the connection closes.
    for tier in [0x00, 0x07] {
        let mut c = d.raw();
        c.send(&frame(msg::HEALTH_CHECK, tier, 0, &[]));
        c.expect_frame(
            &expected_nack(NackReason::UnknownMessage),
            &format!("health check with tier byte {tier:#04x}"),
        );
        c.expect_closed_within(Duration::from_secs(5));
    }
}

#[test]
fn bad_magic_is_refused_and_closed() {
    let d = Daemon::start("");
    let mut f = push_frame(Tier::Sync, b"payload");
    f[..4].copy_from_slice(b"WEIX");
    fix_header_crc(&mut f);
    expect_refused(&d, &f, NackReason::BadMagic, "magic WEIX");
    expect_refused(
        &d,
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        NackReason::BadMagic,
        "an HTTP request",
    );
    // Decode order: magic before version and header CRC.
    let mut f = push_frame(Tier::Sync, b"payload");
    f[0] = b'X';
    f[4] = 9;
    f[12] ^= 0xff;
    expect_refused(
        &d,
        &f,
        NackReason::BadMagic,
        "bad magic, version and header crc",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn version_mismatch_is_refused_with_the_daemon_version_and_closed() {
    let d = Daemon::start("");
    let mut c = d.raw();
    c.send(&push_with_header_byte(4, 0x02));
    let got = c.read_frame();
    // Nack payload [0x02, 0x01]: the reason and the version the daemon speaks.
    assert_eq!(
        got,
        [
            0x57, 0x45, 0x49, 0x52, 0x01, 0x03, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00, 0xf6, 0x84,
            0x35, 0x36, 0x02, 0x01, 0xeb, 0x40, 0xe8, 0x04
        ],
        "version mismatch nack: {got:02x?}"
    );
    assert_eq!(&got[16..18], &[0x02, 0x01]);
    c.expect_closed();
    // Decode order: version before the header CRC.
    let mut f = push_with_header_byte(4, 0x00);
    f[12] ^= 0x55;
    expect_refused(
        &d,
        &f,
        NackReason::VersionMismatch,
        "version 0 with a bad header crc",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn bad_header_crc_is_refused_and_closed() {
    let d = Daemon::start("");
    let mut f = push_frame(Tier::Sync, b"payload");
    f[13] ^= 0x01;
    expect_refused(
        &d,
        &f,
        NackReason::BadHeaderCrc,
        "header crc off by one bit",
    );
    // A header byte changed without fixing the CRC (tier Sync -> Batched).
    let mut f = push_frame(Tier::Sync, b"payload");
    f[6] = 0x02;
    expect_refused(
        &d,
        &f,
        NackReason::BadHeaderCrc,
        "tier changed after the crc",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn payload_too_large_is_refused_from_the_header_alone() {
    let d = Daemon::start("[server]\npayload_bytes_max = 1024\n");
    // At the cap: accepted.
    let mut ok = d.raw();
    ok.send(&push_frame(Tier::Sync, &[b'x'; 1024]));
    ok.expect_frame(&expected_ack(), "a 1024-byte payload at a 1024-byte cap");
    let mut ok_batch = d.raw();
    let rec = [b'y'; 1016]; // 4 (count) + 4 (length) + 1016 = 1024 bytes of payload
    ok_batch.send(&batch_frame(Tier::Sync, &[&rec]));
    ok_batch.expect_frame(
        &expected_ack_batch(1),
        "a 1024-byte batch payload at a 1024-byte cap",
    );

    // Only the 16-byte header announcing 2000 bytes is sent: the nack must
    // come without the payload ever arriving.
    let full = push_frame(Tier::Sync, &[b'z'; 2000]);
    let mut c = d.raw();
    c.send(&full[..16]);
    match c.read_frame_within(Duration::from_secs(5)) {
        ReadOutcome::Frame(f) => {
            assert_eq!(f, expected_nack(NackReason::PayloadTooLarge), "{f:02x?}")
        }
        other => {
            panic!("expected a PayloadTooLarge nack before the payload was sent, got {other:?}")
        }
    }
    c.expect_closed();

    // One byte over the cap, as a batch.
    let big = [b'q'; 1017];
    let mut f = batch_frame(Tier::Sync, &[&big]);
    f.truncate(16);
    expect_refused(
        &d,
        &f,
        NackReason::PayloadTooLarge,
        "a 1025-byte batch payload",
    );

    // Decode order: reserved flags before the payload length.
    let mut f = full[..16].to_vec();
    f[7] = 0x80;
    fix_header_crc(&mut f);
    expect_refused(
        &d,
        &f,
        NackReason::ReservedFlagsSet,
        "oversized with flags set",
    );

    // Two connections, so possibly two shards: compare without order.
    let mut lens: Vec<usize> = d
        .read_all_records()
        .iter()
        .map(|r| r.payload.len())
        .collect();
    lens.sort();
    assert_eq!(lens, [1016, 1024]);
    ok.expect_health();
}

#[test]
fn bad_payload_crc_is_refused_and_closed() {
    let d = Daemon::start("");
    let mut f = push_frame(Tier::Sync, b"payload");
    let n = f.len();
    f[n - 1] ^= 0x80;
    expect_refused(&d, &f, NackReason::BadPayloadCrc, "trailer flipped");
    let mut f = push_frame(Tier::Sync, b"payload");
    f[17] ^= 0x01; // a payload byte
    expect_refused(&d, &f, NackReason::BadPayloadCrc, "payload byte flipped");
    let mut f = batch_frame(Tier::Sync, &[b"one", b"two"]);
    f[20] ^= 0x01;
    expect_refused(&d, &f, NackReason::BadPayloadCrc, "batch payload flipped");
    // The health check's (ignored) payload is still CRC-checked.
    let mut f = frame(msg::HEALTH_CHECK, 0x01, 0, b"abc");
    let n = f.len();
    f[n - 2] ^= 0x01;
    expect_refused(
        &d,
        &f,
        NackReason::BadPayloadCrc,
        "health check payload crc",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn empty_payload_is_refused_and_closed() {
    let d = Daemon::start("");
    expect_refused(
        &d,
        &push_frame(Tier::Sync, b""),
        NackReason::EmptyPayload,
        "empty push",
    );
    expect_refused(
        &d,
        &push_frame(Tier::Buffered, b""),
        NackReason::EmptyPayload,
        "empty buffered push",
    );
    expect_refused(
        &d,
        &frame(msg::PUSH_BATCH, 0x01, 0, b""),
        NackReason::EmptyPayload,
        "empty push batch frame",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn unknown_message_is_refused_and_closed() {
    let d = Daemon::start("");
    expect_refused(
        &d,
        &frame(0x09, 0x01, 0, b"x"),
        NackReason::UnknownMessage,
        "unknown type 0x09",
    );
    expect_refused(
        &d,
        &frame(0x00, 0x01, 0, b"x"),
        NackReason::UnknownMessage,
        "unknown type 0x00",
    );
    expect_refused(
        &d,
        &frame(0xff, 0x01, 0, b""),
        NackReason::UnknownMessage,
        "unknown type 0xff",
    );
    // Response types sent by a client.
    expect_refused(
        &d,
        &frame(msg::ACK, 0x01, 0, b""),
        NackReason::UnknownMessage,
        "a client sending Ack (0x02)",
    );
    expect_refused(
        &d,
        &frame(msg::NACK, 0x01, 0, &[0x01]),
        NackReason::UnknownMessage,
        "a client sending Nack",
    );
    expect_refused(
        &d,
        &frame(msg::HEALTH_CHECK_RESPONSE, 0x01, 0, b""),
        NackReason::UnknownMessage,
        "a client sending HealthCheckResponse",
    );
    expect_refused(
        &d,
        &frame(msg::ACK_BATCH, 0x01, 0, &[1, 0, 0, 0]),
        NackReason::UnknownMessage,
        "a client sending AckBatch",
    );
    // Unknown tiers on pushes.
    expect_refused(
        &d,
        &push_with_header_byte(6, 0x07),
        NackReason::UnknownMessage,
        "push with tier 0x07",
    );
    expect_refused(
        &d,
        &push_with_header_byte(6, 0x00),
        NackReason::UnknownMessage,
        "push with tier 0x00",
    );
    let mut f = batch_frame(Tier::Sync, &[b"x"]);
    f[6] = 0x07;
    fix_header_crc(&mut f);
    expect_refused(
        &d,
        &f,
        NackReason::UnknownMessage,
        "push batch with tier 0x07",
    );
    // Decode order: message type before flags.
    expect_refused(
        &d,
        &frame(0x09, 0x01, 0x01, b"x"),
        NackReason::UnknownMessage,
        "unknown type with flags set",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn reserved_flags_are_refused_and_closed() {
    let d = Daemon::start("");
    for flags in [0x01u8, 0x80, 0xff] {
        expect_refused(
            &d,
            &push_with_header_byte(7, flags),
            NackReason::ReservedFlagsSet,
            &format!("flags {flags:#04x}"),
        );
    }
    expect_refused(
        &d,
        &frame(msg::HEALTH_CHECK, 0x01, 0x02, b""),
        NackReason::ReservedFlagsSet,
        "health check with flags",
    );
    // Decode order: flags before an empty payload.
    expect_refused(
        &d,
        &frame(msg::PUSH, 0x01, 0x01, b""),
        NackReason::ReservedFlagsSet,
        "empty push with flags",
    );
    assert!(stored(&d).is_empty());
}

#[test]
fn malformed_push_batches_are_refused_and_closed() {
    let d = Daemon::start("");
    let batch = |payload: &[u8]| frame(msg::PUSH_BATCH, 0x01, 0, payload);
    expect_refused(
        &d,
        &batch(&batch_payload(0, &[])),
        NackReason::EmptyPayload,
        "count 0",
    );
    // Count 0 followed by bytes is still count 0.
    expect_refused(
        &d,
        &batch(&batch_payload(0, &[b"x"])),
        NackReason::EmptyPayload,
        "count 0 with a record",
    );
    // A record length running past the payload.
    let mut p = batch_payload(1, &[b"abc"]);
    p[4..8].copy_from_slice(&900u32.to_le_bytes());
    expect_refused(
        &d,
        &batch(&p),
        NackReason::UnknownMessage,
        "length 900 with 3 bytes left",
    );
    // Count larger than the records present.
    expect_refused(
        &d,
        &batch(&batch_payload(3, &[b"a", b"b"])),
        NackReason::UnknownMessage,
        "count 3, two records",
    );
    // Payload shorter than the count field.
    expect_refused(
        &d,
        &batch(&[1, 0]),
        NackReason::UnknownMessage,
        "2-byte batch payload",
    );
    // Bytes after the last record.
    let mut p = batch_payload(1, &[b"a"]);
    p.push(0x42);
    expect_refused(&d, &batch(&p), NackReason::UnknownMessage, "trailing byte");
    // An empty record.
    expect_refused(
        &d,
        &batch(&batch_payload(2, &[b"a", b""])),
        NackReason::EmptyPayload,
        "empty second record",
    );
    // No record of a refused batch is stored (the valid first records included).
    assert!(stored(&d).is_empty(), "{:?}", stored(&d));
}

#[test]
fn frames_before_a_bad_one_are_answered_first_and_later_ones_dropped() {
    let d = Daemon::start("");
    let mut c = d.raw();
    let mut bad = push_frame(Tier::Sync, b"bad");
    let n = bad.len();
    bad[n - 1] ^= 0x01;
    let mut all = Vec::new();
    all.extend(push_frame(Tier::Sync, b"before-1"));
    all.extend(health_frame());
    all.extend(push_frame(Tier::Batched, b"before-2"));
    all.extend(batch_frame(Tier::Buffered, &[b"before-3", b"before-4"]));
    all.extend(push_frame(Tier::Sync, b"before-5"));
    all.extend(bad);
    all.extend(push_frame(Tier::Sync, b"after-1"));
    all.extend(health_frame());
    c.send(&all);
    c.expect_frame(&expected_ack(), "answer 1 (push)");
    c.expect_frame(&expected_health_response(), "answer 2 (health)");
    c.expect_frame(&expected_ack(), "answer 3 (push)");
    c.expect_frame(&expected_ack_batch(2), "answer 4 (batch)");
    c.expect_frame(&expected_ack(), "answer 5 (push)");
    c.expect_frame(
        &expected_nack(NackReason::BadPayloadCrc),
        "answer 6 (bad frame)",
    );
    c.expect_closed();
    let recs = d.read_all_records();
    assert_eq!(
        texts(&recs),
        ["before-1", "before-2", "before-3", "before-4", "before-5"]
    );
    assert_eq!(
        recs.iter().map(|r| r.meta.tier).collect::<Vec<_>>(),
        [1, 2, 3, 3, 1]
    );

    // Same with a header-level fault (unknown type) after acked frames.
    let mut c = d.raw();
    let mut all = push_frame(Tier::Sync, b"second-1");
    all.extend(frame(0x09, 0x01, 0, b"?"));
    all.extend(push_frame(Tier::Sync, b"after-2"));
    c.send(&all);
    c.expect_frame(&expected_ack(), "push before an unknown type");
    c.expect_frame(&expected_nack(NackReason::UnknownMessage), "unknown type");
    c.expect_closed();
    let all_texts = stored(&d);
    assert!(all_texts.contains(&"second-1".to_string()));
    assert!(
        !all_texts.iter().any(|t| t.starts_with("after")),
        "{all_texts:?}"
    );
}

#[test]
fn garbage_on_one_connection_does_not_harm_another() {
    let d = Daemon::start("");
    let mut good = d.client();
    good.health().unwrap();
    let socket = d.socket_path().to_path_buf();
    let attacker = thread::spawn(move || {
        let mut rng = Rng::new(0x5eed_0001);
        let mut refused = 0;
        for i in 0..60 {
            let mut c = RawConn::connect(&socket);
            let mut bytes: Vec<u8> = (0..64).map(|_| rng.below(256) as u8).collect();
            match i % 4 {
                // Random bytes: never "WEIR" at the front.
                0 => bytes[0] = b'Z',
                1 => bytes = push_with_header_byte(7, 0x01),
                2 => {
                    bytes = push_frame(Tier::Sync, b"zz");
                    let n = bytes.len();
                    bytes[n - 1] ^= 0xff;
                }
                _ => bytes = frame(0x09, 0x01, 0, &bytes),
            }
            c.send(&bytes);
            match c.read_frame_within(Duration::from_secs(10)) {
                ReadOutcome::Frame(f) => {
                    assert_eq!(f[5], msg::NACK, "garbage got a non-nack answer {f:02x?}");
                    refused += 1;
                }
                other => panic!("garbage got {other:?} instead of a nack"),
            }
            c.expect_closed();
        }
        refused
    });
    let mut sent = Vec::new();
    for i in 0..300 {
        let p = format!("good-{i}");
        good.push(Tier::Sync, p.as_bytes())
            .unwrap_or_else(|e| panic!("push {i} on the good connection: {e}"));
        sent.push(p);
        if i % 50 == 0 {
            good.health().unwrap();
        }
    }
    assert_eq!(attacker.join().expect("attacker thread"), 60);
    good.health().unwrap();
    good.push(Tier::Sync, b"good-last").unwrap();
    sent.push("good-last".into());
    assert_eq!(stored(&d), sent);
}

#[test]
fn frames_split_at_every_byte_are_decoded() {
    let d = Daemon::start("");
    let mut c = d.raw();
    let mut all = push_frame(Tier::Sync, b"split-1");
    all.extend(batch_frame(Tier::Batched, &[b"split-2", b"split-3"]));
    all.extend(health_frame());
    all.extend(push_frame(Tier::Buffered, b"split-4"));
    for b in &all {
        c.send(std::slice::from_ref(b));
        thread::sleep(Duration::from_micros(300));
    }
    c.expect_frame(&expected_ack(), "split push");
    c.expect_frame(&expected_ack_batch(2), "split batch");
    c.expect_frame(&expected_health_response(), "split health check");
    c.expect_frame(&expected_ack(), "split buffered push");
    assert_eq!(stored(&d), ["split-1", "split-2", "split-3", "split-4"]);
}

#[test]
fn default_cap_is_the_16_mib_hard_maximum() {
    let d = Daemon::start("");
    // Exactly 16 MiB is accepted.
    let mut big = b"sixteen-mib:".to_vec();
    big.resize(16 * 1024 * 1024, b'm');
    let mut client = d.client();
    client.push(Tier::Sync, &big).expect("a 16 MiB push");
    // One byte more is refused from the header alone.
    let mut header = push_frame(Tier::Sync, b"x")[..16].to_vec();
    header[8..12].copy_from_slice(&(16 * 1024 * 1024 + 1u32).to_le_bytes());
    fix_header_crc(&mut header);
    expect_refused(&d, &header, NackReason::PayloadTooLarge, "16 MiB + 1");
    header[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    fix_header_crc(&mut header);
    expect_refused(&d, &header, NackReason::PayloadTooLarge, "u32::MAX");
    let recs = d.read_all_records();
    assert_eq!(recs.len(), 1);
    assert!(recs[0].payload[..] == big[..]);
    client.health().unwrap();
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The conformance vectors every client runs (protocol/conformance), run
/// here against the real daemon: each request vector is answered with its
/// answer; each rejected request with its nack, then the close.
#[test]
fn the_daemon_answers_every_conformance_vector_as_it_says() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../protocol/conformance/vectors.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let d = Daemon::start("");
    let mut checked = 0;
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let kind = v["kind"].as_str().unwrap();
        if kind != "request" && kind != "rejected_request" {
            continue;
        }
        let mut c = d.raw();
        c.send(&unhex(v["frame"].as_str().unwrap()));
        let answer = unhex(v["answer"].as_str().unwrap());
        match c.read_frame_within(IO_TIMEOUT) {
            ReadOutcome::Frame(f) => assert_eq!(f, answer, "{name}"),
            other => panic!("{name}: expected its answer, got {other:?}"),
        }
        if kind == "rejected_request" {
            assert_eq!(v["closes_connection"], true, "{name}");
            c.expect_closed();
        } else {
            c.expect_health();
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} vectors");
}
