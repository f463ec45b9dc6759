//! Frames built by hand ([`frame`], [`push_frame`], [`health_frame`],
//! [`batch_frame`], [`batch_payload`]) on `spillway_protocol::encode_frame`,
//! and the responses a test expects.

use bytes::BytesMut;

use crate::*;

/// Message type bytes, spelled out so tests read like the spec.
pub mod msg {
    pub const PUSH: u8 = 0x01;
    pub const ACK: u8 = 0x02;
    pub const NACK: u8 = 0x03;
    pub const HEALTH_CHECK: u8 = 0x04;
    pub const HEALTH_CHECK_RESPONSE: u8 = 0x05;
    pub const PUSH_BATCH: u8 = 0x06;
    pub const ACK_BATCH: u8 = 0x07;
}

/// A frame with arbitrary header bytes and both CRCs computed correctly.
pub fn frame(message_type: u8, tier: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_frame(message_type, tier, flags, payload, &mut out);
    out.to_vec()
}

/// A well-formed Push frame.
pub fn push_frame(tier: Tier, payload: &[u8]) -> Vec<u8> {
    frame(msg::PUSH, tier.as_byte(), 0, payload)
}

/// A well-formed HealthCheck frame.
pub fn health_frame() -> Vec<u8> {
    frame(msg::HEALTH_CHECK, 0x01, 0, &[])
}

/// A PushBatch payload: `count` (as given, even if wrong), then each
/// record as (u32 LE length, bytes).
pub fn batch_payload(count: u32, records: &[&[u8]]) -> Vec<u8> {
    let mut p = count.to_le_bytes().to_vec();
    for r in records {
        p.extend_from_slice(&(r.len() as u32).to_le_bytes());
        p.extend_from_slice(r);
    }
    p
}

/// A well-formed PushBatch frame.
pub fn batch_frame(tier: Tier, records: &[&[u8]]) -> Vec<u8> {
    frame(
        msg::PUSH_BATCH,
        tier.as_byte(),
        0,
        &batch_payload(records.len() as u32, records),
    )
}

/// A response frame built by hand (independently of the protocol crate's
/// response encoder): header with filler tier 0x01 and flags 0, payload,
/// CRCs from `crc32fast`.
pub fn expected_response(message_type: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = b"WEIR".to_vec();
    f.extend_from_slice(&[0x01, message_type, 0x01, 0x00]);
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let hcrc = crc32fast::hash(&f[..12]);
    f.extend_from_slice(&hcrc.to_le_bytes());
    f.extend_from_slice(payload);
    f.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    f
}

/// The exact bytes of a Nack with `reason` (VersionMismatch carries `[0x02, 0x01]`).
pub fn expected_nack(reason: NackReason) -> Vec<u8> {
    if reason == NackReason::VersionMismatch {
        expected_response(msg::NACK, &[0x02, 0x01])
    } else {
        expected_response(msg::NACK, &[reason.as_byte()])
    }
}

/// The exact bytes of an Ack.
pub fn expected_ack() -> Vec<u8> {
    expected_response(msg::ACK, &[])
}

/// The exact bytes of an AckBatch counting `n` records.
pub fn expected_ack_batch(n: u32) -> Vec<u8> {
    expected_response(msg::ACK_BATCH, &n.to_le_bytes())
}

/// The exact bytes of a HealthCheckResponse.
pub fn expected_health_response() -> Vec<u8> {
    expected_response(msg::HEALTH_CHECK_RESPONSE, &[])
}
