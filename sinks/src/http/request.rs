//! Request headers: the record identities a request carries, and the
//! idempotency key derived from them.
//!
//! The key depends only on the daemon's instance id and `(shard, seq)` of
//! the records in the body, never on payloads, time or attempt number, so
//! a redelivery of the same records carries the same key, and another
//! daemon's records (numbered from 0 too) never do:
//!
//! - batched, contiguous seqs: `spillway-{instance}-{shard}-{first}-{last}`;
//! - batched, gaps: `spillway-{instance}-{shard}-{first}-{last}-{crc}`
//!   where `crc` is the CRC-32 (8 lowercase hex digits) of the seqs as u64
//!   little-endian, and `Spillway-Seqs` lists them as runs
//!   (`10-14,16,18-20`);
//! - per record: `spillway-{instance}-{shard}-{seq}`.
//!
//! A batch re-formed after a restart may be cut differently (and so carry
//! another key); a receiver that wants exact deduplication keys on
//! `(Spillway-Instance, Spillway-Shard, seq)` per record, which these
//! headers give it.

use reqwest::header::{HeaderName, HeaderValue, CONTENT_ENCODING, CONTENT_TYPE};

use super::config::HttpSettings;

pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
pub(crate) const SPILLWAY_INSTANCE: HeaderName = HeaderName::from_static("spillway-instance");
pub(crate) const SPILLWAY_SHARD: HeaderName = HeaderName::from_static("spillway-shard");
pub(crate) const SPILLWAY_SEQ_FIRST: HeaderName = HeaderName::from_static("spillway-seq-first");
pub(crate) const SPILLWAY_SEQ_LAST: HeaderName = HeaderName::from_static("spillway-seq-last");
pub(crate) const SPILLWAY_RECORD_COUNT: HeaderName =
    HeaderName::from_static("spillway-record-count");
pub(crate) const SPILLWAY_SEQS: HeaderName = HeaderName::from_static("spillway-seqs");

/// The records one request carries: a shard and their seqs, increasing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Carried<'a> {
    Batch { shard: u32, seqs: &'a [u64] },
    Record { shard: u32, seq: u64 },
}

impl Carried<'_> {
    fn shard(&self) -> u32 {
        match *self {
            Carried::Batch { shard, .. } | Carried::Record { shard, .. } => shard,
        }
    }

    fn seqs(&self) -> &[u64] {
        match self {
            Carried::Batch { seqs, .. } => seqs,
            Carried::Record { seq, .. } => std::slice::from_ref(seq),
        }
    }

    /// The key of these records from the daemon `instance`.
    pub fn idempotency_key(&self, instance: &str) -> String {
        match *self {
            Carried::Record { shard, seq } => format!("spillway-{instance}-{shard}-{seq}"),
            Carried::Batch { shard, seqs } => batch_key(instance, shard, seqs),
        }
    }
}

fn batch_key(instance: &str, shard: u32, seqs: &[u64]) -> String {
    assert!(!seqs.is_empty(), "a request carries at least one record");
    let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
    if is_contiguous(seqs) {
        return format!("spillway-{instance}-{shard}-{first}-{last}");
    }
    let mut crc = crc32fast::Hasher::new();
    for seq in seqs {
        crc.update(&seq.to_le_bytes());
    }
    format!(
        "spillway-{instance}-{shard}-{first}-{last}-{:08x}",
        crc.finalize()
    )
}

/// Seqs are strictly increasing, so no gap means `last - first + 1 == len`.
pub(crate) fn is_contiguous(seqs: &[u64]) -> bool {
    debug_assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    match (seqs.first(), seqs.last()) {
        (Some(first), Some(last)) => last - first + 1 == seqs.len() as u64,
        _ => true,
    }
}

