"""The blocking client (:class:`Client`) and its pipelined sender
(:class:`Pipeline`), on the standard ``socket`` and ``ssl`` modules."""

import os
import socket
import ssl
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Sequence, Union

from . import protocol as _p
from ._types import MessageType
from .errors import (
    ConnectFailed,
    ConnectionClosed,
    NackError,
    ProtocolError,
    SpillwayError,
    SpillwayTimeout,
)
from .protocol import PAYLOAD_BYTES_HARD_MAX, RecordLike, Response, TierLike

__all__ = ["Client", "Pipeline", "connect", "Outcome", "tls_context"]

DEFAULT_TIMEOUT = 10.0
DEFAULT_WINDOW = 64
READ_CHUNK = 256 * 1024
FLUSH_BYTES = 256 * 1024

# What a request expects back, as one int: Ack (-1), HealthCheckResponse (0)
# or an AckBatch counting n >= 1 records (n). The success outcome of a
# request is 1 for a push, n for a batch, 0 for a health check.
EXPECT_ACK = -1
EXPECT_HEALTH = 0

Outcome = Union[int, SpillwayError]
"""A pipelined request's outcome: the number of records acked (1 for a
push, the count for a push_batch, 0 for a health check) or the error."""

_ACK_FRAME = _p.ACK_FRAME
_ACK_FRAME_LEN = len(_ACK_FRAME)
_HCR_FRAME = _p.HEALTH_CHECK_RESPONSE_FRAME
_ACK_BATCH_FRAMES: Dict[int, bytes] = {}


def _ack_batch_frame(count: int) -> bytes:
    frame = _ACK_BATCH_FRAMES.get(count)
    if frame is None:
        body = _p._pack_u32(count)
        frame = _p.ACK_BATCH_HEADER + body + _p._pack_u32(_p.crc32(body))
        if len(_ACK_BATCH_FRAMES) < 1024:
            _ACK_BATCH_FRAMES[count] = frame
    return frame


def _describe(expect: int) -> str:
    if expect == EXPECT_ACK:
        return "an Ack"
    if expect == EXPECT_HEALTH:
        return "a HealthCheckResponse"
    return "an AckBatch counting %d records" % expect


def _check_timeout(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError("%s must be a positive number of seconds, not %r" % (name, value))
    return float(value)


def check_options(connect_timeout: Any, timeout: Any, payload_bytes_max: Any) -> None:
    """Validates connect options (shared with the asyncio client)."""
    _check_timeout("connect_timeout", connect_timeout)
    _check_timeout("timeout", timeout)
    if isinstance(payload_bytes_max, bool) or not isinstance(payload_bytes_max, int):
        raise ValueError("payload_bytes_max must be an int, not %r" % (payload_bytes_max,))
    _p._check_limit(payload_bytes_max)


def tls_context(
    cafile: Optional[Union[str, "os.PathLike[str]"]] = None,
    certfile: Optional[Union[str, "os.PathLike[str]"]] = None,
    keyfile: Optional[Union[str, "os.PathLike[str]"]] = None,
    *,
    password: Optional[Union[str, bytes]] = None,
) -> ssl.SSLContext:
    """An :class:`ssl.SSLContext` for :meth:`Client.connect_tcp` (and
    :meth:`spillway.AsyncClient.connect_tcp`).

    It verifies the daemon's certificate and its name: against the PEM
    CA certificate(s) in ``cafile``, or the system's trusted CAs when
    ``cafile`` is None. ``certfile`` (a PEM certificate chain, the client's
    own first) and ``keyfile`` (its PEM private key; None when the key is
    in ``certfile``) are the client's certificate, for a daemon that asks
    for one (``server.tcp.ca_file``, mutual TLS). ``password`` decrypts
    an encrypted key. TLS 1.2 or later.

    File and format errors are raised as they come (``OSError``,
    :class:`ssl.SSLError`).
    """
    if keyfile is not None and certfile is None:
        raise ValueError("keyfile needs certfile (the client certificate it belongs to)")
    ctx = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=os.fspath(cafile) if cafile is not None else None
    )
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if certfile is not None:
        ctx.load_cert_chain(
            os.fspath(certfile), os.fspath(keyfile) if keyfile is not None else None, password
        )
    return ctx


