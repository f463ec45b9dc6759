//! Generates `protocol/conformance/vectors.json` from this crate's codec and
//! fails if the file on disk differs: the vectors every client in
//! `clients/` runs are the Rust codec's own bytes. `SPILLWAY_BLESS=1`
//! rewrites the file (see `protocol/conformance/README.md`).
//!
//! Every vector is also checked here against the codec: requests encode to
//! their frame, responses decode to their meaning, rejected requests are
//! refused with their reason, rejected responses are refused.

use std::path::PathBuf;

use bytes::BytesMut;
use serde_json::{json, Value};
use spillway_protocol::{
    decode_request, decode_response, encode_frame, encode_health_check, encode_push,
    encode_push_batch, encode_response, MessageType, NackReason, Response, Tier,
    PAYLOAD_BYTES_HARD_MAX, VERSION,
};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn response_frame(r: Response) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_response(r, &mut out);
    out.to_vec()
}

fn frame(message_type: u8, tier: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_frame(message_type, tier, flags, payload, &mut out);
    out.to_vec()
}

/// A frame whose header says `len` payload bytes and carries none (a daemon
/// judges the length from the header alone), with a correct header CRC.
fn header_only(message_type: u8, tier: u8, flags: u8, len: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(16);
    h.extend_from_slice(b"WEIR");
    h.extend_from_slice(&[VERSION, message_type, tier, flags]);
    h.extend_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Recompute the header CRC after editing bytes 0..12.
fn fix_header_crc(f: &mut [u8]) {
    let crc = crc32fast::hash(&f[..12]);
    f[12..16].copy_from_slice(&crc.to_le_bytes());
}

fn batch_payload(records: &[&[u8]]) -> Vec<u8> {
    let mut p = (records.len() as u32).to_le_bytes().to_vec();
    for r in records {
        p.extend_from_slice(&(r.len() as u32).to_le_bytes());
        p.extend_from_slice(r);
    }
    p
}

const PUSH: u8 = MessageType::Push as u8;
const PUSH_BATCH: u8 = MessageType::PushBatch as u8;
const SYNC: u8 = Tier::Sync as u8;

struct Vectors(Vec<Value>);

impl Vectors {
    fn push_request(&mut self, name: &str, description: &str, tier: Tier, payload: &[u8]) {
        let mut out = BytesMut::new();
        encode_push(tier, payload, &mut out);
        self.0.push(json!({
            "name": name, "kind": "request", "description": description,
            "request": { "type": "push", "tier": tier.name(), "payload": hex(payload) },
            "frame": hex(&out),
            "answer": hex(&response_frame(Response::Ack)),
        }));
    }

    fn batch_request(&mut self, name: &str, description: &str, tier: Tier, records: &[&[u8]]) {
        let mut out = BytesMut::new();
        encode_push_batch(tier, records, &mut out);
        let answer = response_frame(Response::AckBatch {
            count: records.len() as u32,
        });
        self.0.push(json!({
            "name": name, "kind": "request", "description": description,
            "request": {
                "type": "push_batch", "tier": tier.name(),
                "records": records.iter().map(|r| hex(r)).collect::<Vec<_>>(),
            },
            "frame": hex(&out),
            "answer": hex(&answer),
        }));
    }

    fn response(&mut self, name: &str, description: &str, r: Response) {
        let meaning = match r {
            Response::Ack => json!({ "type": "ack" }),
            Response::HealthCheckResponse => json!({ "type": "health_check_response" }),
            Response::AckBatch { count } => json!({ "type": "ack_batch", "count": count }),
            Response::Nack(reason) => {
                let mut m = json!({
                    "type": "nack", "reason": reason.name(), "reason_byte": reason.as_byte(),
                    "retryable": reason.is_retryable(),
                    "closes_connection": reason.closes_connection(),
                });
                if reason == NackReason::VersionMismatch {
                    m["daemon_version"] = json!(VERSION);
                }
                m
            }
        };
        self.0.push(json!({
            "name": name, "kind": "response", "description": description,
            "frame": hex(&response_frame(r)), "response": meaning,
        }));
    }

    fn rejected_request(&mut self, name: &str, description: &str, f: &[u8], reason: NackReason) {
        self.0.push(json!({
            "name": name, "kind": "rejected_request", "description": description,
            "frame": hex(f),
            "nack": { "reason": reason.name(), "reason_byte": reason.as_byte() },
            "answer": hex(&response_frame(Response::Nack(reason))),
            "closes_connection": reason.closes_connection(),
        }));
    }

    fn rejected_response(&mut self, name: &str, description: &str, f: &[u8], fault: &str) {
        self.0.push(json!({
            "name": name, "kind": "rejected_response", "description": description,
            "frame": hex(f), "fault": fault,
        }));
    }
}

fn build() -> Value {
    let mut v = Vectors(Vec::new());

    // Requests a client must produce.
    v.push_request(
        "push_sync_hello",
        "The known frame of docs/wire-protocol.md: Push, tier Sync, payload \"hello\".",
        Tier::Sync,
        b"hello",
    );
    v.push_request(
        "push_batched_hello",
        "Push at tier Batched.",
        Tier::Batched,
        b"hello",
    );
    v.push_request(
        "push_buffered_hello",
        "Push at tier Buffered.",
        Tier::Buffered,
        b"hello",
    );
    v.push_request(
        "push_one_byte",
        "The smallest record: one byte.",
        Tier::Sync,
        b"x",
    );
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    v.push_request(
        "push_every_byte_value",
        "Records are bytes, not text: every byte value 0x00..=0xff once.",
        Tier::Buffered,
        &all_bytes,
    );
    v.push_request(
        "push_utf8_json",
        "A JSON document as UTF-8 bytes (multi-byte characters included).",
        Tier::Sync,
        "{\"user\":\"zoë\",\"n\":1}".as_bytes(),
    );
    v.batch_request(
        "push_batch_sync_a_bc",
        "The PushBatch of docs/wire-protocol.md: records \"a\" and \"bc\" at tier Sync.",
        Tier::Sync,
        &[b"a", b"bc"],
    );
    v.batch_request(
        "push_batch_one_record",
        "A PushBatch of one record is valid and answered by AckBatch count 1.",
        Tier::Batched,
        &[b"only"],
    );
    let many: Vec<Vec<u8>> = (0..10).map(|i| format!("rec-{i}").into_bytes()).collect();
    let many_refs: Vec<&[u8]> = many.iter().map(|r| r.as_slice()).collect();
    v.batch_request(
        "push_batch_buffered_ten",
        "Ten records at tier Buffered.",
        Tier::Buffered,
        &many_refs,
    );
    let mut out = BytesMut::new();
    encode_health_check(&mut out);
    v.0.push(json!({
        "name": "health_check", "kind": "request",
        "description": "HealthCheck: empty payload, tier byte filler 0x01.",
        "request": { "type": "health_check" },
        "frame": hex(&out),
        "answer": hex(&response_frame(Response::HealthCheckResponse)),
    }));

    // Responses a client must decode.
    v.response("ack", "Ack: empty payload, zero trailer.", Response::Ack);
    v.response(
        "health_check_response",
        "The answer to a HealthCheck.",
        Response::HealthCheckResponse,
    );
    v.response(
        "ack_batch_count_1",
        "AckBatch for a batch of one record.",
        Response::AckBatch { count: 1 },
    );
    v.response(
        "ack_batch_count_3",
        "AckBatch, count 3 (docs/wire-protocol.md).",
        Response::AckBatch { count: 3 },
    );
    v.response(
        "ack_batch_count_70000",
        "AckBatch with a count above 16 bits: the count is u32 LE.",
        Response::AckBatch { count: 70_000 },
    );
    for reason in NackReason::ALL {
        let what = if reason.is_retryable() {
            "retryable: the connection stays open, resend after a back-off"
        } else {
            "not retryable: the daemon closes the connection"
        };
        let extra = if reason == NackReason::VersionMismatch {
            " Its payload is two bytes: the reason and the daemon's version."
        } else {
            ""
        };
        v.response(
            &format!("nack_{}", reason.name()),
            &format!("Nack {} ({what}).{extra}", reason.name()),
            Response::Nack(reason),
        );
    }

    // Frames a daemon must refuse, with the reason it must give.
    let hello = frame(PUSH, SYNC, 0, b"hello");
    let mut f = hello.clone();
    f[0] = b'X';
    v.rejected_request(
        "reject_bad_magic",
        "Magic \"XEIR\" instead of \"WEIR\".",
        &f,
        NackReason::BadMagic,
    );
    let mut f = hello.clone();
    f[0] = b'X';
    f[12] ^= 0xff;
    v.rejected_request(
        "reject_bad_magic_before_bad_header_crc",
        "Bad magic and a bad header CRC: magic is checked first.",
        &f,
        NackReason::BadMagic,
    );
    let mut f = hello.clone();
    f[4] = 2;
    fix_header_crc(&mut f);
    v.rejected_request(
        "reject_version_2",
        "Version byte 2: the nack carries the daemon's version (1).",
        &f,
        NackReason::VersionMismatch,
    );
    let mut f = hello.clone();
    f[4] = 0;
    f[12] ^= 0xff;
    v.rejected_request(
        "reject_version_0_before_bad_header_crc",
        "Version 0 and a bad header CRC: the version is checked before the CRC.",
        &f,
        NackReason::VersionMismatch,
    );
    let mut f = hello.clone();
    f[12] ^= 0x01;
    v.rejected_request(
        "reject_bad_header_crc",
        "One bit of the header CRC flipped.",
        &f,
        NackReason::BadHeaderCrc,
    );
    let mut f = hello.clone();
    f[8] = 6;
    v.rejected_request(
        "reject_length_changed_under_header_crc",
        "The length byte changed without updating the header CRC.",
        &f,
        NackReason::BadHeaderCrc,
    );
    v.rejected_request(
        "reject_unknown_message_type",
        "Message type 0x09 is unassigned.",
        &frame(0x09, SYNC, 0, b"hello"),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_response_type_ack",
        "A client may not send a response type (Ack, 0x02).",
        &frame(MessageType::Ack as u8, SYNC, 0, b""),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_response_type_ack_batch",
        "A client may not send AckBatch (0x07).",
        &frame(MessageType::AckBatch as u8, SYNC, 0, &3u32.to_le_bytes()),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_push_tier_0",
        "A Push with tier byte 0x00.",
        &frame(PUSH, 0, 0, b"hello"),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_push_tier_4",
        "A Push with tier byte 0x04.",
        &frame(PUSH, 4, 0, b"hello"),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_health_check_tier_0",
        "A HealthCheck with tier byte 0x00: the tier byte is checked for every type, as weir v1 does.",
        &frame(MessageType::HealthCheck as u8, 0, 0, b""),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_health_check_tier_4",
        "A HealthCheck with tier byte 0x04.",
        &frame(MessageType::HealthCheck as u8, 4, 0, b""),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_push_batch_tier_0xff",
        "A PushBatch with tier byte 0xff.",
        &frame(PUSH_BATCH, 0xff, 0, &batch_payload(&[b"a"])),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_reserved_flags",
        "Flags byte 0x01 on a Push.",
        &frame(PUSH, SYNC, 0x01, b"hello"),
        NackReason::ReservedFlagsSet,
    );
    v.rejected_request(
        "reject_reserved_flags_before_payload_too_large",
        "Reserved flags and a length over the cap: flags are checked first.",
        &header_only(PUSH, SYNC, 0x80, PAYLOAD_BYTES_HARD_MAX + 1),
        NackReason::ReservedFlagsSet,
    );
    v.rejected_request(
        "reject_payload_too_large",
        "A header declaring 16 MiB + 1 payload bytes (over the hard cap): refused from the header alone.",
        &header_only(PUSH, SYNC, 0, PAYLOAD_BYTES_HARD_MAX + 1),
        NackReason::PayloadTooLarge,
    );
    v.rejected_request(
        "reject_push_batch_payload_too_large",
        "A PushBatch header declaring 0xffffffff payload bytes.",
        &header_only(PUSH_BATCH, SYNC, 0, u32::MAX),
        NackReason::PayloadTooLarge,
    );
    v.rejected_request(
        "reject_empty_push",
        "A Push with no payload.",
        &frame(PUSH, SYNC, 0, b""),
        NackReason::EmptyPayload,
    );
    v.rejected_request(
        "reject_empty_push_batch",
        "A PushBatch with no payload.",
        &frame(PUSH_BATCH, SYNC, 0, b""),
        NackReason::EmptyPayload,
    );
    let mut f = hello.clone();
    let last = f.len() - 1;
    f[last] ^= 0x01;
    v.rejected_request(
        "reject_bad_payload_crc",
        "One bit of the payload CRC flipped.",
        &f,
        NackReason::BadPayloadCrc,
    );
    let mut f = hello.clone();
    f[16] = b'j';
    v.rejected_request(
        "reject_payload_changed_under_crc",
        "The payload \"hello\" changed to \"jello\" without updating its CRC.",
        &f,
        NackReason::BadPayloadCrc,
    );
    v.rejected_request(
        "reject_batch_shorter_than_count",
        "A PushBatch payload of 3 bytes: too short for the record count.",
        &frame(PUSH_BATCH, SYNC, 0, &[1, 0, 0]),
        NackReason::UnknownMessage,
    );
    v.rejected_request(
        "reject_batch_count_0",
        "A PushBatch whose record count is 0.",
        &frame(PUSH_BATCH, SYNC, 0, &0u32.to_le_bytes()),
        NackReason::EmptyPayload,
    );
    let mut p = batch_payload(&[b"a"]);
    p.extend_from_slice(&0u32.to_le_bytes());
    p[0] = 2;
    v.rejected_request(
        "reject_batch_empty_record",
        "A PushBatch whose second record has length 0.",
        &frame(PUSH_BATCH, SYNC, 0, &p),
        NackReason::EmptyPayload,
    );
    let mut p = batch_payload(&[b"abc"]);
    p[4] = 9;
    v.rejected_request(
        "reject_batch_record_longer_than_payload",
        "A PushBatch record declaring 9 bytes when 3 remain.",
        &frame(PUSH_BATCH, SYNC, 0, &p),
        NackReason::UnknownMessage,
    );
    let mut p = batch_payload(&[b"a"]);
    p[0] = 2;
    p.extend_from_slice(&[1, 0]);
    v.rejected_request(
        "reject_batch_truncated_length_prefix",
        "A PushBatch whose second length prefix is cut after 2 of its 4 bytes.",
        &frame(PUSH_BATCH, SYNC, 0, &p),
        NackReason::UnknownMessage,
    );
    let mut p = batch_payload(&[b"a", b"bc"]);
    p.push(0xee);
    v.rejected_request(
        "reject_batch_trailing_bytes",
        "A PushBatch with one byte left over after its last record.",
        &frame(PUSH_BATCH, SYNC, 0, &p),
        NackReason::UnknownMessage,
    );

    // Frames a client must refuse as a response.
    let ack = response_frame(Response::Ack);
    let mut f = ack.clone();
    f[3] = b'X';
    v.rejected_response(
        "response_bad_magic",
        "An Ack with magic \"WEIX\".",
        &f,
        "bad magic",
    );
    let mut f = ack.clone();
    f[4] = 2;
    fix_header_crc(&mut f);
    v.rejected_response(
        "response_version_2",
        "An Ack with version byte 2.",
        &f,
        "unsupported version",
    );
    let mut f = ack.clone();
    f[13] ^= 0x10;
    v.rejected_response(
        "response_bad_header_crc",
        "An Ack whose header CRC is wrong.",
        &f,
        "bad header crc",
    );
    let mut f = response_frame(Response::AckBatch { count: 3 });
    let last = f.len() - 1;
    f[last] ^= 0x01;
    v.rejected_response(
        "response_bad_payload_crc",
        "An AckBatch whose payload CRC is wrong.",
        &f,
        "bad payload crc",
    );
    let mut f = ack.clone();
    f[7] = 0x01;
    fix_header_crc(&mut f);
    v.rejected_response(
        "response_reserved_flags",
        "An Ack with flags 0x01.",
        &f,
        "reserved flags set",
    );
    v.rejected_response(
        "response_request_type_push",
        "A Push frame where a response is expected.",
        &hello,
        "request message type",
    );
    v.rejected_response(
        "response_unknown_type",
        "Message type 0x09 where a response is expected.",
        &frame(0x09, SYNC, 0, b""),
        "unknown message type",
    );
    v.rejected_response(
        "response_ack_with_payload",
        "An Ack carrying a 1-byte payload (an Ack's payload is empty).",
        &frame(MessageType::Ack as u8, SYNC, 0, &[0]),
        "wrong payload length for ack",
    );
    v.rejected_response(
        "response_ack_batch_short",
        "An AckBatch with a 3-byte payload (it must be 4).",
        &frame(MessageType::AckBatch as u8, SYNC, 0, &[3, 0, 0]),
        "wrong payload length for ack_batch",
    );
    v.rejected_response(
        "response_nack_empty",
        "A Nack without a reason byte.",
        &frame(MessageType::Nack as u8, SYNC, 0, b""),
        "wrong payload length for nack",
    );
    v.rejected_response(
        "response_nack_unknown_reason",
        "A Nack with reason 0x0b, which is unassigned.",
        &frame(MessageType::Nack as u8, SYNC, 0, &[0x0b]),
        "unknown nack reason",
    );
    v.rejected_response(
        "response_nack_reason_0",
        "A Nack with reason 0x00, which is unassigned.",
        &frame(MessageType::Nack as u8, SYNC, 0, &[0x00]),
        "unknown nack reason",
    );
    v.rejected_response(
        "response_health_check_response_huge_length",
        "A HealthCheckResponse declaring 16 MiB of payload: refused from the header, without waiting for it.",
        &header_only(MessageType::HealthCheckResponse as u8, SYNC, 0, 16 << 20),
        "wrong payload length for health_check_response",
    );

    json!({
        "format": 1,
        "protocol_version": VERSION,
        "payload_bytes_hard_max": PAYLOAD_BYTES_HARD_MAX,
        "vectors": v.0,
    })
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn tier(name: &str) -> Tier {
    Tier::ALL.into_iter().find(|t| t.name() == name).unwrap()
}

/// Each vector means what it says, according to the codec.
fn check_against_codec(doc: &Value) {
    for vector in doc["vectors"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let frame = unhex(vector["frame"].as_str().unwrap());
        match vector["kind"].as_str().unwrap() {
            "request" => {
                let mut buf = BytesMut::from(&frame[..]);
                let req = decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX)
                    .unwrap_or_else(|e| panic!("{name}: the daemon refuses it: {e:?}"))
                    .unwrap_or_else(|| panic!("{name}: incomplete"));
                assert!(buf.is_empty(), "{name}: bytes left over");
                let r = &vector["request"];
                match r["type"].as_str().unwrap() {
                    "push" => {
                        let spillway_protocol::Request::Push { tier: t, payload } = req else {
                            panic!("{name}: decoded as {req:?}")
                        };
                        assert_eq!(t, tier(r["tier"].as_str().unwrap()), "{name}");
                        assert_eq!(hex(&payload), r["payload"], "{name}");
                    }
                    "push_batch" => {
                        let spillway_protocol::Request::PushBatch { tier: t, records } = req else {
                            panic!("{name}: decoded as {req:?}")
                        };
                        assert_eq!(t, tier(r["tier"].as_str().unwrap()), "{name}");
                        let got: Vec<String> = records.iter().map(|r| hex(&r)).collect();
                        let want: Vec<String> = r["records"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_str().unwrap().to_string())
                            .collect();
                        assert_eq!(got, want, "{name}");
                    }
                    "health_check" => {
                        assert!(
                            matches!(req, spillway_protocol::Request::HealthCheck),
                            "{name}"
                        )
                    }
                    other => panic!("{name}: unknown request type {other}"),
                }
            }
            "response" => {
                let mut buf = BytesMut::from(&frame[..]);
                let resp = decode_response(&mut buf)
                    .unwrap_or_else(|e| panic!("{name}: {e}"))
                    .unwrap_or_else(|| panic!("{name}: incomplete"));
                assert!(buf.is_empty(), "{name}: bytes left over");
                assert_eq!(hex(&response_frame(resp)), vector["frame"], "{name}");
                let r = &vector["response"];
                if let Response::Nack(reason) = resp {
                    assert_eq!(r["reason"], reason.name(), "{name}");
                    assert_eq!(r["retryable"], reason.is_retryable(), "{name}");
                }
            }
            "rejected_request" => {
                let mut buf = BytesMut::from(&frame[..]);
                let err = decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX)
                    .err()
                    .unwrap_or_else(|| panic!("{name}: the codec accepts it"));
                assert_eq!(
                    err.reason.name(),
                    vector["nack"]["reason"],
                    "{name}: {}",
                    err.detail
                );
            }
            "rejected_response" => {
                let mut buf = BytesMut::from(&frame[..]);
                assert!(
                    decode_response(&mut buf).is_err(),
                    "{name}: the client codec accepts it"
                );
            }
            other => panic!("{name}: unknown kind {other}"),
        }
    }
}

#[test]
fn the_vectors_file_is_the_codecs_own_and_up_to_date() {
    let doc = build();
    check_against_codec(&doc);
    let vectors = doc["vectors"].as_array().unwrap();
    let mut names: Vec<&str> = vectors
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), vectors.len(), "vector names must be unique");
    let rejections = vectors
        .iter()
        .filter(|v| v["kind"].as_str().unwrap().starts_with("rejected"))
        .count();
    assert!(vectors.len() >= 40, "{} vectors", vectors.len());
    assert!(rejections >= 15, "{rejections} rejections");
    let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance/vectors.json");
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "{} is out of date with the codec: rerun with SPILLWAY_BLESS=1 \
         (cargo test --release -p spillway-protocol --test conformance) and review the diff",
        path.display()
    );
}

#[test]
fn the_known_frame_is_among_the_vectors() {
    let doc = build();
    let hello = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "push_sync_hello")
        .unwrap();
    assert_eq!(
        hello["frame"],
        "57454952010101000500000066ad7d3c68656c6c6f86a61036"
    );
}
