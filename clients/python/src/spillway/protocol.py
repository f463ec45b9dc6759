"""The weir v1 wire protocol with spillway's extensions: frame encoder for
requests, validating decoder for responses.

Frame: 16-byte header (magic ``WEIR``, version 1, type, tier, flags 0,
payload length u32 LE, CRC-32 of bytes 0..12 u32 LE), the payload, then the
CRC-32 of the payload (u32 LE, zero for an empty payload). CRC-32 is zlib's.
"""

import struct
from itertools import chain
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union
from zlib import crc32

from ._types import MessageType, NackReason, Tier
from .errors import ProtocolError, RecordRejected

__all__ = [
    "MAGIC",
    "VERSION",
    "HEADER_LEN",
    "TRAILER_LEN",
    "PAYLOAD_BYTES_HARD_MAX",
    "Tier",
    "MessageType",
    "NackReason",
    "Response",
    "encode_push",
    "encode_push_batch",
    "encode_health_check",
    "push_batch_frame_len",
    "decode_response",
]

MAGIC = b"WEIR"
VERSION = 1
HEADER_LEN = 16
TRAILER_LEN = 4
PAYLOAD_BYTES_HARD_MAX = 16 * 1024 * 1024
"""No daemon accepts a payload longer than this (16 MiB)."""

RecordLike = Union[bytes, bytearray, memoryview]
TierLike = Union[Tier, int, str]

_HEAD12 = struct.Struct("<4sBBBBI")
_U32 = struct.Struct("<I")
_pack_u32 = _U32.pack
_unpack_u32_from = _U32.unpack_from

_PUSH = int(MessageType.PUSH)
_PUSH_BATCH = int(MessageType.PUSH_BATCH)
_ACK = int(MessageType.ACK)
_NACK = int(MessageType.NACK)
_HCR = int(MessageType.HEALTH_CHECK_RESPONSE)
_ACK_BATCH = int(MessageType.ACK_BATCH)
_REQUEST_TYPES = frozenset((int(MessageType.PUSH), int(MessageType.HEALTH_CHECK), _PUSH_BATCH))
_RESPONSE_LEN = {_ACK: (0, 0), _HCR: (0, 0), _ACK_BATCH: (4, 4), _NACK: (1, 2)}

_TIERS: Dict[Any, int] = {}
for _t in Tier:
    _TIERS[int(_t)] = int(_t)
    _TIERS[_t.name.lower()] = int(_t)
del _t

_ZERO_CRC = b"\x00\x00\x00\x00"


def _header(message_type: int, tier: int, length: int) -> bytes:
    head = _HEAD12.pack(MAGIC, VERSION, message_type, tier, 0, length)
    return head + _pack_u32(crc32(head))


# Headers of frames seen before, keyed by type, tier and length: pushes of
# records of one size reuse one header instead of re-hashing it.
_HEADER_CACHE: Dict[int, bytes] = {}
_HEADER_CACHE_MAX = 4096


def _cached_header(message_type: int, tier: int, length: int) -> bytes:
    key = (length << 16) | (message_type << 8) | tier
    header = _HEADER_CACHE.get(key)
    if header is None:
        header = _header(message_type, tier, length)
        if len(_HEADER_CACHE) < _HEADER_CACHE_MAX:
            _HEADER_CACHE[key] = header
    return header


def tier_byte(tier: TierLike) -> int:
    """The wire byte of ``tier`` (a :class:`Tier`, 1..3, or "sync" /
    "batched" / "buffered"); raises :class:`RecordRejected` otherwise."""
    try:
        byte = _TIERS.get(tier)
    except TypeError:  # unhashable
        byte = None
    if byte is None or isinstance(tier, bool):
        raise RecordRejected(
            "unknown tier %r: use Tier.SYNC (1), Tier.BATCHED (2) or Tier.BUFFERED (3); nothing was sent"
            % (tier,)
        )
    return byte


