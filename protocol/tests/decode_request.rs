//! Daemon-side request decoding: the known frame, every check of the
//! specified decode order (alone and against every later check), partial
//! frames, back-to-back frames and zero-copy payloads.

mod common;

use common::{batch_payload, FrameSpec};
use spillway_protocol::*;

/// Cap used where a test needs one small enough to exceed cheaply.
const CAP: u32 = 64;

const KNOWN_FRAME: [u8; 25] = [
    0x57, 0x45, 0x49, 0x52, 0x01, 0x01, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x66, 0xad, 0x7d, 0x3c,
    0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x86, 0xa6, 0x10, 0x36,
];

fn decode(bytes: &[u8], cap: u32) -> (Result<Option<Request>, RequestError>, usize) {
    let mut buf = BytesMut::from(bytes);
    let result = decode_request(&mut buf, cap);
    (result, bytes.len() - buf.len())
}

/// Decodes `bytes`, asserting a refusal with `reason` that consumed nothing.
fn refused(bytes: &[u8], cap: u32, reason: NackReason) -> RequestError {
    let (result, consumed) = decode(bytes, cap);
    let err = result.expect_err("frame should be refused");
    assert_eq!(err.reason, reason, "{err}");
    assert_eq!(consumed, 0, "a refused frame must not be consumed");
    err
}

fn push_spec() -> FrameSpec {
    FrameSpec::new(0x01, 0x01, b"hello")
}

#[test]
fn known_frame_encodes_byte_for_byte() {
    let mut out = BytesMut::new();
    encode_push(Tier::Sync, b"hello", &mut out);
    assert_eq!(&out[..], &KNOWN_FRAME[..]);
    assert_eq!(push_spec().bytes(), KNOWN_FRAME.to_vec());
}

#[test]
fn known_frame_decodes() {
    let (result, consumed) = decode(&KNOWN_FRAME, CAP);
    let expected = Request::Push {
        tier: Tier::Sync,
        payload: Bytes::from_static(b"hello"),
    };
    assert_eq!(result.unwrap(), Some(expected));
    assert_eq!(consumed, KNOWN_FRAME.len());
}

/// The PushBatch worked example from `docs/wire-protocol.md`.
#[test]
fn documented_push_batch_frame() {
    let wire = [
        0x57, 0x45, 0x49, 0x52, 0x01, 0x06, 0x01, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x8c, 0x73, 0x67,
        0x96, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x61, 0x02, 0x00, 0x00, 0x00, 0x62,
        0x63, 0x2b, 0xb2, 0xa2, 0x5d,
    ];
    let mut out = BytesMut::new();
    encode_push_batch(Tier::Sync, &[&b"a"[..], b"bc"], &mut out);
    assert_eq!(&out[..], &wire[..]);
    assert_eq!(push_batch_frame_len([1, 2]), wire.len());
}

#[test]
fn fewer_than_sixteen_bytes_is_read_more() {
    // Even garbage: nothing can be judged before the whole header is in.
    for k in 0..HEADER_LEN {
        assert_eq!(decode(&KNOWN_FRAME[..k], CAP), (Ok(None), 0));
        assert_eq!(decode(&b"GET / HTTP/1.1\r\n"[..k], CAP), (Ok(None), 0));
    }
}

#[test]
fn bad_magic() {
    let mut spec = push_spec();
    spec.magic = *b"GET ";
    let err = refused(&spec.bytes(), CAP, NackReason::BadMagic);
    assert!(err.detail.contains("47 45 54 20"), "{err}");
}

#[test]
fn version_mismatch() {
    for version in [0, 2, 0xff] {
        let mut spec = push_spec();
        spec.version = version;
        let err = refused(&spec.bytes(), CAP, NackReason::VersionMismatch);
        assert!(err.detail.contains(&format!("{version:#04x}")), "{err}");
    }
}

#[test]
fn bad_header_crc() {
    let mut spec = push_spec();
    spec.corrupt_header_crc = true;
    refused(&spec.bytes(), CAP, NackReason::BadHeaderCrc);
    // Any header byte flipped after sealing is caught by the CRC.
    for at in 5..12 {
        let mut bytes = push_spec().bytes();
        bytes[at] ^= 0x10;
        refused(&bytes, CAP, NackReason::BadHeaderCrc);
    }
}

