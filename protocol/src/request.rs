//! Requests (client → daemon): the daemon-side decoder with its specified
//! check order, and the client-side encoders for push, batch and health check.

use bytes::{BufMut, Bytes, BytesMut};

use crate::frame::{
    begin_frame, check_payload_crc, finish_frame, frame_len_for, parse_header, read_u32, wire_len,
    Header, HEADER_LEN, PAYLOAD_BYTES_HARD_MAX,
};
use crate::types::{MessageType, NackReason, Tier};

use crate::batch::{BatchRecords, BATCH_LEN_FIELD};
use crate::crc::{hash_batch, hash_push, RecordCrcs};

/// A request decoded by the daemon. Payloads are zero-copy slices (`Bytes`) of the read buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// One record to store at `tier`.
    Push {
        /// Durability the client asked for.
        tier: Tier,
        /// The record (never empty).
        payload: Bytes,
    },
    /// Several records to store at `tier`, acked together with one AckBatch.
    PushBatch {
        /// Durability the client asked for, shared by every record.
        tier: Tier,
        /// The records in order (at least one, none empty), packed as they
        /// arrived (see [`BatchRecords`]).
        records: BatchRecords,
    },
    /// A liveness probe.
    HealthCheck,
}

impl Request {
    /// Records this request carries: 1 for a push, 0 for a health check.
    pub fn record_count(&self) -> usize {
        match self {
            Self::Push { .. } => 1,
            Self::PushBatch { records, .. } => records.len(),
            Self::HealthCheck => 0,
        }
    }

    /// Record bytes this request carries (excluding framing and batch length prefixes).
    pub fn payload_bytes(&self) -> usize {
        match self {
            Self::Push { payload, .. } => payload.len(),
            Self::PushBatch { records, .. } => records.payload_bytes(),
            Self::HealthCheck => 0,
        }
    }
}

/// Why a request was refused: the nack to send and a human-readable detail naming the offending byte/value/limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct RequestError {
    /// The reason byte to send back in the nack.
    pub reason: NackReason,
    /// What exactly was wrong, for the daemon's log.
    pub detail: String,
}

impl RequestError {
    fn new(reason: NackReason, detail: impl Into<String>) -> Self {
        Self {
            reason,
            detail: detail.into(),
        }
    }
}

/// What a header announces, once its type and tier have been accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Push(Tier),
    PushBatch(Tier),
    HealthCheck,
}

/// Decode one request from the front of `buf`, consuming it on success.
///
/// The frame is split off with `buf.split_to(frame_len).freeze()` and payloads
/// are sliced from it, so no payload byte is copied. `Ok(None)` means more
/// bytes are needed and nothing was consumed. On `Err` nothing is consumed
/// either; the daemon sends `err.reason` as a nack and, unless the reason is
/// retryable, closes the connection.
///
/// The effective cap is `min(payload_bytes_max, PAYLOAD_BYTES_HARD_MAX)`, and
/// it is enforced from the header alone, before the payload has arrived.
/// Checks run in the order the spec fixes (see `docs/wire-protocol.md`).
pub fn decode_request(
    buf: &mut BytesMut,
    payload_bytes_max: u32,
) -> Result<Option<Request>, RequestError> {
    Ok(decode_request_crcs(buf, payload_bytes_max)?.map(|(request, _)| request))
}

/// [`decode_request`], and the CRC of each large record, which the trailer
/// check computed on the way (see [`crate::crc`]): the daemon's write path
/// derives each stored record CRC from it rather than hashing the record
/// again.
pub fn decode_request_crcs(
    buf: &mut BytesMut,
    payload_bytes_max: u32,
) -> Result<Option<(Request, RecordCrcs)>, RequestError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header = parse_header(&buf[..HEADER_LEN])
        .map_err(|fault| RequestError::new(fault_reason(&fault), fault.to_string()))?;
    let kind = request_kind(&header)?;
    check_flags(header.flags)?;
    check_payload_len(kind, header.payload_len, payload_bytes_max)?;

    let frame_len = header.frame_len();
    if buf.len() < frame_len {
        return Ok(None);
    }
    let payload_end = frame_len - crate::frame::TRAILER_LEN;
    let (computed, crcs) = match kind {
        Kind::Push(_) => hash_push(&buf[HEADER_LEN..payload_end]),
        Kind::PushBatch(_) => hash_batch(&buf[HEADER_LEN..payload_end]),
        Kind::HealthCheck => (
            crc32fast::hash(&buf[HEADER_LEN..payload_end]),
            RecordCrcs::default(),
        ),
    };
    check_payload_crc(&buf[..frame_len], computed)
        .map_err(|e| RequestError::new(NackReason::BadPayloadCrc, e.to_string()))?;
    if let Kind::PushBatch(_) = kind {
        validate_batch(&buf[HEADER_LEN..payload_end])?;
    }

    // Every check passed: only now is the frame consumed.
    let frame = buf.split_to(frame_len).freeze();
    let payload = frame.slice(HEADER_LEN..payload_end);
    let request = match kind {
        Kind::Push(tier) => Request::Push { tier, payload },
        Kind::PushBatch(tier) => Request::PushBatch {
            tier,
            records: BatchRecords::from_validated(payload),
        },
        Kind::HealthCheck => Request::HealthCheck,
    };
    Ok(Some((request, crcs)))
}

