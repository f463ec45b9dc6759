//! The fuzz targets' bodies under proptest, as CI runs them (the cargo-fuzz
//! runs are for a developer's machine; see testing/fuzz/README.md). Each target
//! gets arbitrary bytes and inputs built to be valid, then damaged, so
//! the short runs here reach past the checksums the way the fuzzer's
//! control bytes let it.

use proptest::prelude::*;
use spillway_fuzz_targets as targets;
use spillway_protocol::{encode_frame, encode_health_check, encode_push, encode_push_batch, Tier};
use spillway_wab::format::{
    encode_record_header, record_crc, Footer, RecordMeta, RecordsCrc, SegmentHeader,
};

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn record() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..48)
}

/// `bytes` with up to three bytes overwritten (positions taken modulo its length).
fn damaged(mut bytes: Vec<u8>, hits: &[(usize, u8)]) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(at, value) in hits {
            let n = bytes.len();
            bytes[at % n] = value;
        }
    }
    bytes
}

fn hits() -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>()), 0..3)
}

/// A stream of valid requests (push, batch, health check, or a frame of any
/// type byte), as a client writes them.
fn request_stream() -> impl Strategy<Value = Vec<u8>> {
    let tier = prop::sample::select(Tier::ALL.to_vec());
    let frame = prop_oneof![
        (tier.clone(), record()).prop_map(|(t, r)| {
            let mut out = Default::default();
            encode_push(t, &r, &mut out);
            out.to_vec()
        }),
        (tier, prop::collection::vec(record(), 0..6)).prop_map(|(t, rs)| {
            let mut out = Default::default();
            encode_push_batch(t, &rs, &mut out);
            out.to_vec()
        }),
        Just(()).prop_map(|()| {
            let mut out = Default::default();
            encode_health_check(&mut out);
            out.to_vec()
        }),
        (any::<u8>(), any::<u8>(), any::<u8>(), bytes(24)).prop_map(|(m, t, f, p)| {
            let mut out = Default::default();
            encode_frame(m % 9, t % 5, f % 2, &p, &mut out);
            out.to_vec()
        }),
    ];
    prop::collection::vec(frame, 1..6).prop_map(|frames| frames.concat())
}

/// A segment file as the writer makes it: header, records, and a footer
/// when `sealed`.
fn segment_file(first_seq: u64, records: &[Vec<u8>], sealed: bool) -> Vec<u8> {
    let header = SegmentHeader::new(7, 1, first_seq, 1);
    let salt = header.salt();
    let mut b = header.encode().to_vec();
    let mut crcs = RecordsCrc::new();
    for (i, r) in records.iter().enumerate() {
        let meta = RecordMeta {
            tier: 1 + (i % 3) as u8,
            arrival_unix_us: i as u64,
        }
        .pack();
        let crc = salt.apply(record_crc(meta, r));
        crcs.add(crc);
        b.extend_from_slice(&encode_record_header(r.len() as u32, crc, meta));
        b.extend_from_slice(r);
    }
    if sealed {
        let footer = Footer {
            record_count: records.len() as u64,
            end_offset: b.len() as u64,
            last_seq: first_seq.wrapping_add(records.len() as u64).wrapping_sub(1),
            records_crc: crcs.value(),
        };
        b.extend_from_slice(&footer.encode(salt));
    } else {
        b.extend_from_slice(&[0u8; 32]);
    }
    b
}

