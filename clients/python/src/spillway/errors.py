"""The client's exceptions.

Every exception the client raises on purpose derives from :class:`SpillwayError`.
"""

from typing import Optional

from ._types import NackReason

__all__ = [
    "SpillwayError",
    "NackError",
    "ProtocolError",
    "SpillwayTimeout",
    "ConnectionClosed",
    "ConnectFailed",
    "RecordRejected",
]


class SpillwayError(Exception):
    """Base class of every error raised by the spillway client.

    ``request_index`` is set on errors reported by a pipeline's ``flush``:
    the position of the request in the list ``flush`` returns.
    """

    request_index: Optional[int] = None


class NackError(SpillwayError):
    """The daemon refused the request with a Nack.

    ``reason`` is the :class:`NackReason`, ``byte`` its wire byte,
    ``retryable`` whether the same request may be resent on the same
    connection after a back-off (InternalError and Overloaded). Every other
    reason means the client sent a broken frame or speaks another version:
    the daemon has closed the connection and resending is pointless.
    ``daemon_version`` is the daemon's protocol version for VersionMismatch.
    """

    def __init__(self, reason: NackReason, daemon_version: Optional[int] = None) -> None:
        self.reason = reason
        self.byte = int(reason)
        self.retryable = reason.retryable
        self.daemon_version = daemon_version
        if self.retryable:
            advice = "retryable: back off and resend on the same connection"
        else:
            advice = "not retryable: the daemon closed the connection"
        extra = ""
        if daemon_version is not None:
            extra = ", daemon speaks version %d" % daemon_version
        super().__init__(
            "daemon nacked: %s (0x%02x%s, %s)" % (reason.wire_name, self.byte, extra, advice)
        )

    @property
    def reason_name(self) -> str:
        """The reason's protocol name, e.g. ``"overloaded"``."""
        return self.reason.wire_name


class ProtocolError(SpillwayError):
    """The daemon sent bytes that are not a valid answer to the request:
    a malformed frame, an unexpected response type, an AckBatch with the
    wrong count, or a frame cut off by the daemon closing the connection.
    The connection is closed; reconnect."""


class SpillwayTimeout(SpillwayError, TimeoutError):
    """A connect, read or write did not finish within its timeout.

    The request may or may not have been stored. The connection is closed
    (its answers could no longer be matched to requests); reconnect and
    resend if needed."""


class ConnectionClosed(SpillwayError, ConnectionError):
    """The connection is closed: the daemon hung up (end-of-file, reset,
    broken pipe), or an earlier error made the client close it."""


class ConnectFailed(SpillwayError, ConnectionError):
    """The daemon's socket could not be connected (missing, refused, ...)."""


class RecordRejected(SpillwayError, ValueError):
    """The request was refused locally; nothing was sent and the connection
    is unaffected. ``index`` is the offending record's index (0-based; None
    when the refusal is about the whole request) and ``limit`` the
    payload_bytes_max in force (None when not about size)."""

    def __init__(self, message: str, index: Optional[int] = None, limit: Optional[int] = None) -> None:
        super().__init__(message)
        self.index = index
        self.limit = limit