#[test]
fn unknown_message_types() {
    for t in [0x00, 0x08, 0x42, 0xff] {
        let err = refused(
            &FrameSpec::new(t, 1, b"x").bytes(),
            CAP,
            NackReason::UnknownMessage,
        );
        assert!(err.detail.contains(&format!("{t:#04x}")), "{err}");
    }
}

#[test]
fn response_types_from_a_client_are_unknown_messages() {
    for t in [0x02, 0x03, 0x05, 0x07] {
        let err = refused(
            &FrameSpec::new(t, 1, b"x").bytes(),
            CAP,
            NackReason::UnknownMessage,
        );
        assert!(err.detail.contains("is a response"), "{err}");
    }
}

#[test]
fn unknown_tier_on_push_and_batch() {
    let batch = batch_payload(1, &[(1, b"a")], &[]);
    for tier in [0x00, 0x04, 0xff] {
        let err = refused(
            &FrameSpec::new(0x01, tier, b"x").bytes(),
            CAP,
            NackReason::UnknownMessage,
        );
        assert!(err.detail.contains(&format!("{tier:#04x}")), "{err}");
        refused(
            &FrameSpec::new(0x06, tier, &batch).bytes(),
            CAP,
            NackReason::UnknownMessage,
        );
    }
}

#[test]
fn every_known_tier_is_accepted() {
    for tier in Tier::ALL {
        let mut out = BytesMut::new();
        encode_push(tier, b"x", &mut out);
        let got = decode_request(&mut out, CAP).unwrap().unwrap();
        assert_eq!(
            got,
            Request::Push {
                tier,
                payload: Bytes::from_static(b"x")
            }
        );
    }
}

/// weir v1 checks the whole header before the type: a health check's tier
/// byte is not filler, it must be a tier.
#[test]
fn health_check_takes_any_tier_and_refuses_what_is_not_one() {
    for tier in [0x01, 0x02, 0x03] {
        let (result, consumed) = decode(&FrameSpec::new(0x04, tier, b"").bytes(), CAP);
        assert_eq!(result.unwrap(), Some(Request::HealthCheck));
        assert_eq!(consumed, 20);
    }
    for tier in [0x00, 0x04, 0x7f, 0xff] {
        let err = refused(
            &FrameSpec::new(0x04, tier, b"").bytes(),
            CAP,
            NackReason::UnknownMessage,
        );
        assert!(err.to_string().contains("tier byte"), "{err}");
    }
    let mut out = BytesMut::new();
    encode_health_check(&mut out);
    assert_eq!(out.len(), 20);
    assert_eq!(
        decode_request(&mut out, CAP).unwrap(),
        Some(Request::HealthCheck)
    );
}

#[test]
fn any_flag_bit_is_reserved() {
    for bit in 0..8 {
        let mut spec = push_spec();
        spec.flags = 1 << bit;
        let err = refused(&spec.bytes(), CAP, NackReason::ReservedFlagsSet);
        assert!(
            err.detail.contains(&format!("{:#04x}", 1u8 << bit)),
            "{err}"
        );
    }
}

#[test]
fn payload_too_large_is_judged_from_the_header_alone() {
    let mut spec = FrameSpec::new(0x01, 0x01, &[]);
    spec.declared_len = Some(CAP + 1);
    // Only the 16 header bytes have arrived (the payload never will).
    let header = &spec.bytes()[..HEADER_LEN];
    let err = refused(header, CAP, NackReason::PayloadTooLarge);
    assert!(
        err.detail.contains("65") && err.detail.contains("64"),
        "{err}"
    );

    // A frame at exactly the cap is fine: it just needs its payload.
    spec.declared_len = Some(CAP);
    assert_eq!(decode(&spec.bytes()[..HEADER_LEN], CAP), (Ok(None), 0));
}

#[test]
fn payload_too_large_applies_to_every_request_type() {
    for t in [0x01, 0x04, 0x06] {
        let mut spec = FrameSpec::new(t, 0x01, &[]);
        spec.declared_len = Some(u32::MAX);
        refused(
            &spec.bytes()[..HEADER_LEN],
            CAP,
            NackReason::PayloadTooLarge,
        );
    }
}

#[test]
fn the_hard_max_caps_any_configured_limit() {
    let mut spec = FrameSpec::new(0x01, 0x01, &[]);
    spec.declared_len = Some(PAYLOAD_BYTES_HARD_MAX + 1);
    refused(
        &spec.bytes()[..HEADER_LEN],
        u32::MAX,
        NackReason::PayloadTooLarge,
    );
    spec.declared_len = Some(PAYLOAD_BYTES_HARD_MAX);
    assert_eq!(decode(&spec.bytes()[..HEADER_LEN], u32::MAX), (Ok(None), 0));
}

