//! The wire protocol's decoders: a stream of request frames as the daemon
//! reads it, the same stream as a client reads responses, and the
//! PushBatch payload against a model of its layout.

use bytes::{Bytes, BytesMut};
use spillway_protocol::crc::KNOWN_CRC_MIN;
use spillway_protocol::{
    decode_request, decode_request_crcs, decode_response, encode_frame, encode_push,
    encode_push_batch, encode_response, MessageType, NackReason, RecordCrcs, Request, RequestError,
    Response, Tier, HEADER_LEN, PAYLOAD_BYTES_HARD_MAX, TRAILER_LEN, VERSION,
};

/// A payload cap small enough that the fuzzer's frames meet it.
const SMALL_CAP: u32 = 64;

/// Input: bytes as they arrive on a producer's socket.
///
/// Decoded as they are, then again with every frame's two CRCs made right
/// (so the fuzzer reaches the checks behind them), at the hard cap and at
/// a small one. Checks: an error or "need more" consumes nothing; every
/// request decoded re-encodes to exactly the bytes it came from and
/// decodes again to itself; the stream decodes the same however it is cut
/// into reads; and the same bytes read as responses (a client reading a
/// hostile daemon) round-trip through the response encoder.
pub fn frame_decoder(data: &[u8]) {
    let fixed = fix_crcs(data);
    for (bytes, cap) in [
        (data, PAYLOAD_BYTES_HARD_MAX),
        (&fixed[..], PAYLOAD_BYTES_HARD_MAX),
        (&fixed[..], SMALL_CAP),
    ] {
        let whole = decode_requests(bytes, cap);
        assert_eq!(
            decode_requests_in_reads(bytes, cap, data),
            whole,
            "the stream decodes differently when cut into reads"
        );
    }
    decode_responses(data);
    decode_responses(&fixed);
}

/// Input: a tier byte, then a PushBatch payload, which is framed with
/// correct CRCs.
///
/// Checks the decoder against [`batch_model`] (the layout of
/// docs/wire-protocol.md written out plainly: the records, or the nack
/// reason), and that an accepted batch re-encodes to the same frame.
pub fn push_batch(data: &[u8]) {
    let Some((&tier, payload)) = data.split_first() else {
        return;
    };
    let mut frame = BytesMut::new();
    encode_frame(
        MessageType::PushBatch.as_byte(),
        tier,
        0,
        payload,
        &mut frame,
    );
    let mut buf = frame.clone();
    let got = decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX);
    match (batch_model(tier, payload), got) {
        (
            Ok(records),
            Ok(Some(Request::PushBatch {
                tier: t,
                records: got,
            })),
        ) => {
            assert_eq!(t.as_byte(), tier);
            assert!(buf.is_empty(), "an accepted frame is consumed whole");
            assert_eq!(got.len(), records.len());
            assert!(got
                .iter()
                .map(|r| r.to_vec())
                .eq(records.iter().map(|r| r.to_vec())));
            assert!(got.slices().eq(records.iter().copied()));
            assert_eq!(
                got.payload_bytes(),
                records.iter().map(|r| r.len()).sum::<usize>()
            );
            assert_eq!(
                got,
                records.clone().into(),
                "BatchRecords::from packs alike"
            );
            let mut again = BytesMut::new();
            encode_push_batch(t, &records, &mut again);
            assert_eq!(again, frame, "decode → encode changed the frame");
        }
        (Err(reason), Err(e)) => {
            assert_eq!(e.reason, reason, "{}", e.detail);
            assert_eq!(buf, frame, "a refused frame is not consumed");
        }
        (model, got) => panic!("model says {model:?}, decoder says {got:?}"),
    }
    // One byte under the payload's size, the cap refuses it from the header.
    if let (Some(_), Some(cap)) = (Tier::from_byte(tier), payload.len().checked_sub(1)) {
        let mut buf = frame.clone();
        let e = decode_request(&mut buf, cap as u32).expect_err("over the cap");
        assert_eq!(e.reason, NackReason::PayloadTooLarge, "{}", e.detail);
    }
}

