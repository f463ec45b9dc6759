//! Codec for the weir v1 wire protocol spoken by spillway, plus spillway's
//! PushBatch/AckBatch/Overloaded extensions. Pure: no I/O, no async.
//!
//! A frame is a 16-byte header (magic `WEIR`, version, message type, tier,
//! flags, payload length, header CRC), the payload, and a 4-byte payload CRC.
//! The daemon decodes requests with [`decode_request`] and answers with
//! [`encode_response`]; a client does the mirror image with [`encode_push`],
//! [`encode_push_batch`], [`encode_health_check`] and [`decode_response`].
//! The byte-level specification lives in `docs/wire-protocol.md`.
//!
//! ```
//! use spillway_protocol::{decode_request, encode_push, BytesMut, Request, Tier};
//!
//! let mut buf = BytesMut::new();
//! encode_push(Tier::Sync, b"hello", &mut buf);
//! let request = decode_request(&mut buf, 1 << 20).unwrap().unwrap();
//! assert_eq!(request, Request::Push { tier: Tier::Sync, payload: "hello".into() });
//! assert!(buf.is_empty());
//! ```

mod batch;
pub mod crc;
mod frame;
mod request;
mod response;
mod types;

pub use batch::{BatchIter, BatchRecords, BatchSlices};
pub use bytes::{Bytes, BytesMut};
pub use crc::RecordCrcs;

pub use frame::{encode_frame, HEADER_LEN, MAGIC, PAYLOAD_BYTES_HARD_MAX, TRAILER_LEN, VERSION};
pub use request::{
    decode_request, decode_request_crcs, encode_health_check, encode_push, encode_push_batch,
    push_batch_frame_len, Request, RequestError,
};
pub use response::{decode_response, encode_response, Response, ResponseError};
pub use types::{MessageType, NackReason, Tier};