def _as_bytes(record: Any, index: int) -> bytes:
    if isinstance(record, (str, int)):
        raise TypeError(
            "record %d is a %s, not bytes (encode text first, e.g. s.encode())"
            % (index, type(record).__name__)
        )
    try:
        return memoryview(record).tobytes()
    except TypeError:
        raise TypeError(
            "record %d is a %s, not a bytes-like object" % (index, type(record).__name__)
        ) from None


def _check_limit(payload_bytes_max: int) -> int:
    if not 1 <= payload_bytes_max <= PAYLOAD_BYTES_HARD_MAX:
        raise ValueError(
            "payload_bytes_max must be between 1 and %d (the protocol's hard cap), not %r"
            % (PAYLOAD_BYTES_HARD_MAX, payload_bytes_max)
        )
    return payload_bytes_max


def push_parts(tier: int, record: Any, payload_bytes_max: int) -> Tuple[bytes, bytes, bytes]:
    """Validates a Push and returns its header, payload and trailer."""
    if type(record) is not bytes and type(record) is not bytearray:
        record = _as_bytes(record, 0)
    n = len(record)
    if n == 0:
        raise RecordRejected(
            "record 0 is empty: the protocol refuses empty records; nothing was sent", index=0
        )
    if n > payload_bytes_max:
        raise RecordRejected(
            "record 0 is %d bytes, over payload_bytes_max %d (the Push payload is the record); nothing was sent"
            % (n, payload_bytes_max),
            index=0,
            limit=payload_bytes_max,
        )
    return _cached_header(_PUSH, tier, n), record, _pack_u32(crc32(record))


def encode_push(tier: TierLike, record: RecordLike, payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX) -> bytes:
    """The Push frame storing ``record`` at ``tier``.

    Raises :class:`RecordRejected` for an empty record or one longer than
    ``payload_bytes_max``.
    """
    head, payload, trailer = push_parts(tier_byte(tier), record, _check_limit(payload_bytes_max))
    return b"".join((head, payload, trailer))


def push_batch_frame_len(record_lengths: Sequence[int]) -> int:
    """Wire size of a PushBatch of records of these lengths:
    ``16 + 4 + sum(4 + len) + 4``."""
    return HEADER_LEN + 4 + 4 * len(record_lengths) + sum(record_lengths) + TRAILER_LEN


def batch_payload(records: Sequence[Any], payload_bytes_max: int) -> Tuple[bytes, int]:
    """Validates a PushBatch and returns its payload and record count."""
    if not isinstance(records, (list, tuple)):
        if isinstance(records, (bytes, bytearray, memoryview, str)):
            raise TypeError("push_batch takes a sequence of records, not one bytes-like object")
        records = list(records)
    n = len(records)
    if n == 0:
        raise RecordRejected("push_batch with no records: a batch needs at least one; nothing was sent")
    try:
        lengths = list(map(len, records))
    except TypeError:
        lengths = None
    if lengths is not None:
        # Fast path, C loops only. bytes.join takes any bytes-like object, so
        # the joined size tells whether len() counted bytes for every record
        # (it does not for str, or a memoryview with items wider than a byte).
        payload = _batch_join(records, lengths, n, payload_bytes_max)
        if payload is not None:
            return payload, n
    plain = [r if type(r) in _PLAIN else _as_bytes(r, i) for i, r in enumerate(records)]
    payload = _batch_join(plain, list(map(len, plain)), n, payload_bytes_max)
    assert payload is not None
    return payload, n