def tls_option(tls: Any, server_hostname: Any) -> Optional[ssl.SSLContext]:
    """Validates connect_tcp's ``tls`` and ``server_hostname`` (shared with
    the asyncio client); the context to use, or None for the clear."""
    if tls is None or tls is False:
        ctx = None
    elif tls is True:
        ctx = ssl.create_default_context()
    elif isinstance(tls, ssl.SSLContext):
        ctx = tls
    else:
        raise TypeError("tls must be None, True or an ssl.SSLContext (see spillway.tls_context), not %r" % (tls,))
    if server_hostname is not None:
        if ctx is None:
            raise ValueError("server_hostname is only used with tls")
        if not isinstance(server_hostname, str) or not server_hostname:
            raise ValueError("server_hostname must be a non-empty str, not %r" % (server_hostname,))
    return ctx


def check_address(host: Any, port: Any) -> str:
    """Validates connect_tcp's ``host`` and ``port``; returns ``host:port``
    (``[host]:port`` for an IPv6 address)."""
    if not isinstance(host, str) or not host:
        raise ValueError("host must be a non-empty str, not %r" % (host,))
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError("port must be an int in 1..=65535, not %r" % (port,))
    if ":" in host:
        return "[%s]:%d" % (host, port)
    return "%s:%d" % (host, port)


def outcome_of(expect: int, response: Response) -> Outcome:
    """The caller's result for ``response`` to a request expecting ``expect``."""
    kind = response.type
    if kind is MessageType.NACK:
        assert response.reason is not None
        return NackError(response.reason, response.daemon_version)
    if kind is MessageType.ACK:
        if expect == EXPECT_ACK:
            return 1
    elif kind is MessageType.HEALTH_CHECK_RESPONSE:
        if expect == EXPECT_HEALTH:
            return 0
    elif kind is MessageType.ACK_BATCH and expect > 0:
        if response.count == expect:
            return expect
        return ProtocolError(
            "daemon acked a batch of %d records with an AckBatch counting %s" % (expect, response.count)
        )
    return ProtocolError("daemon answered %r where %s was expected" % (response, _describe(expect)))


def closes(outcome: Outcome) -> bool:
    """Whether an outcome leaves the connection unusable."""
    if isinstance(outcome, NackError):
        return not outcome.retryable
    return isinstance(outcome, SpillwayError)


def after_close_message(outcome: SpillwayError) -> str:
    if isinstance(outcome, NackError):
        return "the daemon closed the connection after nacking an earlier request (%s)" % outcome.reason_name
    return "the connection was closed after an earlier error: %s" % outcome


