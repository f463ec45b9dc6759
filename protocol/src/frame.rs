//! Frame layout shared by requests and responses: constants, header parsing,
//! both CRCs and the raw frame encoder every other encoder builds on.

use std::fmt;

use bytes::{BufMut, BytesMut};

/// Bytes 0..4 of every frame.
pub const MAGIC: [u8; 4] = *b"WEIR";
/// The protocol version this crate speaks (header byte 4).
pub const VERSION: u8 = 1;
/// Size of the fixed frame header.
pub const HEADER_LEN: usize = 16;
/// Size of the payload CRC trailer (present even for an empty payload).
pub const TRAILER_LEN: usize = 4;
/// No daemon accepts a payload longer than this, whatever its configuration.
pub const PAYLOAD_BYTES_HARD_MAX: u32 = 16 * 1024 * 1024;

/// Header bytes covered by the header CRC.
const HEADER_CRC_COVERS: usize = 12;

/// Header fields of a frame whose magic, version and header CRC checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub message_type: u8,
    pub tier: u8,
    pub flags: u8,
    pub payload_len: u32,
}

impl Header {
    /// Total bytes of the frame on the wire: header, payload, trailer.
    pub fn frame_len(&self) -> usize {
        frame_len_for(self.payload_len as usize)
    }
}

/// Wire size of a frame with a payload of `payload_len` bytes.
pub(crate) fn frame_len_for(payload_len: usize) -> usize {
    HEADER_LEN + payload_len + TRAILER_LEN
}

/// Why a 16-byte header is not a valid v1 header (checked in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderFault {
    BadMagic([u8; 4]),
    Version(u8),
    HeaderCrc { stored: u32, computed: u32 },
}

impl fmt::Display for HeaderFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadMagic(m) => write!(
                f,
                "magic bytes {:02x} {:02x} {:02x} {:02x} ({:?}) are not \"WEIR\"",
                m[0],
                m[1],
                m[2],
                m[3],
                String::from_utf8_lossy(&m)
            ),
            Self::Version(v) => write!(f, "version byte {v:#04x}, expected {VERSION:#04x}"),
            Self::HeaderCrc { stored, computed } => write!(
                f,
                "header CRC field is {stored:#010x} but bytes 0..12 hash to {computed:#010x}"
            ),
        }
    }
}

/// Checks magic, version and header CRC, in that order, and returns the fields.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header, HeaderFault> {
    let magic: [u8; 4] = bytes[0..4].try_into().expect("header slice has 16 bytes");
    if magic != MAGIC {
        return Err(HeaderFault::BadMagic(magic));
    }
    if bytes[4] != VERSION {
        return Err(HeaderFault::Version(bytes[4]));
    }
    let stored = read_u32(&bytes[12..16]);
    let computed = crc32fast::hash(&bytes[..HEADER_CRC_COVERS]);
    if stored != computed {
        return Err(HeaderFault::HeaderCrc { stored, computed });
    }
    Ok(Header {
        message_type: bytes[5],
        tier: bytes[6],
        flags: bytes[7],
        payload_len: read_u32(&bytes[8..12]),
    })
}

/// A payload whose trailer CRC does not match its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PayloadCrcMismatch {
    pub stored: u32,
    pub computed: u32,
}

impl fmt::Display for PayloadCrcMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "payload CRC trailer is {:#010x} but the payload hashes to {:#010x}",
            self.stored, self.computed
        )
    }
}

/// Verifies the trailer of a complete frame (`frame` is exactly one frame)
/// against `computed`, the CRC of its payload.
pub(crate) fn check_payload_crc(frame: &[u8], computed: u32) -> Result<(), PayloadCrcMismatch> {
    let trailer_at = frame.len() - TRAILER_LEN;
    let stored = read_u32(&frame[trailer_at..]);
    if stored == computed {
        Ok(())
    } else {
        Err(PayloadCrcMismatch { stored, computed })
    }
}

/// Reads a little-endian u32 from exactly four bytes.
pub(crate) fn read_u32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("caller passes four bytes"))
}

/// Converts a payload length for the header.
///
/// # Panics
/// If the payload cannot be described by the u32 length field; callers that
/// take user input bound it by [`PAYLOAD_BYTES_HARD_MAX`] first.
pub(crate) fn wire_len(len: usize) -> u32 {
    u32::try_from(len).expect("payload length exceeds u32::MAX and cannot be framed")
}

/// Appends a header announcing `payload_len` bytes; returns where the frame starts.
///
/// The caller then appends exactly `payload_len` payload bytes and calls
/// [`finish_frame`]; this split lets batch encoding write records straight
/// into `out` without staging the payload elsewhere.
pub(crate) fn begin_frame(
    message_type: u8,
    tier: u8,
    flags: u8,
    payload_len: u32,
    out: &mut BytesMut,
) -> usize {
    let start = out.len();
    out.reserve(frame_len_for(payload_len as usize));
    out.put_slice(&MAGIC);
    out.put_slice(&[VERSION, message_type, tier, flags]);
    out.put_u32_le(payload_len);
    let crc = crc32fast::hash(&out[start..start + HEADER_CRC_COVERS]);
    out.put_u32_le(crc);
    start
}

/// Appends the payload CRC trailer to the frame begun at `start`.
pub(crate) fn finish_frame(start: usize, out: &mut BytesMut) {
    let payload = &out[start + HEADER_LEN..];
    debug_assert_eq!(
        payload.len(),
        read_u32(&out[start + 8..start + 12]) as usize,
        "payload written does not match the header's length"
    );
    let crc = crc32fast::hash(payload);
    out.put_u32_le(crc);
}

/// Raw encoder for any header bytes, appended to `out`; both CRCs are computed
/// correctly, so tests can craft frames that are wrong in exactly one way.
///
/// # Panics
/// If `payload` is longer than `u32::MAX` bytes.
pub fn encode_frame(message_type: u8, tier: u8, flags: u8, payload: &[u8], out: &mut BytesMut) {
    let start = begin_frame(message_type, tier, flags, wire_len(payload.len()), out);
    out.put_slice(payload);
    finish_frame(start, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_payload_trailer_is_zero() {
        let mut out = BytesMut::new();
        encode_frame(4, 1, 0, &[], &mut out);
        assert_eq!(out.len(), HEADER_LEN + TRAILER_LEN);
        assert_eq!(&out[HEADER_LEN..], &[0, 0, 0, 0]);
        assert_eq!(check_payload_crc(&out, 0), Ok(()));
    }

    #[test]
    fn header_faults_are_reported_in_order() {
        let mut out = BytesMut::new();
        encode_frame(1, 1, 0, b"x", &mut out);
        let good = out.to_vec();
        assert!(parse_header(&good[..16]).is_ok());

        let mut bad = good.clone();
        bad[0] = b'G';
        bad[4] = 9; // a second fault must not be the one reported
        assert!(matches!(
            parse_header(&bad[..16]),
            Err(HeaderFault::BadMagic(_))
        ));

        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(parse_header(&bad[..16]), Err(HeaderFault::Version(2)));

        let mut bad = good;
        bad[12] ^= 1;
        assert!(matches!(
            parse_header(&bad[..16]),
            Err(HeaderFault::HeaderCrc { .. })
        ));
    }

    #[test]
    fn fault_details_name_the_bytes() {
        let s = HeaderFault::BadMagic(*b"GET ").to_string();
        assert!(s.contains("47 45 54 20"), "{s}");
        assert!(HeaderFault::Version(2).to_string().contains("0x02"));
    }
}