fn fault_reason(fault: &crate::frame::HeaderFault) -> NackReason {
    use crate::frame::HeaderFault;
    match fault {
        HeaderFault::BadMagic(_) => NackReason::BadMagic,
        HeaderFault::Version(_) => NackReason::VersionMismatch,
        HeaderFault::HeaderCrc { .. } => NackReason::BadHeaderCrc,
    }
}

/// Message type, then tier: both refusals are UnknownMessage.
fn request_kind(header: &Header) -> Result<Kind, RequestError> {
    let byte = header.message_type;
    let Some(message_type) = MessageType::from_byte(byte) else {
        return Err(RequestError::new(
            NackReason::UnknownMessage,
            format!("unknown message type byte {byte:#04x}"),
        ));
    };
    let tier = || {
        Tier::from_byte(header.tier).ok_or_else(|| {
            RequestError::new(
                NackReason::UnknownMessage,
                format!(
                    "{message_type} with unknown tier byte {:#04x} (expected 0x01 sync, 0x02 batched or 0x03 buffered)",
                    header.tier
                ),
            )
        })
    };
    match message_type {
        MessageType::Push => Ok(Kind::Push(tier()?)),
        MessageType::PushBatch => Ok(Kind::PushBatch(tier()?)),
        // A health check has no durability, yet its tier byte must still be
        // a tier: weir v1 checks the whole header before the type (weir's
        // wire probes flag a daemon that answers tier 0x00).
        MessageType::HealthCheck => tier().map(|_| Kind::HealthCheck),
        MessageType::Ack
        | MessageType::Nack
        | MessageType::HealthCheckResponse
        | MessageType::AckBatch => Err(RequestError::new(
            NackReason::UnknownMessage,
            format!("message type byte {byte:#04x} ({message_type}) is a response; clients may only send push, health_check or push_batch"),
        )),
    }
}

fn check_flags(flags: u8) -> Result<(), RequestError> {
    if flags == 0 {
        Ok(())
    } else {
        Err(RequestError::new(
            NackReason::ReservedFlagsSet,
            format!("flags byte is {flags:#04x}; all flag bits are reserved and must be 0"),
        ))
    }
}

/// Length checks that need only the header, so an oversized frame is refused
/// before any of it is buffered.
fn check_payload_len(kind: Kind, len: u32, payload_bytes_max: u32) -> Result<(), RequestError> {
    let cap = payload_bytes_max.min(PAYLOAD_BYTES_HARD_MAX);
    if len > cap {
        return Err(RequestError::new(
            NackReason::PayloadTooLarge,
            format!("payload length {len} exceeds the cap of {cap} bytes"),
        ));
    }
    match kind {
        Kind::Push(_) | Kind::PushBatch(_) if len == 0 => Err(RequestError::new(
            NackReason::EmptyPayload,
            format!(
                "{} with a zero-length payload",
                if matches!(kind, Kind::Push(_)) {
                    "push"
                } else {
                    "push_batch"
                }
            ),
        )),
        _ => Ok(()),
    }
}

fn malformed(detail: String) -> RequestError {
    RequestError::new(
        NackReason::UnknownMessage,
        format!("malformed batch: {detail}"),
    )
}

/// Checks a PushBatch payload's structure without allocating.
fn validate_batch(payload: &[u8]) -> Result<(), RequestError> {
    if payload.len() < BATCH_LEN_FIELD {
        return Err(malformed(format!(
            "payload is {} bytes, too short for the 4-byte record count",
            payload.len()
        )));
    }
    let count = read_u32(&payload[..BATCH_LEN_FIELD]);
    if count == 0 {
        return Err(RequestError::new(
            NackReason::EmptyPayload,
            "push_batch with a record count of 0",
        ));
    }
    let mut rest = &payload[BATCH_LEN_FIELD..];
    for index in 1..=count {
        rest = validate_record(rest, index, count)?;
    }
    if !rest.is_empty() {
        return Err(malformed(format!(
            "{} trailing bytes after the last of {count} records",
            rest.len()
        )));
    }
    Ok(())
}