class Client:
    """A blocking connection to a spillway (or weir v1) daemon.

    Each call sends one request and waits for its answer; :meth:`pipeline`
    keeps many requests in flight. Not thread-safe: use one client per
    thread. Create with :func:`connect` / :meth:`Client.connect` (the Unix
    socket) or :meth:`Client.connect_tcp` (the TCP door, in the clear or
    with TLS). ``path`` is the socket's path, or ``tcp://host:port`` /
    ``tls://host:port``.
    """

    def __init__(self, sock: socket.socket, path: str, timeout: float, payload_bytes_max: int) -> None:
        self._sock: Optional[socket.socket] = sock
        self.path = path
        self.timeout = timeout
        self.payload_bytes_max = payload_bytes_max
        self._rbuf = bytearray()
        self._rpos = 0
        self._dead: Optional[str] = None
        self._stale = 0
        self._pipeline: Optional["Pipeline"] = None

    @classmethod
    def connect(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        connect_timeout: float = DEFAULT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
    ) -> "Client":
        """Connects to the daemon's Unix socket at ``path``.

        ``connect_timeout`` bounds the connect, ``timeout`` every later read
        and write (seconds, > 0). ``payload_bytes_max`` is the largest
        payload the client will send (default and maximum 16 MiB; set it to
        the daemon's ``server.payload_bytes_max`` so oversized records are
        refused locally instead of by the daemon, which closes the
        connection).
        """
        check_options(connect_timeout, timeout, payload_bytes_max)
        path = os.fspath(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout)
            sock.connect(path)
            sock.settimeout(timeout)
        except socket.timeout:
            sock.close()
            raise SpillwayTimeout(
                "connecting to the daemon at %s timed out after %g s" % (path, connect_timeout)
            ) from None
        except OSError as e:
            sock.close()
            raise ConnectFailed("cannot connect to the daemon at %s: %s" % (path, e.strerror or e)) from e
        return cls(sock, path, float(timeout), payload_bytes_max)

    @classmethod
    def connect_tcp(
        cls,
        host: str,
        port: int,
        *,
        tls: Union[None, bool, ssl.SSLContext] = None,
        server_hostname: Optional[str] = None,
        connect_timeout: float = DEFAULT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        payload_bytes_max: int = PAYLOAD_BYTES_HARD_MAX,
    ) -> "Client":
        """Connects to the daemon's TCP door (``[server.tcp]``) at
        ``host``:``port``: the same protocol as on the Unix socket.

        ``tls`` is None (the default) for the clear, which the daemon only
        offers on a loopback address (``tls = false``); an
        :class:`ssl.SSLContext` (see :func:`tls_context`) for TLS; or True
        for TLS with the system's trusted CAs and no client certificate.
        The daemon's certificate must carry ``server_hostname`` (default:
        ``host``, a DNS name or an IP address) among its subject
        alternative names.

        ``connect_timeout`` bounds the TCP connect and the TLS handshake
        together; the other options are those of :meth:`connect`. A
        refused connect or handshake raises :class:`ConnectFailed` (or
        :class:`SpillwayTimeout`). With TLS 1.3 the client's half of the
        handshake ends before the daemon has checked the client's
        certificate: a daemon that refuses it (no certificate, another CA,
        a name not in ``allowed_names``) closes the connection, which the
        first call reports as :class:`ConnectionClosed`.
        """
        check_options(connect_timeout, timeout, payload_bytes_max)
        ctx = tls_option(tls, server_hostname)
        address = check_address(host, port)
        label = ("tls://" if ctx is not None else "tcp://") + address
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except socket.timeout:
            raise SpillwayTimeout(
                "connecting to the daemon at %s timed out after %g s" % (label, connect_timeout)
            ) from None
        except OSError as e:
            raise ConnectFailed("cannot connect to the daemon at %s: %s" % (label, e.strerror or e)) from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ctx is not None:
                # The handshake runs here, under connect_timeout.
                sock = ctx.wrap_socket(sock, server_hostname=server_hostname or host)
            sock.settimeout(timeout)
        except socket.timeout:
            sock.close()
            raise SpillwayTimeout(
                "the TLS handshake with the daemon at %s timed out after %g s" % (label, connect_timeout)
            ) from None
        except ssl.SSLCertVerificationError as e:
            sock.close()
            raise ConnectFailed(
                "the daemon at %s presented a certificate that does not verify: %s"
                % (label, e.verify_message or e)
            ) from e
        except OSError as e:  # ssl.SSLError included
            sock.close()
            raise ConnectFailed("the TLS handshake with the daemon at %s failed: %s" % (label, e)) from e
        return cls(sock, label, float(timeout), payload_bytes_max)

    # -- public surface ---------------------------------------------------

    def push(self, tier: TierLike, record: RecordLike) -> None:
        """Stores one record at ``tier``; returns once the daemon acked it.

        Raises :class:`RecordRejected` (nothing sent) for an empty record or
        one over ``payload_bytes_max``, :class:`NackError` if the daemon
        refused it, else :class:`SpillwayTimeout`, :class:`ConnectionClosed`
        or :class:`ProtocolError`.
        """
        head, payload, trailer = _p.push_parts(_p.tier_byte(tier), record, self.payload_bytes_max)
        self._round_trip(b"".join((head, payload, trailer)), EXPECT_ACK)

    def push_batch(self, tier: TierLike, records: Sequence[RecordLike]) -> int:
        """Stores ``records`` at ``tier`` in one PushBatch frame; returns the
        number acked (always ``len(records)``: an AckBatch with another count
        is a :class:`ProtocolError`). After a nack none of them is stored.

        Raises :class:`RecordRejected` (nothing sent) for no records, an
        empty record, or a payload (``4 + sum(4 + len)``) over
        ``payload_bytes_max``.
        """
        head, payload, trailer, n = _p.batch_parts(_p.tier_byte(tier), records, self.payload_bytes_max)
        return self._round_trip(b"".join((head, payload, trailer)), n)

    def health(self) -> None:
        """Sends a HealthCheck and waits for the HealthCheckResponse.

        A daemon whose shard cannot write answers with a retryable nack
        (InternalError or Overloaded), raised as :class:`NackError`.
        """
        self._round_trip(_p.HEALTH_CHECK_FRAME, EXPECT_HEALTH)

    def pipeline(self, window: int = DEFAULT_WINDOW) -> "Pipeline":
        """A pipelined sender keeping up to ``window`` requests in flight on
        this connection. While it is open, the client's own calls refuse."""
        self._check_usable()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError("window must be an int >= 1, not %r" % (window,))
        self._discard_stale()
        pipeline = Pipeline(self, window)
        self._pipeline = pipeline
        return pipeline

    @property
    def closed(self) -> bool:
        """True once the connection is closed (by :meth:`close` or an error)."""
        return self._sock is None

    def close(self) -> None:
        """Closes the connection (idempotent)."""
        if self._dead is None:
            self._dead = "the client was closed"
        self._close_socket()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._sock is None else "open"
        return "<spillway.Client %s %s>" % (self.path, state)

    # -- internals --------------------------------------------------------

    def _check_usable(self) -> None:
        if self._dead is not None:
            raise ConnectionClosed("connection unusable: " + self._dead)
        if self._pipeline is not None:
            raise RuntimeError("a pipeline is open on this client: use it, or close it first")

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _kill(self, err: SpillwayError) -> SpillwayError:
        """Closes the connection because of ``err`` and returns ``err``."""
        if self._dead is None:
            if isinstance(err, NackError):
                self._dead = "the daemon closed the connection after a %s nack" % err.reason_name
            else:
                self._dead = str(err)
        self._close_socket()
        return err

    def _round_trip(self, frame: bytes, expect: int) -> int:
        self._check_usable()
        self._discard_stale()
        self._send(frame)
        outcome = outcome_of(expect, self._next_response())
        if isinstance(outcome, SpillwayError):
            if closes(outcome):
                self._kill(outcome)
            raise outcome
        return outcome

    def _send(self, data: Union[bytes, bytearray]) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionClosed("connection unusable: " + (self._dead or "closed"))
        try:
            sock.sendall(data)
        except socket.timeout:
            raise self._kill(
                SpillwayTimeout(
                    "writing to the daemon timed out after %g s (the daemon is not reading); "
                    "the connection is closed" % self.timeout
                )
            ) from None
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as e:
            nack = self._salvage_nack()
            if nack is not None:
                raise self._kill(nack) from e
            raise self._kill(ConnectionClosed("the daemon closed the connection (%s)" % e.strerror)) from e
        except OSError as e:
            raise self._kill(ConnectionClosed("writing to the daemon failed: %s" % e)) from e
        except BaseException:
            # Interrupted part-way through a frame: the stream is out of frame.
            self._kill(ConnectionClosed("a write was interrupted part-way through a frame"))
            raise

    def _salvage_nack(self) -> Optional[NackError]:
        """After a failed write, the nack the daemon sent before hanging up
        (typically PayloadTooLarge), if it is already in the socket."""
        sock = self._sock
        if sock is None:
            return None
        try:
            sock.setblocking(False)
            while True:
                chunk = sock.recv(READ_CHUNK)
                if not chunk:
                    break
                self._rbuf += chunk
        except OSError:
            pass
        pos = self._rpos
        try:
            while True:
                decoded = _p.decode_response(self._rbuf, pos)
                if decoded is None:
                    return None
                response, pos = decoded
                if response.type is MessageType.NACK and response.reason is not None:
                    if response.reason.closes_connection:
                        return NackError(response.reason, response.daemon_version)
        except ProtocolError:
            return None

    def _fill(self) -> None:
        """One read from the socket into the read buffer."""
        buf = self._rbuf
        if self._rpos:
            del buf[: self._rpos]
            self._rpos = 0
        sock = self._sock
        if sock is None:
            raise ConnectionClosed("connection unusable: " + (self._dead or "closed"))
        try:
            chunk = sock.recv(READ_CHUNK)
        except socket.timeout:
            raise self._kill(
                SpillwayTimeout(
                    "no answer from the daemon within %g s (read timeout); the request may or may not "
                    "have been stored; the connection is closed" % self.timeout
                )
            ) from None
        except (ConnectionResetError, ConnectionAbortedError):
            chunk = b""
        except OSError as e:
            raise self._kill(ConnectionClosed("reading from the daemon failed: %s" % e)) from e
        except BaseException:
            self._kill(ConnectionClosed("a read was interrupted; the connection was closed"))
            raise
        if not chunk:
            if buf:
                if len(buf) >= _p.HEADER_LEN:
                    try:
                        wanted = "%d" % _p.check_header(buf)
                    except ProtocolError as e:
                        raise self._kill(e) from None
                else:
                    wanted = "at least %d" % _p.HEADER_LEN
                raise self._kill(
                    ProtocolError(
                        "the daemon closed the connection mid-frame: %d bytes of a response received, %s expected"
                        % (len(buf), wanted)
                    )
                )
            raise self._kill(ConnectionClosed("the daemon closed the connection"))
        buf += chunk

    def _next_response(self) -> Response:
        while True:
            try:
                decoded = _p.decode_response(self._rbuf, self._rpos)
            except ProtocolError as e:
                raise self._kill(e) from None
            if decoded is not None:
                response, self._rpos = decoded
                return response
            self._fill()

    def _discard_stale(self) -> None:
        """Reads the answers to requests an abandoned pipeline had written."""
        while self._stale:
            response = self._next_response()
            self._stale -= 1
            if response.type is MessageType.NACK and response.reason is not None:
                if response.reason.closes_connection:
                    raise self._kill(NackError(response.reason, response.daemon_version))


