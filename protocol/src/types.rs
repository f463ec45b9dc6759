//! The one-byte enumerations of the wire protocol: message types, durability
//! tiers and nack reasons, with their byte values, names and semantics.

use std::fmt;

/// The message type carried in byte 5 of every frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// Client → daemon: one record to make durable.
    Push = 1,
    /// Daemon → client: the request was accepted at its tier's durability.
    Ack = 2,
    /// Daemon → client: the request was refused; the payload names why.
    Nack = 3,
    /// Client → daemon: liveness probe.
    HealthCheck = 4,
    /// Daemon → client: answer to a health check.
    HealthCheckResponse = 5,
    /// Client → daemon (spillway extension): several records in one frame.
    PushBatch = 6,
    /// Daemon → client (spillway extension): a whole batch was accepted.
    AckBatch = 7,
}

impl MessageType {
    /// Parses a header's message type byte; `None` for an unassigned value.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Push,
            2 => Self::Ack,
            3 => Self::Nack,
            4 => Self::HealthCheck,
            5 => Self::HealthCheckResponse,
            6 => Self::PushBatch,
            7 => Self::AckBatch,
            _ => return None,
        })
    }

    /// The byte this message type is written as.
    pub fn as_byte(self) -> u8 {
        self as u8
    }

    /// A stable snake_case name, suitable for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Push => "push",
            Self::Ack => "ack",
            Self::Nack => "nack",
            Self::HealthCheck => "health_check",
            Self::HealthCheckResponse => "health_check_response",
            Self::PushBatch => "push_batch",
            Self::AckBatch => "ack_batch",
        }
    }

    /// Whether a client may send this type (the rest only flow daemon → client).
    pub fn is_request(self) -> bool {
        matches!(self, Self::Push | Self::HealthCheck | Self::PushBatch)
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The durability tier carried in byte 6 of a push header: what an ack promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Tier {
    /// Acked once `fdatasync` has returned for the record's bytes.
    Sync = 1,
    /// Acked once `fdatasync` has returned (in spillway the same group commit as `Sync`).
    Batched = 2,
    /// Acked once written to the page cache; fsynced within the buffered flush interval.
    Buffered = 3,
}

impl Tier {
    /// Every tier, in byte order (handy for per-tier metrics and tests).
    pub const ALL: [Tier; 3] = [Tier::Sync, Tier::Batched, Tier::Buffered];

    /// Parses a header's tier byte; `None` for an unassigned value.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Self::Sync,
            2 => Self::Batched,
            3 => Self::Buffered,
            _ => return None,
        })
    }

    /// The byte this tier is written as.
    pub fn as_byte(self) -> u8 {
        self as u8
    }

    /// Lower-case name: `"sync"`, `"batched"` or `"buffered"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Batched => "batched",
            Self::Buffered => "buffered",
        }
    }

    /// Whether an ack at this tier must wait for `fdatasync`.
    pub fn needs_fsync(self) -> bool {
        matches!(self, Self::Sync | Self::Batched)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the daemon refused a request: the first payload byte of a nack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NackReason {
    /// Header bytes 0..4 were not `WEIR`.
    BadMagic = 1,
    /// Header byte 4 was not a version the daemon speaks.
    VersionMismatch = 2,
    /// The header CRC did not match header bytes 0..12.
    BadHeaderCrc = 3,
    /// The declared payload length exceeds the daemon's cap.
    PayloadTooLarge = 4,
    /// The trailer CRC did not match the payload.
    BadPayloadCrc = 5,
    /// The daemon failed internally (e.g. a write error); retry later.
    InternalError = 6,
    /// A push carried no bytes, or a batch had no records or an empty record.
    EmptyPayload = 7,
    /// Unknown or misdirected message type, unknown tier, or a malformed batch.
    UnknownMessage = 8,
    /// Header byte 7 (flags) was not zero.
    ReservedFlagsSet = 9,
    /// The daemon is shedding load; retry later.
    Overloaded = 10,
}

impl NackReason {
    /// Every reason, in byte order.
    pub const ALL: [NackReason; 10] = [
        Self::BadMagic,
        Self::VersionMismatch,
        Self::BadHeaderCrc,
        Self::PayloadTooLarge,
        Self::BadPayloadCrc,
        Self::InternalError,
        Self::EmptyPayload,
        Self::UnknownMessage,
        Self::ReservedFlagsSet,
        Self::Overloaded,
    ];

    /// Parses a nack reason byte; `None` for an unassigned value.
    pub fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b).wrapping_sub(1)).copied()
    }

    /// The byte this reason is written as.
    pub fn as_byte(self) -> u8 {
        self as u8
    }

    /// Whether the daemon closes the connection after sending this nack.
    ///
    /// Everything except the two retryable reasons means the byte stream can
    /// no longer be trusted (or the client is broken), so it is dropped.
    pub fn closes_connection(self) -> bool {
        !self.is_retryable()
    }

    /// Whether resending the same request later may succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, Self::InternalError | Self::Overloaded)
    }

    /// A stable snake_case name, suitable for logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::BadMagic => "bad_magic",
            Self::VersionMismatch => "version_mismatch",
            Self::BadHeaderCrc => "bad_header_crc",
            Self::PayloadTooLarge => "payload_too_large",
            Self::BadPayloadCrc => "bad_payload_crc",
            Self::InternalError => "internal_error",
            Self::EmptyPayload => "empty_payload",
            Self::UnknownMessage => "unknown_message",
            Self::ReservedFlagsSet => "reserved_flags_set",
            Self::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for NackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_type_bytes_round_trip_and_gaps_are_none() {
        for b in 0..=u8::MAX {
            match MessageType::from_byte(b) {
                Some(t) => assert_eq!(t.as_byte(), b),
                None => assert!(b == 0 || b > 7, "byte {b:#04x} should be assigned"),
            }
        }
        assert_eq!(MessageType::from_byte(6), Some(MessageType::PushBatch));
        assert_eq!(MessageType::AckBatch.as_byte(), 7);
    }

    #[test]
    fn tier_bytes_names_and_fsync() {
        for b in 0..=u8::MAX {
            match Tier::from_byte(b) {
                Some(t) => assert_eq!(t.as_byte(), b),
                None => assert!(b == 0 || b > 3),
            }
        }
        assert_eq!(Tier::Sync.to_string(), "sync");
        assert_eq!(Tier::Batched.name(), "batched");
        assert_eq!(Tier::Buffered.name(), "buffered");
        assert!(Tier::Sync.needs_fsync());
        assert!(Tier::Batched.needs_fsync());
        assert!(!Tier::Buffered.needs_fsync());
        assert!(Tier::Sync < Tier::Buffered);
    }

    #[test]
    fn nack_reason_bytes_match_the_spec() {
        let expected = [
            (0x01, NackReason::BadMagic),
            (0x02, NackReason::VersionMismatch),
            (0x03, NackReason::BadHeaderCrc),
            (0x04, NackReason::PayloadTooLarge),
            (0x05, NackReason::BadPayloadCrc),
            (0x06, NackReason::InternalError),
            (0x07, NackReason::EmptyPayload),
            (0x08, NackReason::UnknownMessage),
            (0x09, NackReason::ReservedFlagsSet),
            (0x0A, NackReason::Overloaded),
        ];
        for (b, r) in expected {
            assert_eq!(NackReason::from_byte(b), Some(r));
            assert_eq!(r.as_byte(), b);
        }
        assert_eq!(NackReason::from_byte(0), None);
        assert_eq!(NackReason::from_byte(0x0B), None);
        assert_eq!(NackReason::from_byte(0xFF), None);
    }

    #[test]
    fn only_internal_error_and_overloaded_keep_the_connection() {
        for r in NackReason::ALL {
            let keeps = matches!(r, NackReason::InternalError | NackReason::Overloaded);
            assert_eq!(r.is_retryable(), keeps, "{r}");
            assert_eq!(r.closes_connection(), !keeps, "{r}");
        }
        assert_eq!(NackReason::Overloaded.to_string(), "overloaded");
    }
}