#[test]
fn empty_push_and_empty_batch_frames() {
    let err = refused(
        &FrameSpec::new(0x01, 0x01, b"").bytes(),
        CAP,
        NackReason::EmptyPayload,
    );
    assert!(err.detail.contains("push"), "{err}");
    // Judged from the header: the trailer need not have arrived.
    refused(
        &FrameSpec::new(0x01, 0x01, b"").bytes()[..HEADER_LEN],
        CAP,
        NackReason::EmptyPayload,
    );
    refused(
        &FrameSpec::new(0x06, 0x02, b"").bytes(),
        CAP,
        NackReason::EmptyPayload,
    );
}

#[test]
fn incomplete_frame_is_read_more_until_complete() {
    let bytes = push_spec().bytes();
    let mut buf = BytesMut::from(&bytes[..bytes.len() - 1]);
    assert_eq!(decode_request(&mut buf, CAP), Ok(None));
    assert_eq!(buf.len(), bytes.len() - 1, "nothing consumed");
    buf.extend_from_slice(&bytes[bytes.len() - 1..]);
    assert!(decode_request(&mut buf, CAP).unwrap().is_some());
    assert!(buf.is_empty());
}

#[test]
fn bad_payload_crc() {
    let mut spec = push_spec();
    spec.corrupt_payload_crc = true;
    refused(&spec.bytes(), CAP, NackReason::BadPayloadCrc);
    // A flipped payload byte, too.
    let mut bytes = push_spec().bytes();
    bytes[HEADER_LEN + 2] ^= 0x01;
    refused(&bytes, CAP, NackReason::BadPayloadCrc);
    // And a health check's (empty) trailer must be zero.
    let mut hc = FrameSpec::new(0x04, 0x01, b"");
    hc.corrupt_payload_crc = true;
    refused(&hc.bytes(), CAP, NackReason::BadPayloadCrc);
}

fn batch_refused(payload: &[u8], reason: NackReason) -> String {
    refused(
        &FrameSpec::new(0x06, 0x01, payload).bytes(),
        1 << 20,
        reason,
    )
    .detail
}

#[test]
fn batch_with_no_records_is_empty() {
    let detail = batch_refused(&batch_payload(0, &[], &[]), NackReason::EmptyPayload);
    assert!(detail.contains("count of 0"), "{detail}");
}

#[test]
fn batch_with_an_empty_record_is_empty() {
    let payload = batch_payload(3, &[(1, b"a"), (0, b""), (1, b"c")], &[]);
    let detail = batch_refused(&payload, NackReason::EmptyPayload);
    assert_eq!(detail, "record 2 of 3 is empty");
}

#[test]
fn batch_record_running_past_the_payload() {
    let mut records: Vec<(u32, &[u8])> = vec![(1, b"a"), (1, b"b")];
    records.push((900, &[0u8; 12]));
    let payload = batch_payload(10, &records, &[]);
    let detail = batch_refused(&payload, NackReason::UnknownMessage);
    assert_eq!(
        detail,
        "malformed batch: record 3 of 10 declares 900 bytes but only 12 remain"
    );
}

#[test]
fn batch_count_larger_than_the_records_present() {
    // Two records declared, one present: the second's length prefix is missing.
    let payload = batch_payload(2, &[(1, b"a")], &[]);
    let detail = batch_refused(&payload, NackReason::UnknownMessage);
    assert_eq!(
        detail,
        "malformed batch: record 2 of 2 needs a 4-byte length but only 0 bytes remain"
    );
    // A huge count must not allocate for phantom records.
    let payload = batch_payload(u32::MAX, &[(1, b"a")], &[]);
    batch_refused(&payload, NackReason::UnknownMessage);
}

#[test]
fn batch_with_trailing_bytes() {
    let payload = batch_payload(1, &[(2, b"ab")], b"xyz");
    let detail = batch_refused(&payload, NackReason::UnknownMessage);
    assert_eq!(
        detail,
        "malformed batch: 3 trailing bytes after the last of 1 records"
    );
}

#[test]
fn batch_payload_shorter_than_the_count() {
    for short in [&b"\x01"[..], b"\x01\x00", b"\x01\x00\x00"] {
        let detail = batch_refused(short, NackReason::UnknownMessage);
        assert!(detail.contains("too short"), "{detail}");
    }
}

