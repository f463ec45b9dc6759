//! Frame-crafting helpers shared by the integration tests: build a frame that
//! is wrong in exactly the ways a test asks for.

#![allow(dead_code)] // each test binary uses a different subset

use spillway_protocol::{BytesMut, MAGIC, VERSION};

/// Every header field and CRC of a frame, individually overridable.
#[derive(Debug, Clone)]
pub struct FrameSpec {
    pub magic: [u8; 4],
    pub version: u8,
    pub message_type: u8,
    pub tier: u8,
    pub flags: u8,
    /// Length written into the header; `None` = the real payload length.
    pub declared_len: Option<u32>,
    pub payload: Vec<u8>,
    pub corrupt_header_crc: bool,
    pub corrupt_payload_crc: bool,
    /// Drop this many bytes from the end (an incomplete frame).
    pub truncate: usize,
}

impl FrameSpec {
    pub fn new(message_type: u8, tier: u8, payload: &[u8]) -> Self {
        Self {
            magic: MAGIC,
            version: VERSION,
            message_type,
            tier,
            flags: 0,
            declared_len: None,
            payload: payload.to_vec(),
            corrupt_header_crc: false,
            corrupt_payload_crc: false,
            truncate: 0,
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let len = self.declared_len.unwrap_or(self.payload.len() as u32);
        let mut out = Vec::new();
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&[self.version, self.message_type, self.tier, self.flags]);
        out.extend_from_slice(&len.to_le_bytes());
        let mut header_crc = crc32fast::hash(&out);
        if self.corrupt_header_crc {
            header_crc ^= 0xdead_beef;
        }
        out.extend_from_slice(&header_crc.to_le_bytes());
        out.extend_from_slice(&self.payload);
        let mut payload_crc = crc32fast::hash(&self.payload);
        if self.corrupt_payload_crc {
            payload_crc ^= 0x0000_0001;
        }
        out.extend_from_slice(&payload_crc.to_le_bytes());
        out.truncate(out.len() - self.truncate);
        out
    }

    pub fn buf(&self) -> BytesMut {
        BytesMut::from(&self.bytes()[..])
    }
}

/// A PushBatch payload from raw parts: the count field, then (length, bytes) pairs as given.
pub fn batch_payload(count: u32, records: &[(u32, &[u8])], trailing: &[u8]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    for (len, bytes) in records {
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(trailing);
    out
}