/// A ready-to-send request carrying `carried` records of the daemon
/// `instance` in `body`.
pub(crate) fn build(
    client: &reqwest::Client,
    settings: &HttpSettings,
    instance: &str,
    carried: Carried<'_>,
    content_type: &'static str,
    body: Vec<u8>,
) -> reqwest::RequestBuilder {
    let seqs = carried.seqs();
    let mut request = client
        .request(settings.method.clone(), settings.url.clone())
        .headers(settings.headers.clone())
        .header(IDEMPOTENCY_KEY, carried.idempotency_key(instance))
        .header(SPILLWAY_INSTANCE, instance)
        .header(SPILLWAY_SHARD, carried.shard())
        .header(SPILLWAY_SEQ_FIRST, seqs[0])
        .header(SPILLWAY_SEQ_LAST, seqs[seqs.len() - 1])
        .header(SPILLWAY_RECORD_COUNT, seqs.len());
    if !is_contiguous(seqs) {
        request = request.header(SPILLWAY_SEQS, seqs_list(seqs));
    }
    if !settings.headers.contains_key(CONTENT_TYPE) {
        request = request.header(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    if settings.gzip {
        request = request.header(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    request.body(body)
}

/// The seqs as comma-separated runs, `10-14,16,18-20`: a batch with a few
/// gaps stays a short header (a plain list of 1,000 seqs would be ~7 KB,
/// which servers may refuse with 431, a permanent error).
fn seqs_list(seqs: &[u64]) -> String {
    let mut list = String::new();
    let mut i = 0;
    while i < seqs.len() {
        let start = seqs[i];
        let mut end = start;
        while i + 1 < seqs.len() && seqs[i + 1] == end + 1 {
            i += 1;
            end = seqs[i];
        }
        if !list.is_empty() {
            list.push(',');
        }
        if start == end {
            list.push_str(&start.to_string());
        } else {
            list.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    fn key(shard: u32, seqs: &[u64]) -> String {
        Carried::Batch { shard, seqs }.idempotency_key(ID)
    }

    #[test]
    fn contiguous_batch_key() {
        assert_eq!(key(3, &[10, 11, 12]), format!("spillway-{ID}-3-10-12"));
        assert_eq!(key(0, &[7]), format!("spillway-{ID}-0-7-7"));
        assert_eq!(
            Carried::Record { shard: 2, seq: 99 }.idempotency_key(ID),
            format!("spillway-{ID}-2-99")
        );
        // The same records of another daemon: another key.
        assert_ne!(
            Carried::Record { shard: 2, seq: 99 }.idempotency_key("another"),
            Carried::Record { shard: 2, seq: 99 }.idempotency_key(ID)
        );
    }

    #[test]
    fn gapped_batch_key_hashes_the_seq_list() {
        let mut bytes = Vec::new();
        for s in [10u64, 12, 13] {
            bytes.extend_from_slice(&s.to_le_bytes());
        }
        let want = format!("spillway-{ID}-1-10-13-{:08x}", crc32fast::hash(&bytes));
        assert_eq!(key(1, &[10, 12, 13]), want);
        // Same first and last, different records in between: different key.
        assert_ne!(key(1, &[10, 11, 13]), key(1, &[10, 12, 13]));
        // Same records, same key; other shard, other key.
        assert_eq!(key(1, &[10, 12, 13]), key(1, &[10, 12, 13]));
        assert_ne!(key(1, &[10, 12, 13]), key(2, &[10, 12, 13]));
    }

    #[test]
    fn contiguity() {
        assert!(is_contiguous(&[]));
        assert!(is_contiguous(&[5]));
        assert!(is_contiguous(&[5, 6, 7]));
        assert!(!is_contiguous(&[5, 7]));
        assert!(is_contiguous(&[u64::MAX - 1, u64::MAX]));
        assert_eq!(seqs_list(&[1, 5, 6]), "1,5-6");
        assert_eq!(
            seqs_list(&[10, 11, 12, 13, 14, 16, 18, 19, 20]),
            "10-14,16,18-20"
        );
        assert_eq!(seqs_list(&[7]), "7");
    }
}