def _batch_join(records: Sequence[Any], lengths: List[int], n: int, payload_bytes_max: int) -> Optional[bytes]:
    """The batch payload, or None if ``lengths`` are not the records' byte sizes."""
    shortest = min(lengths)
    if shortest == 0:
        index = lengths.index(0)
        raise RecordRejected(
            "record %d of %d is empty: the protocol refuses empty records; nothing was sent" % (index, n),
            index=index,
        )
    size = 4 + 4 * n + sum(lengths)
    if size > payload_bytes_max:
        if not all(type(r) in _PLAIN for r in records):
            return None  # sizes unsure: judge again on the bytes
        # The first record that takes the running payload size over the limit.
        index = 0
        running = 4
        for index, length in enumerate(lengths):
            running += 4 + length
            if running > payload_bytes_max:
                break
        raise RecordRejected(
            "push_batch payload of %d bytes (4 + sum of 4 + len over %d records) is over "
            "payload_bytes_max %d; record %d is the first that does not fit; nothing was sent"
            % (size, n, payload_bytes_max, index),
            index=index,
            limit=payload_bytes_max,
        )
    try:
        if shortest == max(lengths):
            prefix = _pack_u32(shortest)
            payload = b"".join((_pack_u32(n), prefix, prefix.join(records)))
        else:
            payload = _pack_u32(n) + b"".join(chain.from_iterable(zip(map(_pack_u32, lengths), records)))
    except TypeError:
        return None
    if len(payload) != size:
        return None
    return payload


_PLAIN = frozenset((bytes, bytearray))


def batch_parts(tier: int, records: Sequence[Any], payload_bytes_max: int) -> Tuple[bytes, bytes, bytes, int]:
    """Validates a PushBatch; returns header, payload, trailer and record count."""
    payload, n = batch_payload(records, payload_bytes_max)
    return _header(_PUSH_BATCH, tier, len(payload)), payload, _pack_u32(crc32(payload)), n


def encode_push_batch(
    tier: TierLike, records: Sequence[RecordLike], payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX
) -> bytes:
    """The PushBatch frame storing ``records`` at ``tier``.

    Raises :class:`RecordRejected` for no records, an empty record, or a
    payload (``4 + sum(4 + len)``) over ``payload_bytes_max``.
    """
    head, payload, trailer, _ = batch_parts(tier_byte(tier), records, _check_limit(payload_bytes_max))
    return b"".join((head, payload, trailer))


HEALTH_CHECK_FRAME = _header(int(MessageType.HEALTH_CHECK), int(Tier.SYNC), 0) + _ZERO_CRC
ACK_FRAME = _header(_ACK, int(Tier.SYNC), 0) + _ZERO_CRC
HEALTH_CHECK_RESPONSE_FRAME = _header(_HCR, int(Tier.SYNC), 0) + _ZERO_CRC
ACK_BATCH_HEADER = _header(_ACK_BATCH, int(Tier.SYNC), 4)


def encode_health_check() -> bytes:
    """The HealthCheck frame (empty payload, tier byte filler 0x01)."""
    return HEALTH_CHECK_FRAME


class Response:
    """A decoded response frame.

    ``type`` is the :class:`MessageType` (ACK, NACK, HEALTH_CHECK_RESPONSE,
    ACK_BATCH); ``count`` the AckBatch's record count; ``reason`` the Nack's
    :class:`NackReason`; ``daemon_version`` the version a VersionMismatch
    nack carries.
    """

    __slots__ = ("type", "count", "reason", "daemon_version")

    def __init__(
        self,
        type: MessageType,
        count: Optional[int] = None,
        reason: Optional[NackReason] = None,
        daemon_version: Optional[int] = None,
    ) -> None:
        self.type = type
        self.count = count
        self.reason = reason
        self.daemon_version = daemon_version

    @property
    def type_name(self) -> str:
        """``"ack"``, ``"nack"``, ``"health_check_response"`` or ``"ack_batch"``."""
        return self.type.name.lower()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Response):
            return NotImplemented
        return (self.type, self.count, self.reason, self.daemon_version) == (
            other.type,
            other.count,
            other.reason,
            other.daemon_version,
        )

    def __hash__(self) -> int:
        return hash((self.type, self.count, self.reason, self.daemon_version))

    def __repr__(self) -> str:
        if self.type == MessageType.ACK_BATCH:
            return "Response(ack_batch, count=%d)" % self.count
        if self.type == MessageType.NACK:
            assert self.reason is not None
            if self.daemon_version is not None:
                return "Response(nack %s, daemon_version=%d)" % (self.reason.wire_name, self.daemon_version)
            return "Response(nack %s)" % self.reason.wire_name
        return "Response(%s)" % self.type_name