#[test]
fn well_formed_batch_decodes_to_its_records() {
    let records: [&[u8]; 3] = [b"one", b"two!", b"x"];
    let mut buf = BytesMut::new();
    encode_push_batch(Tier::Buffered, &records, &mut buf);
    let got = decode_request(&mut buf, CAP).unwrap().unwrap();
    assert_eq!(
        got,
        Request::PushBatch {
            tier: Tier::Buffered,
            records: records.to_vec().into(),
        }
    );
    assert_eq!(got.record_count(), 3);
    assert_eq!(got.payload_bytes(), 8);
    assert!(buf.is_empty());
}

/// A named corruption of one decode step and what it must produce
/// (`None` = "read more").
type Fault = (&'static str, fn(&mut FrameSpec), Option<NackReason>);

/// One fault per decode step, in the specified order.
fn faults() -> Vec<Fault> {
    vec![
        ("magic", |s| s.magic = *b"HTTP", Some(NackReason::BadMagic)),
        (
            "version",
            |s| s.version = 7,
            Some(NackReason::VersionMismatch),
        ),
        (
            "header crc",
            |s| s.corrupt_header_crc = true,
            Some(NackReason::BadHeaderCrc),
        ),
        (
            "type",
            |s| s.message_type = 0x09,
            Some(NackReason::UnknownMessage),
        ),
        ("tier", |s| s.tier = 0x09, Some(NackReason::UnknownMessage)),
        (
            "flags",
            |s| s.flags = 0x80,
            Some(NackReason::ReservedFlagsSet),
        ),
        (
            "too large",
            |s| s.declared_len = Some(CAP + 1),
            Some(NackReason::PayloadTooLarge),
        ),
        (
            "empty",
            |s| {
                s.payload.clear();
                s.declared_len = s.declared_len.filter(|&l| l > CAP);
            },
            Some(NackReason::EmptyPayload),
        ),
        ("incomplete", |s| s.truncate = 1, None),
        (
            "payload crc",
            |s| s.corrupt_payload_crc = true,
            Some(NackReason::BadPayloadCrc),
        ),
        (
            "batch structure",
            |s| {
                if s.message_type == 0x01 {
                    s.message_type = 0x06;
                }
                if !s.payload.is_empty() {
                    s.payload = batch_payload(1, &[(1, b"a")], b"junk");
                }
            },
            Some(NackReason::UnknownMessage),
        ),
    ]
}

/// For every pair of faults (earlier, later) in one frame, the earlier one is
/// what the decoder reports: this pins down the whole decode order.
#[test]
fn decode_order_earlier_check_wins_over_every_later_one() {
    let faults = faults();
    for (i, (early_name, early, expected)) in faults.iter().enumerate() {
        for (late_name, late, _) in &faults[i + 1..] {
            let mut spec = push_spec();
            late(&mut spec);
            early(&mut spec);
            let (result, consumed) = decode(&spec.bytes(), CAP);
            let got = result.as_ref().map_err(|e| e.reason).map(|_| ());
            match expected {
                Some(reason) => {
                    assert_eq!(got, Err(*reason), "{early_name} + {late_name}: {result:?}")
                }
                None => assert_eq!(got, Ok(()), "{early_name} + {late_name}: {result:?}"),
            }
            assert_eq!(consumed, 0, "{early_name} + {late_name}");
        }
    }
}

#[test]
fn each_fault_alone_gives_its_reason() {
    for (name, fault, expected) in faults() {
        let mut spec = push_spec();
        fault(&mut spec);
        let (result, _) = decode(&spec.bytes(), CAP);
        match expected {
            Some(reason) => assert_eq!(result.unwrap_err().reason, reason, "{name}"),
            None => assert_eq!(result, Ok(None), "{name}"),
        }
    }
}

#[test]
fn partial_frames_at_every_split_point() {
    let mut frames = BytesMut::new();
    encode_push(Tier::Batched, b"split me anywhere", &mut frames);
    encode_push_batch(Tier::Sync, &[&b"r1"[..], b"record two"], &mut frames);
    encode_health_check(&mut frames);
    let whole = frames.to_vec();
    let first_len = 16 + 17 + 4;
    for split in 0..first_len {
        let mut buf = BytesMut::from(&whole[..split]);
        assert_eq!(decode_request(&mut buf, CAP), Ok(None), "split at {split}");
        assert_eq!(buf.len(), split, "nothing consumed at split {split}");
        buf.extend_from_slice(&whole[split..]);
        assert_eq!(drain(&mut buf).len(), 3, "split at {split}");
    }
}

#[test]
fn byte_at_a_time_feeding_yields_every_frame() {
    let mut frames = BytesMut::new();
    encode_push(Tier::Batched, b"a", &mut frames);
    encode_health_check(&mut frames);
    encode_push_batch(Tier::Buffered, &[b"bb", b"cc"], &mut frames);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &b in frames.iter() {
        buf.extend_from_slice(&[b]);
        if let Some(r) = decode_request(&mut buf, CAP).unwrap() {
            got.push(r);
        }
    }
    assert_eq!(got.len(), 3);
    assert_eq!(got[1], Request::HealthCheck);
    assert!(buf.is_empty());
}

fn drain(buf: &mut BytesMut) -> Vec<Request> {
    let mut out = Vec::new();
    while let Some(r) = decode_request(buf, CAP).unwrap() {
        out.push(r);
    }
    out
}

#[test]
fn back_to_back_frames_decode_in_sequence() {
    let mut buf = BytesMut::new();
    for i in 0..50u32 {
        match i % 3 {
            0 => encode_push(Tier::Sync, &i.to_le_bytes(), &mut buf),
            1 => encode_push_batch(
                Tier::Batched,
                &[i.to_le_bytes(), (i + 1).to_le_bytes()],
                &mut buf,
            ),
            _ => encode_health_check(&mut buf),
        }
    }
    // A trailing partial frame stays in the buffer.
    encode_push(Tier::Sync, b"partial", &mut buf);
    buf.truncate(buf.len() - 3);
    let got = drain(&mut buf);
    assert_eq!(got.len(), 50);
    for (i, r) in got.iter().enumerate() {
        let i = i as u32;
        let expected = match i % 3 {
            0 => Request::Push {
                tier: Tier::Sync,
                payload: Bytes::copy_from_slice(&i.to_le_bytes()),
            },
            1 => Request::PushBatch {
                tier: Tier::Batched,
                records: vec![
                    Bytes::copy_from_slice(&i.to_le_bytes()),
                    Bytes::copy_from_slice(&(i + 1).to_le_bytes()),
                ]
                .into(),
            },
            _ => Request::HealthCheck,
        };
        assert_eq!(r, &expected);
    }
    assert_eq!(buf.len(), 16 + 7 + 4 - 3);
}

#[test]
fn payloads_are_slices_of_the_read_buffer() {
    let mut buf = BytesMut::with_capacity(4096);
    encode_push(Tier::Sync, &[7u8; 1000], &mut buf);
    encode_push_batch(Tier::Sync, &[[1u8; 100], [2u8; 100]], &mut buf);
    let base = buf.as_ptr() as usize;
    let end = base + buf.capacity();
    let inside = |b: &Bytes| (base..end).contains(&(b.as_ptr() as usize));

    let Some(Request::Push { payload, .. }) = decode_request(&mut buf, 4096).unwrap() else {
        panic!("expected a push");
    };
    assert!(inside(&payload), "push payload was copied");
    assert_eq!(payload.as_ptr() as usize, base + HEADER_LEN);
    let Some(Request::PushBatch { records, .. }) = decode_request(&mut buf, 4096).unwrap() else {
        panic!("expected a batch");
    };
    assert!(
        records.iter().all(|r| inside(&r)),
        "batch records were copied"
    );
}

#[test]
fn payload_at_the_hard_max_decodes() {
    let payload = vec![0xa5u8; PAYLOAD_BYTES_HARD_MAX as usize];
    let mut buf = BytesMut::new();
    encode_push(Tier::Buffered, &payload, &mut buf);
    let Some(Request::Push { payload: got, .. }) =
        decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX).unwrap()
    else {
        panic!("expected a push");
    };
    assert_eq!(got.len(), payload.len());
    assert!(got.iter().all(|&b| b == 0xa5));
}

#[test]
fn request_error_display_names_reason_and_detail() {
    let mut spec = push_spec();
    spec.flags = 0x04;
    let err = refused(&spec.bytes(), CAP, NackReason::ReservedFlagsSet);
    assert!(
        err.to_string()
            .starts_with("reserved_flags_set: flags byte is 0x04"),
        "{err}"
    );
}
