//! Records → request body.
//!
//! `delivery = "batched"` frames the batch with the configured encoding;
//! a record the encoding cannot carry is left out of the body and rejected
//! on its own (see `framing`). `delivery = "per_record"` sends each raw
//! payload as its own body. Either body may then be gzipped.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use sink_sdk::Record;

use super::config::HttpEncoding;
use crate::framing::BodyFraming;

/// Content type of a per-record body: the raw payload.
pub(crate) const PER_RECORD_CONTENT_TYPE: &str = "application/octet-stream";

/// A batch turned into one request body.
#[derive(Debug)]
pub(crate) struct EncodedBatch {
    pub body: Vec<u8>,
    /// Batch index of each record in the body, in body order.
    pub included: Vec<usize>,
    /// One entry per batch record: `Some(reason)` if it was left out.
    pub rejections: Vec<Option<String>>,
}

impl EncodedBatch {
    pub fn has_rejections(&self) -> bool {
        self.included.len() < self.rejections.len()
    }
}

pub(crate) fn framing(encoding: HttpEncoding) -> BodyFraming {
    match encoding {
        HttpEncoding::Ndjson => BodyFraming::Ndjson,
        HttpEncoding::JsonArray => BodyFraming::JsonArray,
        HttpEncoding::LengthPrefixed => BodyFraming::LengthPrefixed,
    }
}

pub(crate) fn content_type(encoding: HttpEncoding) -> &'static str {
    match encoding {
        HttpEncoding::Ndjson => "application/x-ndjson",
        HttpEncoding::JsonArray => "application/json",
        HttpEncoding::LengthPrefixed => "application/octet-stream",
    }
}

/// Frames every record the encoding can carry into one body.
pub(crate) fn encode_batch(encoding: HttpEncoding, records: &[Record<'_>]) -> EncodedBatch {
    let framing = framing(encoding);
    let payload_bytes: usize = records.iter().map(|r| r.payload.len()).sum();
    let mut body = Vec::with_capacity(framing.framed_len(records.len(), payload_bytes));
    let mut included = Vec::with_capacity(records.len());
    let mut rejections = Vec::with_capacity(records.len());
    framing.open(&mut body);
    for (index, record) in records.iter().enumerate() {
        match framing.check(
            record.payload,
            "encoding = \"length_prefixed\" or \"json_array\"",
        ) {
            Ok(()) => {
                framing.push(&mut body, record.payload, included.is_empty());
                included.push(index);
                rejections.push(None);
            }
            Err(reason) => rejections.push(Some(reason)),
        }
    }
    framing.close(&mut body);
    assert_eq!(rejections.len(), records.len());
    EncodedBatch {
        body,
        included,
        rejections,
    }
}

/// gzip of `body`, for `Content-Encoding: gzip`.
pub(crate) fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(
        Vec::with_capacity(body.len() / 4 + 64),
        Compression::default(),
    );
    encoder
        .write_all(body)
        .expect("writing into a Vec cannot fail");
    encoder.finish().expect("writing into a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn records<'a>(payloads: &'a [&'a [u8]]) -> Vec<Record<'a>> {
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Record {
                shard: 0,
                seq: i as u64,
                tier: 1,
                arrival_unix_us: 0,
                payload: p,
            })
            .collect()
    }

    #[test]
    fn ndjson_leaves_out_records_with_newlines() {
        let recs = records(&[b"a", b"b\nc", b"d"]);
        let e = encode_batch(HttpEncoding::Ndjson, &recs);
        assert_eq!(e.body, b"a\nd\n");
        assert_eq!(e.included, [0, 2]);
        assert!(e.has_rejections());
        assert_eq!(
            e.rejections[1].as_deref(),
            Some("record contains a newline byte at offset 1; use encoding = \"length_prefixed\" or \"json_array\"")
        );
    }

    #[test]
    fn json_array_commas_skip_rejected_records() {
        let recs = records(&[b"nope", b"1", b"{}", b"[", b"2"]);
        let e = encode_batch(HttpEncoding::JsonArray, &recs);
        assert_eq!(e.body, b"[1,{},2]");
        assert_eq!(e.included, [1, 2, 4]);
        assert!(e.rejections[0]
            .as_deref()
            .unwrap()
            .starts_with("record is not a JSON value: "));
    }

    #[test]
    fn gzip_round_trips() {
        let body = b"{\"a\":1}\n{\"b\":2}\n".repeat(100);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&gzip(&body)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
    }
}