class Pipeline:
    """Many requests in flight on one connection; answers matched to
    requests strictly in order (the protocol has no request ids).

    ``push`` / ``push_batch`` / ``health`` queue a request without waiting
    for its answer. Frames are written in batches (when ``window`` requests
    are queued or 256 KiB are buffered). When ``window`` requests are
    outstanding, the next call first reads answers, so neither side can
    block the other. :meth:`flush` writes everything and waits for every
    answer.

    A request's outcome is an int (records acked: 1 for a push, n for a
    batch, 0 for a health check) or the error (a :class:`NackError`; after
    a connection failure, that error for the first unanswered request and
    :class:`ConnectionClosed` for the rest). ``push`` and friends raise only
    for local refusals and a dead connection.

    As a context manager it flushes on a normal exit (raising the first
    error) and abandons outstanding requests on an exception.
    """

    def __init__(self, client: Client, window: int) -> None:
        self._c = client
        self.window = window
        self._pending: Deque[int] = deque()  # expectations, written or not, unanswered
        self._parts: List[bytes] = []  # encoded, not yet written
        self._unsent_requests = 0
        self._unsent_bytes = 0
        self._outcomes: List[Outcome] = []
        self._closed = False

    # -- public surface ---------------------------------------------------

    def push(self, tier: TierLike, record: RecordLike) -> None:
        """Queues a Push of ``record`` at ``tier``."""
        head, payload, trailer = _p.push_parts(_p.tier_byte(tier), record, self._c.payload_bytes_max)
        self._queue(EXPECT_ACK, head, payload, trailer)

    def push_batch(self, tier: TierLike, records: Sequence[RecordLike]) -> None:
        """Queues a PushBatch of ``records`` at ``tier``; its outcome is the count."""
        head, payload, trailer, n = _p.batch_parts(_p.tier_byte(tier), records, self._c.payload_bytes_max)
        self._queue(n, head, payload, trailer)

    def health(self) -> None:
        """Queues a HealthCheck; its outcome is 0."""
        self._queue(EXPECT_HEALTH, _p.HEALTH_CHECK_FRAME, b"", b"")

    @property
    def outstanding(self) -> int:
        """Requests queued whose answers have not been read yet."""
        return len(self._pending)

    def flush(self, raise_first: bool = True) -> List[Outcome]:
        """Writes every queued request and waits for all outstanding answers.

        Returns the outcomes of the requests queued since the previous
        ``flush``, in request order. With ``raise_first`` (the default) the
        first error among them is raised instead, once every answer has been
        read; its ``request_index`` is its position in that list.
        """
        self._check_open()
        try:
            self._write()
            while self._pending:
                self._read_some()
        except SpillwayError:
            pass  # recorded as the outcome of every unanswered request
        outcomes, self._outcomes = self._outcomes, []
        if raise_first:
            for outcome in outcomes:
                if isinstance(outcome, SpillwayError):
                    raise outcome
        return outcomes

    def close(self) -> None:
        """Detaches the pipeline from its client. Queued requests not yet
        written are dropped; answers still owed for written ones are read
        and discarded by the client's next call."""
        if self._closed:
            return
        self._closed = True
        written = len(self._pending) - self._unsent_requests
        self._parts = []
        self._pending.clear()
        self._c._stale += written
        self._c._pipeline = None

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        try:
            if exc_type is None and not self._closed:
                self.flush()
        finally:
            self.close()

    # -- internals --------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this pipeline is closed")

    def _queue(self, expect: int, head: bytes, payload: bytes, trailer: bytes) -> None:
        self._check_open()
        c = self._c
        if c._dead is not None:
            raise ConnectionClosed("connection unusable: " + c._dead)
        pending = self._pending
        if len(pending) >= self.window:
            self._write()
            while len(pending) >= self.window:
                self._read_some()
            if c._dead is not None:  # a nack that closed it was just read
                raise ConnectionClosed("connection unusable: " + c._dead)
        parts = self._parts
        parts.append(head)
        parts.append(payload)
        parts.append(trailer)
        pending.append(expect)
        self._unsent_requests += 1
        self._unsent_bytes += len(payload) + 20
        if self._unsent_bytes >= FLUSH_BYTES or len(pending) >= self.window:
            self._write()

    def _write(self) -> None:
        if not self._parts:
            return
        data = b"".join(self._parts)
        self._parts = []
        self._unsent_requests = 0
        self._unsent_bytes = 0
        try:
            self._c._send(data)
        except SpillwayError as e:
            # Answers the daemon sent before hanging up still count.
            try:
                self._process()
            except SpillwayError:
                pass
            self._break(e)
            if isinstance(e, NackError):
                # The nack is its request's outcome; this call's failure is
                # that the connection is gone.
                raise ConnectionClosed("connection unusable: " + (self._c._dead or "closed")) from e
            raise

    def _break(self, err: SpillwayError) -> None:
        """The connection failed: every unanswered request gets an error."""
        c = self._c
        c._kill(err)
        outcomes = self._outcomes
        first = True
        for _ in range(len(self._pending)):
            if first and not isinstance(err, NackError):
                e: SpillwayError = err
            else:
                e = ConnectionClosed("no answer: " + (c._dead or "connection closed"))
            first = False
            e.request_index = len(outcomes)
            outcomes.append(e)
        self._pending.clear()
        self._parts = []
        self._unsent_requests = 0
        self._unsent_bytes = 0

    def _read_some(self) -> None:
        """Reads until at least one more answer has been matched."""
        try:
            while not self._process():
                self._c._fill()
        except SpillwayError as e:
            self._break(e)
            raise

    def _process(self) -> int:
        """Matches every complete answer in the read buffer; returns how many."""
        c = self._c
        buf = c._rbuf
        pos = c._rpos
        pending = self._pending
        outcomes = self._outcomes
        done = 0
        written = len(pending) - self._unsent_requests
        try:
            while done < written:
                expect = pending[0]
                if expect == EXPECT_ACK:
                    if buf.startswith(_ACK_FRAME, pos):
                        pos += _ACK_FRAME_LEN
                        pending.popleft()
                        outcomes.append(1)
                        done += 1
                        continue
                elif expect > 0:
                    frame = _ack_batch_frame(expect)
                    if buf.startswith(frame, pos):
                        pos += len(frame)
                        pending.popleft()
                        outcomes.append(expect)
                        done += 1
                        continue
                decoded = _p.decode_response(buf, pos)
                if decoded is None:
                    break
                response, pos = decoded
                outcome = outcome_of(expect, response)
                if isinstance(outcome, NackError) or not isinstance(outcome, SpillwayError):
                    pending.popleft()
                    done += 1
                    if isinstance(outcome, NackError):
                        outcome.request_index = len(outcomes)
                        outcomes.append(outcome)
                        if not outcome.retryable:
                            c._rpos = pos
                            self._break(outcome)
                            return done
                    else:
                        outcomes.append(outcome)
                else:
                    # A mismatch: the stream cannot be trusted any more.
                    # _break gives it to this (still pending) request.
                    raise outcome
        finally:
            c._rpos = pos
        return done
