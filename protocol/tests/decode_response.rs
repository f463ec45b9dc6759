//! Client-side response decoding: round trips, partial frames, and every way
//! a daemon's answer can be malformed (each consuming nothing).

mod common;

use common::FrameSpec;
use spillway_protocol::*;

fn encoded(r: Response) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_response(r, &mut out);
    out.to_vec()
}

fn all_responses() -> Vec<Response> {
    let mut v = vec![
        Response::Ack,
        Response::HealthCheckResponse,
        Response::AckBatch { count: 0 },
        Response::AckBatch { count: 1 },
        Response::AckBatch { count: u32::MAX },
    ];
    v.extend(NackReason::ALL.map(Response::Nack));
    v
}

/// Decodes `bytes`, asserting an error that consumed nothing; returns its text.
fn malformed(bytes: &[u8]) -> String {
    let mut buf = BytesMut::from(bytes);
    let err = decode_response(&mut buf).expect_err("response should be refused");
    assert_eq!(
        buf.len(),
        bytes.len(),
        "a refused response must not be consumed"
    );
    err.to_string()
}

#[test]
fn every_response_round_trips() {
    for r in all_responses() {
        let mut buf = BytesMut::from(&encoded(r)[..]);
        assert_eq!(decode_response(&mut buf), Ok(Some(r)));
        assert!(buf.is_empty(), "{r:?}");
    }
}

#[test]
fn ack_frame_bytes() {
    // Ack, filler tier 0x01, no flags, empty payload, zero trailer.
    let bytes = encoded(Response::Ack);
    assert_eq!(
        &bytes[..12],
        &[0x57, 0x45, 0x49, 0x52, 1, 2, 1, 0, 0, 0, 0, 0]
    );
    let crc = crc32fast::hash(&bytes[..12]).to_le_bytes();
    assert_eq!(&bytes[12..16], &crc);
    assert_eq!(&bytes[16..], &[0, 0, 0, 0]);
}

/// Worked examples from `docs/wire-protocol.md`.
#[test]
fn documented_response_frames() {
    let cases: [(Response, &str); 4] = [
        (
            Response::Ack,
            "57 45 49 52 01 02 01 00 00 00 00 00 c9 47 4b 3a 00 00 00 00",
        ),
        (
            Response::Nack(NackReason::VersionMismatch),
            "57 45 49 52 01 03 01 00 02 00 00 00 f6 84 35 36 02 01 eb 40 e8 04",
        ),
        (
            Response::AckBatch { count: 3 },
            "57 45 49 52 01 07 01 00 04 00 00 00 39 ff 11 e7 03 00 00 00 f2 70 f1 33",
        ),
        (
            Response::HealthCheckResponse,
            "57 45 49 52 01 05 01 00 00 00 00 00 47 79 ec ff 00 00 00 00",
        ),
    ];
    for (response, hex) in cases {
        let wire: Vec<u8> = hex
            .split(' ')
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect();
        assert_eq!(encoded(response), wire, "{response:?}");
    }
}

#[test]
fn partial_responses_at_every_split_point() {
    let mut whole = Vec::new();
    for r in all_responses() {
        whole.extend(encoded(r));
    }
    for split in 0..whole.len() {
        let mut buf = BytesMut::from(&whole[..split]);
        let mut got = Vec::new();
        while let Some(r) = decode_response(&mut buf).unwrap() {
            got.push(r);
        }
        buf.extend_from_slice(&whole[split..]);
        while let Some(r) = decode_response(&mut buf).unwrap() {
            got.push(r);
        }
        assert_eq!(got, all_responses(), "split at {split}");
        assert!(buf.is_empty());
    }
}

#[test]
fn header_faults() {
    let mut spec = FrameSpec::new(0x02, 0x01, b"");
    spec.magic = *b"weir";
    assert!(malformed(&spec.bytes()).contains("77 65 69 72"));

    let mut spec = FrameSpec::new(0x02, 0x01, b"");
    spec.version = 2;
    assert!(malformed(&spec.bytes()).contains("version byte 0x02"));

    let mut spec = FrameSpec::new(0x02, 0x01, b"");
    spec.corrupt_header_crc = true;
    assert!(malformed(&spec.bytes()).contains("header CRC"));
}

#[test]
fn request_and_unknown_types_are_refused() {
    for t in [0x01, 0x04, 0x06] {
        let text = malformed(&FrameSpec::new(t, 0x01, b"").bytes());
        assert!(text.contains("is a request"), "{text}");
    }
    for t in [0x00, 0x08, 0xee] {
        let text = malformed(&FrameSpec::new(t, 0x01, b"").bytes());
        assert!(
            text.contains(&format!("unknown message type byte {t:#04x}")),
            "{text}"
        );
    }
}

#[test]
fn tier_byte_is_filler_but_flags_must_be_zero() {
    let mut buf = FrameSpec::new(0x02, 0xff, b"").buf();
    assert_eq!(decode_response(&mut buf), Ok(Some(Response::Ack)));
    let mut spec = FrameSpec::new(0x02, 0x01, b"");
    spec.flags = 0x02;
    assert!(malformed(&spec.bytes()).contains("flags byte is 0x02"));
}

#[test]
fn payload_lengths_are_checked_per_type() {
    let cases: [(u8, &[u8]); 6] = [
        (0x02, b"x"),
        (0x05, b"x"),
        (0x07, b"abc"),
        (0x07, b"abcde"),
        (0x03, b""),
        (0x03, b"\x01\x01\x01"),
    ];
    for (t, payload) in cases {
        let text = malformed(&FrameSpec::new(t, 0x01, payload).bytes());
        assert!(
            text.contains(&format!("{}-byte payload", payload.len())),
            "{text}"
        );
    }
}

#[test]
fn bogus_length_is_refused_from_the_header_alone() {
    let mut spec = FrameSpec::new(0x02, 0x01, b"");
    spec.declared_len = Some(u32::MAX);
    let text = malformed(&spec.bytes()[..HEADER_LEN]);
    assert!(text.contains("4294967295-byte payload"), "{text}");
}

#[test]
fn bad_payload_crc() {
    let mut spec = FrameSpec::new(0x07, 0x01, &5u32.to_le_bytes());
    spec.corrupt_payload_crc = true;
    assert!(malformed(&spec.bytes()).contains("payload CRC"));
}

#[test]
fn unknown_nack_reason_is_named() {
    for b in [0x00, 0x0b, 0xff] {
        let text = malformed(&FrameSpec::new(0x03, 0x01, &[b]).bytes());
        assert_eq!(
            text,
            format!("malformed response from daemon: nack with unknown reason byte {b:#04x}")
        );
    }
}

#[test]
fn nack_second_byte_is_tolerated() {
    // weir sends [0x02, version] for VersionMismatch; the version is informational.
    let mut buf = FrameSpec::new(0x03, 0x01, &[0x02, 0x01]).buf();
    assert_eq!(
        decode_response(&mut buf),
        Ok(Some(Response::Nack(NackReason::VersionMismatch)))
    );
    let mut buf = FrameSpec::new(0x03, 0x01, &[0x02]).buf();
    assert_eq!(
        decode_response(&mut buf),
        Ok(Some(Response::Nack(NackReason::VersionMismatch)))
    );
}
