"""The asyncio client (:class:`AsyncClient`), on ``asyncio.open_unix_connection``
(or ``asyncio.open_connection`` for the TCP door, with ``ssl``).

Every call may be awaited concurrently: requests from many tasks share the
connection, up to ``window`` of them in flight, and each answer is handed to
its request in order. :meth:`AsyncClient.pipeline` gives the same
queue-then-flush surface as the blocking client's pipeline.
"""

import asyncio
import os
import ssl
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple, Union

from . import protocol as _p
from .client import (
    DEFAULT_TIMEOUT,
    DEFAULT_WINDOW,
    EXPECT_ACK,
    EXPECT_HEALTH,
    READ_CHUNK,
    Outcome,
    after_close_message,
    check_address,
    check_options,
    closes,
    outcome_of,
    tls_option,
)
from .errors import (
    ConnectFailed,
    ConnectionClosed,
    NackError,
    ProtocolError,
    SpillwayError,
    SpillwayTimeout,
)
from .protocol import PAYLOAD_BYTES_HARD_MAX, RecordLike, TierLike

__all__ = ["AsyncClient", "AsyncPipeline", "connect", "connect_tcp"]

# Wait for the transport's buffer to drain once it holds this much.
_DRAIN_BYTES = 256 * 1024


class AsyncClient:
    """An asyncio connection to a spillway (or weir v1) daemon.

    Create with ``await AsyncClient.connect(path)`` (or
    ``await spillway.aio.connect(path)``), or for the TCP door with
    ``await AsyncClient.connect_tcp(host, port, tls=...)``. ``push``, ``push_batch`` and
    ``health`` may be awaited from many tasks at once (e.g. with
    ``asyncio.gather``): up to ``window`` requests are in flight, the rest
    wait for room. Use it from one event loop.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        path: str,
        timeout: float,
        payload_bytes_max: int,
        window: int,
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.payload_bytes_max = payload_bytes_max
        self.window = window
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._pending: Deque[Tuple[int, "asyncio.Future[int]"]] = deque()
        self._room = asyncio.Semaphore(window)
        self._drain_lock = asyncio.Lock()
        self._dead: Optional[str] = None
        self._progress_at = 0.0
        self._timer: Optional[asyncio.TimerHandle] = None
        self._read_task = self._loop.create_task(self._read_loop())

    @classmethod
    async def connect(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        connect_timeout: float = DEFAULT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
        window: int = DEFAULT_WINDOW,
    ) -> "AsyncClient":
        """Connects to the daemon's Unix socket at ``path``.

        Options as for :meth:`spillway.Client.connect`; ``window`` bounds
        the requests in flight on the connection (default 64).
        """
        check_options(connect_timeout, timeout, payload_bytes_max)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window must be an int >= 1, not %r" % (window,))
        path = os.fspath(path)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=READ_CHUNK), connect_timeout
            )
        except asyncio.TimeoutError:
            raise SpillwayTimeout(
                "connecting to the daemon at %s timed out after %g s" % (path, connect_timeout)
            ) from None
        except OSError as e:
            raise ConnectFailed("cannot connect to the daemon at %s: %s" % (path, e.strerror or e)) from e
        return cls(reader, writer, path, float(timeout), payload_bytes_max, window)

    @classmethod
    async def connect_tcp(
        cls,
        host: str,
        port: int,
        *,
        tls: Union[None, bool, ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
        connect_timeout: float = DEFAULT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
        window: int = DEFAULT_WINDOW,
    ) -> "AsyncClient":
        """Connects to the daemon's TCP door (``[server.tcp]``) at
        ``host``:``port``, in the clear (``tls=None``) or with TLS.

        Options as for :meth:`spillway.Client.connect_tcp`, plus ``window``.
        """
        check_options(connect_timeout, timeout, payload_bytes_max)
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window must be an int >= 1, not %r" % (window,))
        ctx = tls_option(tls, server_hostname)
        label = ("tls://" if ctx is not None else "tcp://") + check_address(host, port)
        extra: Dict[str, Any] = {}
        if ctx is not None:
            extra["ssl"] = ctx
            extra["server_hostname"] = server_hostname or host
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, limit=READ_CHUNK, **extra), connect_timeout
            )
        except asyncio.TimeoutError:
            raise SpillwayTimeout(
                "connecting to the daemon at %s timed out after %g s" % (label, connect_timeout)
            ) from None
        except ssl.SSLCertVerificationError as e:
            raise ConnectFailed(
                "the daemon at %s presented a certificate that does not verify: %s"
                % (label, e.verify_message or e)
            ) from e
        except OSError as e:  # ssl.SSLError included
            raise ConnectFailed("cannot connect to the daemon at %s: %s" % (label, e.strerror or e)) from e
        return cls(reader, writer, label, float(timeout), payload_bytes_max, window)

    # -- public surface ---------------------------------------------------

    async def push(self, tier: TierLike, record: RecordLike) -> None:
        """Stores one record at ``tier``; returns once the daemon acked it.
        Errors as for :meth:`spillway.Client.push`."""
        head, payload, trailer = _p.push_parts(_p.tier_byte(tier), record, self.payload_bytes_max)
        fut = await self._send(b"".join((head, payload, trailer)), EXPECT_ACK)
        await fut

    async def push_batch(self, tier: TierLike, records: Sequence[RecordLike]) -> int:
        """Stores ``records`` at ``tier`` in one PushBatch; returns the count
        acked (always ``len(records)``). Errors as for
        :meth:`spillway.Client.push_batch`."""
        head, payload, trailer, n = _p.batch_parts(_p.tier_byte(tier), records, self.payload_bytes_max)
        fut = await self._send(b"".join((head, payload, trailer)), n)
        return await fut

    async def health(self) -> None:
        """HealthCheck → HealthCheckResponse; a nack is raised as :class:`NackError`."""
        fut = await self._send(_p.HEALTH_CHECK_FRAME, EXPECT_HEALTH)
        await fut

    def pipeline(self, window: Optional[int] = None) -> "AsyncPipeline":
        """A queue-then-flush sender on this connection (``window`` bounds
        its own outstanding requests; the client's window applies too)."""
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError("window must be an int >= 1, not %r" % (window,))
        return AsyncPipeline(self, window or self.window)

    @property
    def closed(self) -> bool:
        """True once the connection is closed (by :meth:`close` or an error)."""
        return self._dead is not None

    async def close(self) -> None:
        """Closes the connection; requests still waiting fail with
        :class:`ConnectionClosed`."""
        self._kill(ConnectionClosed("the client was closed"), "the client was closed")
        try:
            await self._writer.wait_closed()
        except Exception:
            pass
        if not self._read_task.done():
            self._read_task.cancel()
        try:
            await self._read_task
        except BaseException:
            pass

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "<spillway.AsyncClient %s %s>" % (self.path, "closed" if self.closed else "open")

    # -- internals --------------------------------------------------------

    async def _send(self, frame: bytes, expect: int) -> "asyncio.Future[int]":
        """Writes one request once there is room; returns its answer's future."""
        if self._dead is not None:
            raise ConnectionClosed("connection unusable: " + self._dead)
        await self._room.acquire()
        if self._dead is not None:
            self._room.release()
            raise ConnectionClosed("connection unusable: " + self._dead)
        fut: "asyncio.Future[int]" = self._loop.create_future()
        fut.add_done_callback(self._release)
        if not self._pending:
            self._progress_at = self._loop.time()
        self._pending.append((expect, fut))
        self._writer.write(frame)
        if self._timer is None:
            self._timer = self._loop.call_later(self.timeout, self._on_timer)
        transport = self._writer.transport
        if transport.get_write_buffer_size() >= _DRAIN_BYTES:
            async with self._drain_lock:
                try:
                    await self._writer.drain()
                except (ConnectionError, OSError) as e:
                    self._kill(ConnectionClosed("the daemon closed the connection (%s)" % e), str(e))
        return fut

    def _release(self, _fut: "asyncio.Future[int]") -> None:
        self._room.release()

    def _on_timer(self) -> None:
        """No answer for ``timeout`` seconds while requests wait: give up."""
        self._timer = None
        if not self._pending or self._dead is not None:
            return
        idle = self._loop.time() - self._progress_at
        if idle < self.timeout:
            self._timer = self._loop.call_later(self.timeout - idle, self._on_timer)
            return
        err = SpillwayTimeout(
            "no answer from the daemon within %g s (read timeout); the request may or may not "
            "have been stored; the connection is closed" % self.timeout
        )
        self._kill(err, str(err))

    def _kill(self, first: SpillwayError, why: str) -> None:
        """Closes the connection: the oldest waiting request gets ``first``,
        the others ConnectionClosed."""
        if self._dead is None:
            self._dead = why
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = self._pending
        while pending:
            _, fut = pending.popleft()
            if not fut.done():
                fut.set_exception(first)
            first = ConnectionClosed("no answer: " + (self._dead or "connection closed"))
        try:
            self._writer.close()
        except Exception:
            pass

    async def _read_loop(self) -> None:
        buf = bytearray()
        pos = 0
        reader = self._reader
        pending = self._pending
        loop = self._loop
        try:
            while True:
                read_error: Optional[BaseException] = None
                try:
                    chunk = await reader.read(READ_CHUNK)
                except (ConnectionError, OSError) as e:
                    chunk = b""
                    read_error = e
                if self._dead is not None:
                    return
                if not chunk:
                    if len(buf) > pos:
                        err: SpillwayError = ProtocolError(
                            "the daemon closed the connection mid-frame: %d bytes of a response received"
                            % (len(buf) - pos)
                        )
                    elif isinstance(read_error, ssl.SSLError):
                        # e.g. a TLS alert: the daemon refused the client's certificate
                        err = ConnectionClosed("the daemon closed the connection (%s)" % read_error)
                    else:
                        err = ConnectionClosed("the daemon closed the connection")
                    self._kill(err, str(err))
                    return
                self._progress_at = loop.time()
                if pos:
                    del buf[:pos]
                    pos = 0
                buf += chunk
                while True:
                    try:
                        decoded = _p.decode_response(buf, pos)
                    except ProtocolError as e:
                        self._kill(e, str(e))
                        return
                    if decoded is None:
                        break
                    response, pos = decoded
                    if not pending:
                        e = ProtocolError("daemon sent %r with no request outstanding" % (response,))
                        self._kill(e, str(e))
                        return
                    expect, fut = pending[0]
                    outcome = outcome_of(expect, response)
                    if isinstance(outcome, SpillwayError):
                        if closes(outcome):
                            why = after_close_message(outcome)
                            if isinstance(outcome, NackError):
                                pending.popleft()
                                if not fut.done():
                                    fut.set_exception(outcome)
                                self._kill(ConnectionClosed("no answer: " + why), why)
                            else:
                                self._kill(outcome, str(outcome))
                            return
                        pending.popleft()
                        if not fut.done():
                            fut.set_exception(outcome)
                    else:
                        pending.popleft()
                        if not fut.done():  # a cancelled caller's answer is dropped
                            fut.set_result(outcome)
                if not pending and self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a bug: fail the waiters rather than hang them
            self._kill(ConnectionClosed("the reader failed: %r" % (e,)), "the reader failed")
            raise


class AsyncPipeline:
    """Queue requests without waiting for their answers, then ``await
    flush()`` for every outcome, in order. Outcomes as for
    :class:`spillway.Pipeline` (int records acked, or the error).

    ``await push(...)`` returns once the request is written (waiting for room
    when ``window`` requests are outstanding).
    """

    def __init__(self, client: AsyncClient, window: int) -> None:
        self._c = client
        self.window = window
        self._room = asyncio.Semaphore(window)
        self._futures: List["asyncio.Future[int]"] = []

    async def push(self, tier: TierLike, record: RecordLike) -> None:
        """Queues a Push of ``record`` at ``tier``."""
        head, payload, trailer = _p.push_parts(_p.tier_byte(tier), record, self._c.payload_bytes_max)
        await self._queue(b"".join((head, payload, trailer)), EXPECT_ACK)

    async def push_batch(self, tier: TierLike, records: Sequence[RecordLike]) -> None:
        """Queues a PushBatch; its outcome is the record count."""
        head, payload, trailer, n = _p.batch_parts(_p.tier_byte(tier), records, self._c.payload_bytes_max)
        await self._queue(b"".join((head, payload, trailer)), n)

    async def health(self) -> None:
        """Queues a HealthCheck; its outcome is 0."""
        await self._queue(_p.HEALTH_CHECK_FRAME, EXPECT_HEALTH)

    @property
    def outstanding(self) -> int:
        """Requests queued whose answers have not arrived yet."""
        return sum(1 for f in self._futures if not f.done())

    async def flush(self, raise_first: bool = True) -> List[Outcome]:
        """Waits for every answer; returns the outcomes of the requests queued
        since the previous flush, in order (or raises the first error, with
        ``request_index`` set, once all have been answered)."""
        futures, self._futures = self._futures, []
        outcomes: List[Outcome] = []
        for i, fut in enumerate(futures):
            try:
                outcomes.append(await fut)
            except SpillwayError as e:
                e.request_index = i
                outcomes.append(e)
        if raise_first:
            for outcome in outcomes:
                if isinstance(outcome, SpillwayError):
                    raise outcome
        return outcomes

    async def _queue(self, frame: bytes, expect: int) -> None:
        await self._room.acquire()
        try:
            fut = await self._c._send(frame, expect)
        except BaseException:
            self._room.release()
            raise
        fut.add_done_callback(self._release)
        self._futures.append(fut)

    def _release(self, _fut: "asyncio.Future[int]") -> None:
        self._room.release()

    async def __aenter__(self) -> "AsyncPipeline":
        return self

    async def __aexit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is None:
            await self.flush()


async def connect(
    path: Union[str, "os.PathLike[str]"],
    *,
    connect_timeout: float = DEFAULT_TIMEOUT,
    timeout: float = DEFAULT_TIMEOUT,
    payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
    window: int = DEFAULT_WINDOW,
) -> AsyncClient:
    """Same as :meth:`AsyncClient.connect`."""
    return await AsyncClient.connect(
        path,
        connect_timeout=connect_timeout,
        timeout=timeout,
        payload_bytes_max=payload_bytes_max,
        window=window,
    )


async def connect_tcp(
    host: str,
    port: int,
    *,
    tls: Union[None, bool, ssl.SSLContext] = None,
    server_hostname: Optional[str] = None,
    connect_timeout: float = DEFAULT_TIMEOUT,
    timeout: float = DEFAULT_TIMEOUT,
    payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
    window: int = DEFAULT_WINDOW,
) -> AsyncClient:
    """Same as :meth:`AsyncClient.connect_tcp`."""
    return await AsyncClient.connect_tcp(
        host,
        port,
        tls=tls,
        server_hostname=server_hostname,
        connect_timeout=connect_timeout,
        timeout=timeout,
        payload_bytes_max=payload_bytes_max,
        window=window,
    )