/// What a PushBatch frame at `tier` with this payload must decode to: its
/// records, or the reason it is refused (docs/wire-protocol.md: tier, then
/// an empty payload, then the count, then each record, then leftovers).
fn batch_model(tier: u8, payload: &[u8]) -> Result<Vec<&[u8]>, NackReason> {
    if Tier::from_byte(tier).is_none() {
        return Err(NackReason::UnknownMessage);
    }
    if payload.is_empty() {
        return Err(NackReason::EmptyPayload);
    }
    let field = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
    if payload.len() < 4 {
        return Err(NackReason::UnknownMessage);
    }
    let count = field(payload);
    if count == 0 {
        return Err(NackReason::EmptyPayload);
    }
    let mut rest = &payload[4..];
    let mut records = Vec::new();
    while records.len() < count {
        if rest.len() < 4 {
            return Err(NackReason::UnknownMessage);
        }
        let len = field(rest);
        rest = &rest[4..];
        if len == 0 {
            return Err(NackReason::EmptyPayload);
        }
        if len > rest.len() {
            return Err(NackReason::UnknownMessage);
        }
        records.push(&rest[..len]);
        rest = &rest[len..];
    }
    if !rest.is_empty() {
        return Err(NackReason::UnknownMessage);
    }
    Ok(records)
}

/// `data` with the header CRC and the payload CRC of every whole frame
/// recomputed, frame after frame, as far as the headers' lengths reach.
fn fix_crcs(data: &[u8]) -> Vec<u8> {
    let mut b = data.to_vec();
    let mut at = 0usize;
    while at + HEADER_LEN <= b.len() {
        let crc = crc32fast::hash(&b[at..at + 12]);
        b[at + 12..at + 16].copy_from_slice(&crc.to_le_bytes());
        let payload_len = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        let end = at + HEADER_LEN + payload_len + TRAILER_LEN;
        if end > b.len() {
            break;
        }
        let crc = crc32fast::hash(&b[at + HEADER_LEN..end - TRAILER_LEN]);
        b[end - TRAILER_LEN..end].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
    b
}

/// The CRCs handed on with a request are those of its records, for exactly
/// the records of `KNOWN_CRC_MIN` bytes or more: the flusher stores a CRC
/// derived from them, so a wrong one would be a record no reader accepts.
fn check_crcs(request: &Request, crcs: &RecordCrcs) {
    let records: Vec<Bytes> = match request {
        Request::Push { payload, .. } => vec![payload.clone()],
        Request::PushBatch { records, .. } => records.to_vec(),
        Request::HealthCheck => Vec::new(),
    };
    let want: Vec<(u32, u32)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.len() >= KNOWN_CRC_MIN)
        .map(|(i, r)| (i as u32, crc32fast::hash(r)))
        .collect();
    assert_eq!(crcs.as_slice(), &want[..], "the CRCs handed on");
}

/// What decoding a whole stream gives: the requests, then the error that
/// stopped it (if one did; otherwise the rest is an incomplete frame).
type Decoded = (Vec<Request>, Option<RequestError>);

/// Decodes `bytes` as one read, checking every step.
fn decode_requests(bytes: &[u8], cap: u32) -> Decoded {
    let mut buf = BytesMut::from(bytes);
    let mut requests = Vec::new();
    loop {
        let before = buf.clone();
        match decode_request_crcs(&mut buf, cap) {
            Ok(Some((request, crcs))) => {
                let used = before.len() - buf.len();
                assert_eq!(
                    &before[used..],
                    &buf[..],
                    "only the front frame is consumed"
                );
                check_request(&request, &before[..used], cap);
                check_crcs(&request, &crcs);
                requests.push(request);
            }
            Ok(None) => {
                assert_eq!(buf, before, "\"need more\" consumed bytes");
                assert!(
                    before.len() < HEADER_LEN || announced_len(&before) > before.len(),
                    "\"need more\" with a whole frame in the buffer"
                );
                return (requests, None);
            }
            Err(e) => {
                assert_eq!(buf, before, "a refused frame was consumed");
                assert!(!e.detail.is_empty(), "a nack without a detail");
                return (requests, Some(e));
            }
        }
    }
}

