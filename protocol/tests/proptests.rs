//! Property tests: encoders and decoders are inverse, streams decode the same
//! however they are chunked, and no input whatsoever makes a decoder panic.

use proptest::prelude::*;
use spillway_protocol::*;

fn tier() -> impl Strategy<Value = Tier> {
    prop::sample::select(Tier::ALL.to_vec())
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::Ack),
        Just(Response::HealthCheckResponse),
        any::<u32>().prop_map(|count| Response::AckBatch { count }),
        prop::sample::select(NackReason::ALL.to_vec()).prop_map(Response::Nack),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let record = prop::collection::vec(any::<u8>(), 1..64).prop_map(Bytes::from);
    prop_oneof![
        (tier(), record.clone()).prop_map(|(tier, payload)| Request::Push { tier, payload }),
        (tier(), prop::collection::vec(record, 1..8)).prop_map(|(tier, records)| {
            Request::PushBatch {
                tier,
                records: records.into(),
            }
        }),
        Just(Request::HealthCheck),
    ]
}

fn encode_request(r: &Request, out: &mut BytesMut) {
    match r {
        Request::Push { tier, payload } => encode_push(*tier, payload, out),
        Request::PushBatch { tier, records } => encode_push_batch(*tier, &records.to_vec(), out),
        Request::HealthCheck => encode_health_check(out),
    }
}

proptest! {
    #[test]
    fn push_round_trips(tier in tier(), payload in prop::collection::vec(any::<u8>(), 1..4096)) {
        let mut buf = BytesMut::new();
        encode_push(tier, &payload, &mut buf);
        prop_assert_eq!(buf.len(), HEADER_LEN + payload.len() + TRAILER_LEN);
        let got = decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX).unwrap();
        prop_assert_eq!(got, Some(Request::Push { tier, payload: Bytes::from(payload) }));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn push_batch_round_trips(
        tier in tier(),
        records in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..256), 1..40),
    ) {
        let mut buf = BytesMut::new();
        encode_push_batch(tier, &records, &mut buf);
        prop_assert_eq!(buf.len(), push_batch_frame_len(records.iter().map(Vec::len)));
        let got = decode_request(&mut buf, PAYLOAD_BYTES_HARD_MAX).unwrap();
        let records: Vec<Bytes> = records.into_iter().map(Bytes::from).collect();
        prop_assert_eq!(got, Some(Request::PushBatch { tier, records: records.into() }));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn responses_round_trip(responses in prop::collection::vec(response(), 1..16)) {
        let mut buf = BytesMut::new();
        for r in &responses {
            encode_response(*r, &mut buf);
        }
        let mut got = Vec::new();
        while let Some(r) = decode_response(&mut buf).unwrap() {
            got.push(r);
        }
        prop_assert_eq!(got, responses);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn request_streams_decode_the_same_in_any_chunking(
        requests in prop::collection::vec(request(), 1..12),
        chunk in 1usize..64,
    ) {
        let mut wire = BytesMut::new();
        for r in &requests {
            encode_request(r, &mut wire);
        }
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in wire.chunks(chunk) {
            buf.extend_from_slice(piece);
            while let Some(r) = decode_request(&mut buf, 1 << 20).unwrap() {
                got.push(r);
            }
        }
        prop_assert_eq!(got, requests);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic_decode_request(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cap in any::<u32>(),
    ) {
        let mut buf = BytesMut::from(&bytes[..]);
        // Keep decoding while frames come out; each success must make progress.
        while let Ok(Some(_)) = decode_request(&mut buf, cap) {
            prop_assert!(buf.len() < bytes.len());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_decode_response(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = decode_response(&mut buf) {}
    }

    /// Random bytes rarely get past the magic; corrupting valid frames reaches
    /// every later check.
    #[test]
    fn corrupted_valid_frames_never_panic(
        request in request(),
        response in response(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut wire = BytesMut::new();
        encode_request(&request, &mut wire);
        let mut resp = BytesMut::new();
        encode_response(response, &mut resp);
        for (at, xor) in &flips {
            let i = at.index(wire.len());
            wire[i] ^= xor;
            let j = at.index(resp.len());
            resp[j] ^= xor;
        }
        let mut buf = BytesMut::from(&wire[..cut.index(wire.len() + 1)]);
        let _ = decode_request(&mut buf, 1 << 20);
        let mut buf = wire;
        let _ = decode_request(&mut buf, 1 << 20);
        let mut buf = resp;
        let _ = decode_response(&mut buf);
    }
}