ACK = Response(MessageType.ACK)
HEALTH_CHECK_RESPONSE = Response(MessageType.HEALTH_CHECK_RESPONSE)


def _expected_len(message_type: int) -> str:
    low, high = _RESPONSE_LEN[message_type]
    return str(low) if low == high else "%d or %d" % (low, high)


def check_header(buf: Union[bytes, bytearray, memoryview], pos: int = 0) -> int:
    """Validates the 16-byte response header at ``buf[pos:]`` and returns the
    whole frame's length. Raises :class:`ProtocolError`."""
    magic = bytes(buf[pos : pos + 4])
    if magic != MAGIC:
        raise ProtocolError("malformed response from daemon: magic bytes %s are not 'WEIR'" % magic.hex(" "))
    version = buf[pos + 4]
    if version != VERSION:
        raise ProtocolError(
            "malformed response from daemon: unsupported version byte 0x%02x (this client speaks 0x%02x)"
            % (version, VERSION)
        )
    stored = _unpack_u32_from(buf, pos + 12)[0]
    computed = crc32(buf[pos : pos + 12])
    if stored != computed:
        raise ProtocolError(
            "malformed response from daemon: bad header crc (field 0x%08x, bytes 0..12 hash to 0x%08x)"
            % (stored, computed)
        )
    message_type = buf[pos + 5]
    if message_type in _REQUEST_TYPES:
        raise ProtocolError(
            "malformed response from daemon: message type 0x%02x (%s) is a request message type, not a response"
            % (message_type, MessageType(message_type).name.lower())
        )
    if message_type not in _RESPONSE_LEN:
        raise ProtocolError("malformed response from daemon: unknown message type 0x%02x" % message_type)
    flags = buf[pos + 7]
    if flags != 0:
        raise ProtocolError("malformed response from daemon: reserved flags set (flags byte 0x%02x, must be 0)" % flags)
    length = _unpack_u32_from(buf, pos + 8)[0]
    low, high = _RESPONSE_LEN[message_type]
    if not low <= length <= high:
        raise ProtocolError(
            "malformed response from daemon: wrong payload length for %s: %d bytes declared, expected %s"
            % (MessageType(message_type).name.lower(), length, _expected_len(message_type))
        )
    return HEADER_LEN + length + TRAILER_LEN


def decode_response(
    buf: Union[bytes, bytearray, memoryview], pos: int = 0
) -> Optional[Tuple[Response, int]]:
    """Decodes the response frame starting at ``buf[pos]``.

    Returns ``(response, end)`` where ``end`` is the offset just past the
    frame, or None if more bytes are needed. Raises :class:`ProtocolError`
    for anything that is not a valid v1 response (bad magic, version, either
    CRC, flags, a request or unknown type, a payload length the type does
    not call for, an unknown nack reason). The header is judged before the
    payload arrives, so a bogus length never makes the caller wait.
    """
    available = len(buf) - pos
    if available < HEADER_LEN:
        return None
    frame_len = check_header(buf, pos)
    if available < frame_len:
        return None
    end = pos + frame_len
    payload = bytes(buf[pos + HEADER_LEN : end - TRAILER_LEN])
    stored = _unpack_u32_from(buf, end - TRAILER_LEN)[0]
    computed = crc32(payload)
    if stored != computed:
        raise ProtocolError(
            "malformed response from daemon: bad payload crc (trailer 0x%08x, payload hashes to 0x%08x)"
            % (stored, computed)
        )
    message_type = buf[pos + 5]
    if message_type == _ACK:
        return ACK, end
    if message_type == _HCR:
        return HEALTH_CHECK_RESPONSE, end
    if message_type == _ACK_BATCH:
        return Response(MessageType.ACK_BATCH, count=_unpack_u32_from(payload)[0]), end
    byte = payload[0]
    try:
        reason = NackReason(byte)
    except ValueError:
        raise ProtocolError("malformed response from daemon: unknown nack reason 0x%02x" % byte) from None
    version = payload[1] if len(payload) == 2 and reason == NackReason.VERSION_MISMATCH else None
    return Response(MessageType.NACK, reason=reason, daemon_version=version), end
