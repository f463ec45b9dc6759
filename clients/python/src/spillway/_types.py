"""Protocol enums: tiers, message types and nack reasons."""

from enum import IntEnum


class Tier(IntEnum):
    """Durability tier of a push (header byte 6)."""

    SYNC = 1
    """Acked once fdatasync has returned for the record's bytes."""
    BATCHED = 2
    """Same as SYNC in spillway (group commit, no timer)."""
    BUFFERED = 3
    """Acked once in the page cache; an fsync follows within
    ``wab.buffered_flush_interval_ms``."""


class MessageType(IntEnum):
    """Message type byte (header byte 5)."""

    PUSH = 0x01
    ACK = 0x02
    NACK = 0x03
    HEALTH_CHECK = 0x04
    HEALTH_CHECK_RESPONSE = 0x05
    PUSH_BATCH = 0x06
    ACK_BATCH = 0x07


class NackReason(IntEnum):
    """Why the daemon refused a request (the Nack's payload byte)."""

    BAD_MAGIC = 0x01
    VERSION_MISMATCH = 0x02
    BAD_HEADER_CRC = 0x03
    PAYLOAD_TOO_LARGE = 0x04
    BAD_PAYLOAD_CRC = 0x05
    INTERNAL_ERROR = 0x06
    EMPTY_PAYLOAD = 0x07
    UNKNOWN_MESSAGE = 0x08
    RESERVED_FLAGS_SET = 0x09
    OVERLOADED = 0x0A

    @property
    def wire_name(self) -> str:
        """The protocol's name for the reason, e.g. ``"overloaded"``."""
        return self.name.lower()

    @property
    def retryable(self) -> bool:
        """True for InternalError and Overloaded: the connection stays open
        and the same request may be resent after a back-off."""
        return self in _RETRYABLE

    @property
    def closes_connection(self) -> bool:
        """True for every non-retryable reason: the daemon hangs up."""
        return self not in _RETRYABLE


_RETRYABLE = frozenset((NackReason.INTERNAL_ERROR, NackReason.OVERLOADED))