/// Decodes `bytes` as a connection does, in reads whose sizes `sizes`
/// picks (1 to 64 bytes each), decoding every frame as soon as it is whole.
fn decode_requests_in_reads(bytes: &[u8], cap: u32, sizes: &[u8]) -> Decoded {
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut at = 0;
    let mut read = 0;
    while at < bytes.len() {
        let size = 1 + sizes
            .get(read % sizes.len().max(1))
            .map_or(0, |&s| s as usize % 64);
        read += 1;
        let end = (at + size).min(bytes.len());
        buf.extend_from_slice(&bytes[at..end]);
        at = end;
        loop {
            match decode_request(&mut buf, cap) {
                Ok(Some(request)) => requests.push(request),
                Ok(None) => break,
                Err(e) => return (requests, Some(e)),
            }
        }
    }
    (requests, None)
}

/// Frame length a header announces (header + payload + trailer).
fn announced_len(header: &[u8]) -> usize {
    let payload_len = u32::from_le_bytes(header[8..12].try_into().unwrap()) as usize;
    HEADER_LEN + payload_len + TRAILER_LEN
}

/// A decoded request against the frame it came from.
fn check_request(request: &Request, frame: &[u8], cap: u32) {
    assert_eq!(
        frame.len(),
        announced_len(frame),
        "consumed one whole frame"
    );
    let payload = &frame[HEADER_LEN..frame.len() - TRAILER_LEN];
    assert!(payload.len() as u64 <= cap.min(PAYLOAD_BYTES_HARD_MAX) as u64);
    assert_eq!(frame[7], 0, "flags must be 0");
    let mut again = BytesMut::new();
    match request {
        Request::Push { tier, payload } => {
            assert!(!payload.is_empty(), "an empty push was accepted");
            assert_eq!(request.record_count(), 1);
            encode_push(*tier, payload, &mut again);
        }
        Request::PushBatch { tier, records } => {
            assert!(!records.is_empty(), "an empty batch was accepted");
            assert!(records.iter().all(|r| !r.is_empty()), "an empty record");
            assert_eq!(records.iter().len(), records.len());
            let owned: Vec<_> = records.iter().collect();
            assert!(records.slices().eq(owned.iter().map(|r| &r[..])));
            assert_eq!(
                request.payload_bytes(),
                records.iter().map(|r| r.len()).sum::<usize>()
            );
            encode_push_batch(*tier, &records.to_vec(), &mut again);
        }
        Request::HealthCheck => {
            // Its tier byte is filler and its payload is ignored (but CRC-checked).
            assert_eq!(frame[5], MessageType::HealthCheck.as_byte());
            encode_frame(frame[5], frame[6], 0, payload, &mut again);
        }
    }
    assert_eq!(&again[..], frame, "decode → encode changed the frame");
    let decoded = decode_request(&mut again, cap).expect("re-encoded frame decodes");
    assert_eq!(decoded.as_ref(), Some(request), "decode → encode → decode");
    assert!(again.is_empty());
}

/// Decodes `bytes` as a client reads a daemon's answers, checking that each
/// response round-trips and that canonical frames re-encode identically.
fn decode_responses(bytes: &[u8]) {
    let mut buf = BytesMut::from(bytes);
    loop {
        let before = buf.clone();
        match decode_response(&mut buf) {
            Ok(Some(response)) => {
                let used = before.len() - buf.len();
                let frame = &before[..used];
                assert_eq!(used, announced_len(frame), "consumed one whole frame");
                let mut again = BytesMut::new();
                encode_response(response, &mut again);
                // One encoding, but the client is lenient where the spec is
                // not: it ignores the tier byte (filler), and takes a nack of
                // 1 or 2 bytes whatever its reason (the spec: 2 bytes for
                // VersionMismatch, 1 for the others; testing/fuzz/README.md).
                let payload = &frame[HEADER_LEN..frame.len() - TRAILER_LEN];
                let spec_payload = match response {
                    Response::Nack(NackReason::VersionMismatch) => payload == [0x02, VERSION],
                    Response::Nack(_) => payload.len() == 1,
                    _ => true,
                };
                let canonical = frame[6] == Tier::Sync.as_byte() && spec_payload;
                if canonical {
                    assert_eq!(&again[..], frame, "decode → encode changed the frame");
                }
                assert_eq!(decode_response(&mut again), Ok(Some(response)));
                assert!(again.is_empty());
            }
            Ok(None) => {
                assert_eq!(buf, before, "\"need more\" consumed bytes");
                return;
            }
            Err(e) => {
                assert_eq!(buf, before, "a refused response was consumed");
                assert!(!e.0.is_empty());
                return;
            }
        }
    }
}
