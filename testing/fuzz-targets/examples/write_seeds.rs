//! Writes the seed corpus, `testing/fuzz/corpus/<target>/seed-*`: valid inputs made
//! by the real writers (the conformance vectors' frames, segment files,
//! checkpoints and a dead-letter segment written by spillway-wab, the
//! configuration files of the repository). Run it by hand after a format
//! change (`cargo run --release -p spillway-fuzz-targets --example
//! write_seeds`). Files a fuzzer found are kept under other names.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use spillway_wab::checkpoint::{checkpoint_path, encode_legacy};
use spillway_wab::deadletter::{DeadLetter, DeadLetterStore};
use spillway_wab::format::RecordMeta;
use spillway_wab::{preallocate, seal, write_checkpoint, ActiveSegment, AppendRecord, FsStorage};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn seed(target: &str, name: &str, bytes: &[u8]) {
    let dir = root().join("testing/fuzz/corpus").join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

fn with_control(control: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![control];
    out.extend_from_slice(bytes);
    out
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn main() {
    frames();
    segments();
    checkpoints();
    dead_letters();
    configs();
    http_answers();
}

/// Every frame of the conformance vectors, one stream of all the valid
/// requests, and the batches' payloads for push_batch.
fn frames() {
    let text = fs::read_to_string(root().join("protocol/conformance/vectors.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut stream = Vec::new();
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let frame = hex(v["frame"].as_str().unwrap());
        seed("frame_decoder", name, &frame);
        if v["kind"] == "request" {
            stream.extend_from_slice(&frame);
        }
        if frame.len() >= 20 && frame[5] == 6 {
            let payload = &frame[16..frame.len() - 4];
            seed("push_batch", name, &with_control(frame[6], payload));
        }
    }
    seed("frame_decoder", "all-requests", &stream);
}

/// A segment of `records` written by the writer in `dir`: sealed (truncated
/// at its footer) or left open with a short zero tail.
fn write_segment(dir: &Path, id: u64, first_seq: u64, records: &[&[u8]], sealed: bool) -> Vec<u8> {
    let bytes: u64 = records.iter().map(|r| 16 + r.len() as u64).sum();
    let pre = preallocate(&FsStorage, dir, id, 64 + bytes + 40 + 24).unwrap();
    let mut segment = ActiveSegment::start(pre, 7, first_seq);
    let appended: Vec<AppendRecord<'_>> = records
        .iter()
        .enumerate()
        .map(|(i, payload)| AppendRecord {
            payload,
            meta: RecordMeta {
                tier: 1 + (i % 3) as u8,
                arrival_unix_us: 1_780_000_000_000_000 + i as u64,
            }
            .pack(),
            payload_crc: None,
        })
        .collect();
    segment.append(&appended).unwrap();
    segment.sync().unwrap();
    let path = if sealed {
        seal(&FsStorage, dir, segment.into_sealing()).unwrap()
    } else {
        segment.path.clone()
    };
    fs::read(path).unwrap()
}

fn segments() {
    let dir = tempfile::tempdir().unwrap();
    let records: [&[u8]; 3] = [b"hello", b"{\"event\":\"signup\",\"user\":42}", b"x"];
    let sealed = write_segment(dir.path(), 1, 1000, &records, true);
    let open = write_segment(dir.path(), 2, 2000, &records[..2], false);
    seed("segment", "sealed", &with_control(0, &sealed));
    seed("segment", "open", &with_control(0, &open));
    seed("segment", "unused-prealloc", &with_control(0, &[0u8; 128]));
    // Fix header, records and footer: valid whatever the fuzzer changes.
    seed("segment", "sealed-fixed", &with_control(0x07, &sealed));
    // The same, but record 2 left damaged: salvage.
    seed(
        "segment",
        "sealed-damaged-2nd",
        &with_control(0x27, &sealed),
    );
    // Two open segments, the second one seq later: the overlap is cut.
    seed("segment", "open-two", &with_control(0x0b, &open));
}

fn checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    write_checkpoint(&FsStorage, dir.path(), 12345).unwrap();
    let one = fs::read(checkpoint_path(dir.path())).unwrap();
    write_checkpoint(&FsStorage, dir.path(), 67890).unwrap();
    let two = fs::read(checkpoint_path(dir.path())).unwrap();
    seed("checkpoint", "one-write", &with_control(0, &one));
    seed("checkpoint", "two-writes", &with_control(0, &two));
    seed(
        "checkpoint",
        "legacy",
        &with_control(0, &encode_legacy(777)),
    );
    // The two slots' 40 bytes each, laid out and fixed by the target.
    let mut packed = one[..40].to_vec();
    packed.extend_from_slice(&two[4096..4136]);
    seed("checkpoint", "packed-slots", &with_control(0x0d, &packed));
    seed(
        "checkpoint",
        "packed-legacy",
        &with_control(0x06, &encode_legacy(5)),
    );
}

fn dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let dl = dir.path().join("dead-letter");
    let mut store = DeadLetterStore::open(FsStorage, &dl).unwrap();
    let letter = |shard, seq, reason: &str| DeadLetter {
        shard,
        seq,
        tier: 1,
        arrival_unix_us: 1_780_000_000_000_000,
        dead_lettered_unix_us: 1_780_000_000_000_000 + seq,
        reason: reason.into(),
        payload: Bytes::from(format!("payload-{shard}-{seq}")),
    };
    store
        .append(&[
            letter(
                0,
                1,
                "HTTP 400 Bad Request: bad json (POST http://127.0.0.1:9/in)",
            ),
            letter(1, 2, "HTTP 422"),
            letter(0, 3, "gave up after 60000 ms"),
        ])
        .unwrap();
    // Removing rewrites the store as one sealed segment of the survivors.
    store.remove_where(|l| l.seq == 2).unwrap();
    let sealed = fs::read_dir(&dl)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sealed"))
        .unwrap();
    seed(
        "dead_letter",
        "sealed",
        &with_control(0, &fs::read(sealed).unwrap()),
    );
    let envelope = |shard: u32, seq: u64, reason: &[u8], payload: &[u8]| {
        spillway_fuzz_targets::envelope_record(shard, seq, 100 + seq, reason, payload)
    };
    let mut records = vec![1u8];
    records.extend(envelope(0, 1, b"HTTP 400", b"{\"a\":1}"));
    records.extend(envelope(0, 1, b"again", b"dup"));
    records.extend(envelope(2, 9, b"", b""));
    records.extend_from_slice(&[4, 0, b'j', b'u', b'n', b'k']);
    seed("dead_letter", "envelopes", &records);
    seed(
        "dead_letter",
        "unused-prealloc",
        &with_control(0, &[0u8; 64]),
    );
}

/// The repository's configuration files and every TOML block of the docs.
fn configs() {
    let root = root();
    for file in [
        "configs/default.toml",
        "configs/small-segments.toml",
        "deploy/spillway.toml",
    ] {
        let name = file.replace('/', "-");
        seed("config", &name, &fs::read(root.join(file)).unwrap());
    }
    for doc in [
        "docs/sinks.md",
        "docs/plugins.md",
        "docs/operations.md",
        "docs/security.md",
        "README.md",
    ] {
        let text = fs::read_to_string(root.join(doc)).unwrap();
        let mut block: Option<String> = None;
        let mut n = 0;
        for line in text.lines() {
            match (&mut block, line.trim_start()) {
                (None, l) if l.starts_with("```toml") => block = Some(String::new()),
                (Some(b), l) if l.starts_with("```") => {
                    n += 1;
                    let name = format!("{}-{n}", doc.replace('/', "-"));
                    seed("config", &name, b.as_bytes());
                    block = None;
                }
                (Some(b), _) => {
                    b.push_str(line);
                    b.push('\n');
                }
                _ => {}
            }
        }
    }
}

/// Answers: status (u16 LE, minus 100), cap (s), clock (u32 s), headers
/// (count, then selector, length, value), body.
fn http_answers() {
    let answer = |status: u16, headers: &[(u8, &str)], body: &[u8]| {
        let mut out = (status - 100).to_le_bytes().to_vec();
        out.push(30);
        out.extend_from_slice(&784_111_777u32.to_le_bytes());
        out.push(headers.len() as u8);
        for (selector, value) in headers {
            out.push(*selector);
            out.push(value.len() as u8);
            out.extend_from_slice(value.as_bytes());
        }
        out.extend_from_slice(body);
        out
    };
    seed("http_response", "200", &answer(200, &[], b""));
    seed(
        "http_response",
        "503-retry-after-seconds",
        &answer(503, &[(0, "120")], b"busy"),
    );
    seed(
        "http_response",
        "429-retry-after-date",
        &answer(429, &[(0, "Sun, 06 Nov 1994 08:49:37 GMT")], b""),
    );
    seed(
        "http_response",
        "301-location",
        &answer(301, &[(2, "https://example.test/new")], b""),
    );
    seed(
        "http_response",
        "400-json-body",
        &answer(
            400,
            &[(3, "application/json")],
            b"{\"error\":\"bad\nrecord\"}",
        ),
    );
}
