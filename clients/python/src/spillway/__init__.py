"""Producer client for spillway, the durable local write buffer daemon.

Speaks the weir v1 wire protocol with spillway's extensions (PushBatch,
AckBatch, the Overloaded nack) over a Unix stream socket, or over the
daemon's TCP door (``[server.tcp]``) in the clear or with TLS. Standard
library only.

    import spillway

    with spillway.connect("/run/spillway/spillway.sock") as client:
        client.health()
        client.push(spillway.Tier.SYNC, b"order 1042 shipped")
        client.push_batch(spillway.Tier.BUFFERED, [b"a", b"b", b"c"])

    ctx = spillway.tls_context("ca.crt", "client.crt", "client.key")
    with spillway.connect_tcp("spillway.example", 7070, tls=ctx) as client:
        client.push(spillway.Tier.SYNC, b"over mutual TLS")

The asyncio client is :class:`spillway.AsyncClient` (``spillway.aio``).
"""

import os
import ssl
from typing import Optional, Union

from ._types import MessageType, NackReason, Tier
from .aio import AsyncClient, AsyncPipeline
from .client import DEFAULT_TIMEOUT, DEFAULT_WINDOW, Client, Outcome, Pipeline, tls_context
from .errors import (
    ConnectFailed,
    ConnectionClosed,
    NackError,
    ProtocolError,
    RecordRejected,
    SpillwayError,
    SpillwayTimeout,
)
from .protocol import PAYLOAD_BYTES_HARD_MAX

__version__ = "0.1.0"

__all__ = [
    "connect",
    "connect_tcp",
    "tls_context",
    "Client",
    "Pipeline",
    "AsyncClient",
    "AsyncPipeline",
    "Outcome",
    "Tier",
    "NackReason",
    "MessageType",
    "SpillwayError",
    "NackError",
    "ProtocolError",
    "SpillwayTimeout",
    "ConnectionClosed",
    "ConnectFailed",
    "RecordRejected",
    "PAYLOAD_BYTES_HARD_MAX",
    "DEFAULT_TIMEOUT",
    "DEFAULT_WINDOW",
]


def connect(
    path: Union[str, "os.PathLike[str]"],
    *,
    connect_timeout: float = DEFAULT_TIMEOUT,
    timeout: float = DEFAULT_TIMEOUT,
    payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
) -> Client:
    """Connects a blocking :class:`Client` (see :meth:`Client.connect`)."""
    return Client.connect(
        path, connect_timeout=connect_timeout, timeout=timeout, payload_bytes_max=payload_bytes_max
    )


def connect_tcp(
    host: str,
    port: int,
    *,
    tls: Union[None, bool, ssl.SSLContext] = None,
    server_hostname: Optional[str] = None,
    connect_timeout: float = DEFAULT_TIMEOUT,
    timeout: float = DEFAULT_TIMEOUT,
    payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
) -> Client:
    """Connects a blocking :class:`Client` to the daemon's TCP door (see
    :meth:`Client.connect_tcp`)."""
    return Client.connect_tcp(
        host,
        port,
        tls=tls,
        server_hostname=server_hostname,
        connect_timeout=connect_timeout,
        timeout=timeout,
        payload_bytes_max=payload_bytes_max,
    )