/// Checks record `index` (1-based) at the front of `rest`; returns what follows it.
fn validate_record(rest: &[u8], index: u32, count: u32) -> Result<&[u8], RequestError> {
    if rest.len() < BATCH_LEN_FIELD {
        return Err(malformed(format!(
            "record {index} of {count} needs a 4-byte length but only {} bytes remain",
            rest.len()
        )));
    }
    let len = read_u32(&rest[..BATCH_LEN_FIELD]);
    let rest = &rest[BATCH_LEN_FIELD..];
    if len == 0 {
        return Err(RequestError::new(
            NackReason::EmptyPayload,
            format!("record {index} of {count} is empty"),
        ));
    }
    if len as usize > rest.len() {
        return Err(malformed(format!(
            "record {index} of {count} declares {len} bytes but only {} remain",
            rest.len()
        )));
    }
    Ok(&rest[len as usize..])
}

/// Appends a Push frame carrying `payload` at `tier`.
///
/// No validation: an empty payload encodes fine (and the daemon nacks it).
///
/// # Panics
/// If `payload` is longer than `u32::MAX` bytes.
pub fn encode_push(tier: Tier, payload: &[u8], out: &mut BytesMut) {
    crate::frame::encode_frame(MessageType::Push.as_byte(), tier.as_byte(), 0, payload, out);
}

/// Appends a PushBatch frame carrying `records` at `tier`, writing the records
/// straight into `out`.
///
/// No validation: empty batches or records encode fine (and the daemon nacks them).
///
/// # Panics
/// If the batch payload is longer than `u32::MAX` bytes.
pub fn encode_push_batch<R: AsRef<[u8]>>(tier: Tier, records: &[R], out: &mut BytesMut) {
    let payload_len = batch_payload_len(records.iter().map(|r| r.as_ref().len()));
    let start = begin_frame(
        MessageType::PushBatch.as_byte(),
        tier.as_byte(),
        0,
        wire_len(payload_len),
        out,
    );
    out.put_u32_le(wire_len(records.len()));
    for record in records {
        let record = record.as_ref();
        out.put_u32_le(wire_len(record.len()));
        out.put_slice(record);
    }
    finish_frame(start, out);
}

/// Appends a HealthCheck frame (tier byte 0x01 as filler, empty payload).
pub fn encode_health_check(out: &mut BytesMut) {
    crate::frame::encode_frame(
        MessageType::HealthCheck.as_byte(),
        Tier::Sync.as_byte(),
        0,
        &[],
        out,
    );
}

/// Size on the wire of a PushBatch frame carrying these record lengths (so a
/// client can split batches under the payload cap).
pub fn push_batch_frame_len(record_lens: impl IntoIterator<Item = usize>) -> usize {
    frame_len_for(batch_payload_len(record_lens))
}

/// PushBatch payload size: the count field plus a length prefix per record.
fn batch_payload_len(record_lens: impl IntoIterator<Item = usize>) -> usize {
    record_lens
        .into_iter()
        .fold(BATCH_LEN_FIELD, |acc, len| acc + BATCH_LEN_FIELD + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_frame_len_matches_the_encoder() {
        let records: [&[u8]; 3] = [b"a", b"bcd", b"efghij"];
        let mut out = BytesMut::new();
        encode_push_batch(Tier::Batched, &records, &mut out);
        assert_eq!(
            out.len(),
            push_batch_frame_len(records.iter().map(|r| r.len()))
        );
        // header + count + 3 × prefix + 10 bytes + trailer
        assert_eq!(out.len(), 16 + 4 + 12 + 10 + 4);
    }

    #[test]
    fn record_count_and_payload_bytes() {
        let push = Request::Push {
            tier: Tier::Sync,
            payload: Bytes::from_static(b"hello"),
        };
        assert_eq!((push.record_count(), push.payload_bytes()), (1, 5));
        let batch = Request::PushBatch {
            tier: Tier::Sync,
            records: vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cde")].into(),
        };
        assert_eq!((batch.record_count(), batch.payload_bytes()), (2, 5));
        let hc = Request::HealthCheck;
        assert_eq!((hc.record_count(), hc.payload_bytes()), (0, 0));
    }

    #[test]
    fn error_display_leads_with_the_reason() {
        let e = RequestError::new(NackReason::ReservedFlagsSet, "flags byte is 0x80");
        assert_eq!(e.to_string(), "reserved_flags_set: flags byte is 0x80");
    }
}