/// Lines of a configuration: section headers, every kind of key, good and
/// bad values.
fn config_text() -> impl Strategy<Value = String> {
    const LINES: &[&str] = &[
        "[server]",
        "[wab]",
        "[log]",
        "[admin]",
        "[sink]",
        "[sink.headers]",
        "[sink.options]",
        "[bogus]",
        "socket_path = \"/run/spillway/spillway.sock\"",
        "socket_path = \"/run/spillway/admin.sock\"",
        "data_dir = \"/var/lib/spillway\"",
        "shards = 4",
        "shards = 300",
        "connections_max = 0",
        "payload_bytes_max = 1048576",
        "read_buffer_bytes_max = 1048576",
        "inflight_bytes_max = 65536",
        "socket_mode = \"0660\"",
        "socket_mode = 660",
        "socket_group = 1001",
        "socket_group = \"\"",
        "segment_bytes_max = 1048576",
        "wab_bytes_max = 4194304",
        "group_bytes_max = 65536",
        "level = \"debug\"",
        "level = \"spillway=trace,warn\"",
        "level = \"[[[\"",
        "format = \"json\"",
        "metrics_address = \"127.0.0.1:9100\"",
        "type = \"http\"",
        "type = \"file\"",
        "type = \"noop\"",
        "type = \"plugin\"",
        "type = \"kafka\"",
        "url = \"http://127.0.0.1:8080/ingest\"",
        "url = \"ftp://x\"",
        "delivery = \"per_record\"",
        "encoding = \"json_array\"",
        "gzip = true",
        "concurrency = 8",
        "timeout_ms = 0",
        "token_env = \"TOKEN\"",
        "path = \"/tmp/out.ndjson\"",
        "path = \"/tmp/libplugin.so\"",
        "batch_records_max = 100",
        "batch_bytes_max = 1024",
        "linger_ms = 10000",
        "retry_initial_ms = 5000",
        "retry_max_ms = 10",
        "retry_duration_max_ms = 999",
        "x-api-key = \"k\"",
        "Content-Length = \"5\"",
        "answer = 42",
    ];
    prop::collection::vec(prop::sample::select(LINES), 0..14).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn frame_decoder_on_any_bytes(data in bytes(256)) {
        targets::frame_decoder(&data);
    }

    #[test]
    fn frame_decoder_on_damaged_streams(stream in request_stream(), hits in hits()) {
        targets::frame_decoder(&stream);
        targets::frame_decoder(&damaged(stream, &hits));
    }

    #[test]
    fn push_batch_on_any_payload(data in bytes(128)) {
        targets::push_batch(&data);
    }

    #[test]
    fn push_batch_on_damaged_batches(
        tier in any::<u8>(),
        records in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..8),
        hits in hits(),
    ) {
        let mut frame = Default::default();
        encode_push_batch(Tier::Sync, &records, &mut frame);
        let payload = &frame[16..frame.len() - 4];
        let mut data = vec![tier % 5];
        data.extend_from_slice(payload);
        targets::push_batch(&data);
        targets::push_batch(&damaged(data, &hits));
    }

    #[test]
    fn http_response_on_any_answer(data in bytes(300)) {
        targets::http_response(&data);
    }

    #[test]
    fn http_response_with_retry_after(
        status in prop::sample::select(vec![200u16, 301, 408, 429, 500, 503, 400, 404]),
        cap in any::<u8>(),
        value in prop_oneof![
            "[0-9]{1,22}",
            " [0-9]{1,4} ",
            "\\+[0-9]{1,3}",
            "(Sun|Mon), 0[1-9] (Jan|Nov) (19[0-9]{2}|20[0-9]{2}) [0-2][0-9]:[0-5][0-9]:[0-5][0-9] GMT",
            "[ -~]{0,30}",
        ],
        body in bytes(260),
    ) {
        let mut data = (status - 100).to_le_bytes().to_vec();
        data.push(cap);
        data.extend_from_slice(&784_111_777u32.to_le_bytes());
        data.push(1); // one header
        data.push(0); // Retry-After
        data.push(value.len() as u8);
        data.extend_from_slice(value.as_bytes());
        data.extend_from_slice(&body);
        targets::http_response(&data);
    }

    #[test]
    fn config_on_any_text(data in bytes(200)) {
        targets::config(&data);
    }

    #[test]
    fn config_on_config_like_text(text in config_text()) {
        targets::config(text.as_bytes());
    }
}

proptest! {
    // Each case recovers several shard folders (in /dev/shm): fewer cases.
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn segment_on_any_bytes(control in any::<u8>(), data in bytes(200)) {
        let mut input = vec![control];
        input.extend_from_slice(&data);
        targets::segment(&input);
    }

    #[test]
    fn segment_on_damaged_segments(
        control in any::<u8>(),
        first_seq in prop_oneof![Just(0u64), 0..1u64 << 62, Just((1u64 << 62) - 2)],
        records in prop::collection::vec(record(), 0..6),
        sealed in any::<bool>(),
        cut in any::<usize>(),
        hits in hits(),
    ) {
        let mut file = segment_file(first_seq, &records, sealed);
        if cut % 4 == 0 {
            file.truncate(64 + cut % (file.len() - 63));
        }
        let mut input = vec![control];
        input.extend_from_slice(&damaged(file, &hits));
        targets::segment(&input);
    }

    #[test]
    fn checkpoint_on_any_bytes(control in any::<u8>(), data in bytes(100)) {
        let mut input = vec![control];
        input.extend_from_slice(&data);
        targets::checkpoint(&input);
    }

    #[test]
    fn dead_letter_on_any_file(data in bytes(200)) {
        let mut input = vec![0];
        input.extend_from_slice(&data);
        targets::dead_letter(&input);
    }

    #[test]
    fn dead_letter_on_damaged_envelopes(
        letters in prop::collection::vec(
            (0u32..3, 0u64..6, 0u64..4, bytes(12), bytes(12)),
            0..6,
        ),
        hits in hits(),
    ) {
        let mut input = vec![1];
        for (shard, seq, dl_us, reason, payload) in &letters {
            input.extend_from_slice(&targets::envelope_record(*shard, *seq, *dl_us, reason, payload));
        }
        targets::dead_letter(&input);
        targets::dead_letter(&damaged(input, &hits));
    }
}
