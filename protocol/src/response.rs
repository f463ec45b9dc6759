//! Responses (daemon → client): the daemon-side encoder and the client-side
//! decoder, which trusts nothing the daemon sends.

use bytes::{Buf, BufMut, BytesMut};

use crate::frame::{
    begin_frame, check_payload_crc, finish_frame, parse_header, read_u32, wire_len, HEADER_LEN,
    TRAILER_LEN, VERSION,
};
use crate::types::{MessageType, NackReason, Tier};

/// A response frame as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Response {
    /// The push was stored at its tier's durability.
    Ack,
    /// The request was refused.
    Nack(NackReason),
    /// The daemon is alive.
    HealthCheckResponse,
    /// A whole batch of `count` records was stored.
    AckBatch {
        /// Records acknowledged (the batch's record count).
        count: u32,
    },
}

/// Tier byte written into every response header: responses have no tier, and
/// weir fills the byte with Sync.
const FILLER_TIER: u8 = Tier::Sync as u8;

/// Appends the encoded response to out.
///
/// A VersionMismatch nack carries a second byte, the version this daemon speaks.
pub fn encode_response(response: Response, out: &mut BytesMut) {
    let (message_type, payload_len) = match response {
        Response::Ack => (MessageType::Ack, 0),
        Response::HealthCheckResponse => (MessageType::HealthCheckResponse, 0),
        Response::AckBatch { .. } => (MessageType::AckBatch, 4),
        Response::Nack(NackReason::VersionMismatch) => (MessageType::Nack, 2),
        Response::Nack(_) => (MessageType::Nack, 1),
    };
    let start = begin_frame(
        message_type.as_byte(),
        FILLER_TIER,
        0,
        wire_len(payload_len),
        out,
    );
    match response {
        Response::Ack | Response::HealthCheckResponse => {}
        Response::AckBatch { count } => out.put_u32_le(count),
        Response::Nack(reason @ NackReason::VersionMismatch) => {
            out.put_slice(&[reason.as_byte(), VERSION]);
        }
        Response::Nack(reason) => out.put_u8(reason.as_byte()),
    }
    finish_frame(start, out);
}

/// The daemon sent something this client cannot accept as a v1 response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed response from daemon: {0}")]
pub struct ResponseError(pub String);

/// Client side: decode one response frame from the front of `buf`, consuming it.
///
/// Validates magic, version, header CRC, message type (must be a response),
/// flags (must be 0), payload length for the type (Ack and
/// HealthCheckResponse empty, AckBatch 4 bytes, Nack 1 or 2 bytes — checked
/// from the header, so a bogus length is refused without waiting for it),
/// payload CRC and the nack reason byte. The tier byte is filler and ignored.
/// `Ok(None)` = need more bytes; on `Err` nothing is consumed.
pub fn decode_response(buf: &mut BytesMut) -> Result<Option<Response>, ResponseError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let header = parse_header(&buf[..HEADER_LEN]).map_err(|f| ResponseError(f.to_string()))?;
    let message_type = response_type(header.message_type)?;
    if header.flags != 0 {
        return Err(ResponseError(format!(
            "flags byte is {:#04x}, must be 0",
            header.flags
        )));
    }
    check_response_len(message_type, header.payload_len)?;

    let frame_len = header.frame_len();
    if buf.len() < frame_len {
        return Ok(None);
    }
    check_payload_crc(
        &buf[..frame_len],
        crc32fast::hash(&buf[HEADER_LEN..frame_len - crate::frame::TRAILER_LEN]),
    )
    .map_err(|e| ResponseError(e.to_string()))?;
    let response = parse_payload(message_type, &buf[HEADER_LEN..frame_len - TRAILER_LEN])?;
    // `advance` rather than `split_to`: nothing borrows the frame, and keeping
    // the buffer unshared lets the caller's `reserve` reuse its allocation.
    buf.advance(frame_len);
    Ok(Some(response))
}

fn response_type(byte: u8) -> Result<MessageType, ResponseError> {
    match MessageType::from_byte(byte) {
        None => Err(ResponseError(format!(
            "unknown message type byte {byte:#04x}"
        ))),
        Some(t) if t.is_request() => Err(ResponseError(format!(
            "message type byte {byte:#04x} ({t}) is a request, not a response"
        ))),
        Some(t) => Ok(t),
    }
}

fn check_response_len(message_type: MessageType, len: u32) -> Result<(), ResponseError> {
    let (ok, expected) = match message_type {
        MessageType::Nack => ((1..=2).contains(&len), "1 or 2"),
        MessageType::AckBatch => (len == 4, "4"),
        _ => (len == 0, "0"),
    };
    if ok {
        Ok(())
    } else {
        Err(ResponseError(format!(
            "{message_type} declares a {len}-byte payload, expected {expected}"
        )))
    }
}

/// Turns a CRC-checked payload of the right length into a response.
fn parse_payload(message_type: MessageType, payload: &[u8]) -> Result<Response, ResponseError> {
    Ok(match message_type {
        MessageType::Ack => Response::Ack,
        MessageType::HealthCheckResponse => Response::HealthCheckResponse,
        MessageType::AckBatch => Response::AckBatch {
            count: read_u32(payload),
        },
        _ => {
            let byte = payload[0];
            let reason = NackReason::from_byte(byte).ok_or_else(|| {
                ResponseError(format!("nack with unknown reason byte {byte:#04x}"))
            })?;
            Response::Nack(reason)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_use_the_sync_filler_tier() {
        for r in [
            Response::Ack,
            Response::HealthCheckResponse,
            Response::AckBatch { count: 3 },
            Response::Nack(NackReason::Overloaded),
        ] {
            let mut out = BytesMut::new();
            encode_response(r, &mut out);
            assert_eq!(out[6], 0x01, "{r:?}");
            assert_eq!(out[7], 0x00, "{r:?}");
        }
    }

    #[test]
    fn exact_payloads() {
        let mut out = BytesMut::new();
        encode_response(Response::Ack, &mut out);
        assert_eq!(out.len(), 20);
        assert_eq!(out[5], 0x02);

        out.clear();
        encode_response(Response::Nack(NackReason::VersionMismatch), &mut out);
        assert_eq!(&out[8..12], &[2, 0, 0, 0]);
        assert_eq!(&out[16..18], &[0x02, 0x01]);

        out.clear();
        encode_response(Response::Nack(NackReason::BadMagic), &mut out);
        assert_eq!(&out[8..12], &[1, 0, 0, 0]);
        assert_eq!(out[16], 0x01);

        out.clear();
        encode_response(Response::AckBatch { count: 0x0102_0304 }, &mut out);
        assert_eq!(out[5], 0x07);
        assert_eq!(&out[16..20], &[4, 3, 2, 1]);
    }
}
