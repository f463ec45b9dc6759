"""Shared fixtures: the real daemon (from $SPILLWAY_BIN), the conformance
vectors (read from the repository at test time), and fake daemons for the
hostile-server tests."""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

import spillway

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
VECTORS_PATH = REPO / "protocol" / "conformance" / "vectors.json"
DAEMON_PAYLOAD_MAX = 1048576

CONFIG = """\
[server]
socket_path = "{tmp}/spillway.sock"
data_dir = "{tmp}/wab"
shards = 1
payload_bytes_max = 1048576
[wab]
segment_bytes_max = 4194304
wab_bytes_max = 268435456
[sink]
type = "file"
path = "{tmp}/delivered.ndjson"
linger_ms = 5
[admin]
socket_path = "{tmp}/admin.sock"
"""


def load_vectors() -> Dict:
    with open(VECTORS_PATH, "rb") as f:
        return json.load(f)


def vectors_of(kind: str) -> List[Dict]:
    return [v for v in load_vectors()["vectors"] if v["kind"] == kind]


def spillway_bin() -> str:
    path = os.environ.get("SPILLWAY_BIN")
    if not path:
        raise RuntimeError(
            "SPILLWAY_BIN is not set: set it to the spillway daemon binary, "
            "e.g. SPILLWAY_BIN=/path/to/target/release/spillway"
        )
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise RuntimeError("SPILLWAY_BIN=%s is not an executable file" % path)
    return path


def pytest_sessionstart(session: pytest.Session) -> None:
    try:
        spillway_bin()
    except RuntimeError as e:
        pytest.exit(str(e), returncode=2)
    if not VECTORS_PATH.is_file():
        pytest.exit("conformance vectors not found at %s" % VECTORS_PATH, returncode=2)


class Daemon:
    """The real daemon on a fresh folder; ``extra_config`` (TOML, e.g. a
    ``[server.tcp]`` table) is appended to :data:`CONFIG`."""

    def __init__(self, tmp: Path, extra_config: str = "") -> None:
        self.tmp = tmp
        self.extra_config = extra_config
        self.socket_path = str(tmp / "spillway.sock")
        self.delivered = tmp / "delivered.ndjson"
        self.stdout = tmp / "daemon.stdout"
        self.stderr = tmp / "daemon.stderr"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        config = self.tmp / "spillway.toml"
        config.write_text(CONFIG.format(tmp=self.tmp) + self.extra_config)
        with open(self.stdout, "wb") as out, open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [spillway_bin(), "run", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        deadline = time.monotonic() + 15
        last: Optional[BaseException] = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "the daemon exited with status %s before answering; its stderr:\n%s"
                    % (self.proc.returncode, self.stderr_text())
                )
            try:
                with spillway.connect(self.socket_path, connect_timeout=1, timeout=2) as c:
                    c.health()
                return
            except spillway.SpillwayError as e:
                last = e
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(
            "the daemon did not answer a HealthCheck within 15 s (last error: %s); its stderr:\n%s"
            % (last, self.stderr_text())
        )

    def stderr_text(self) -> str:
        try:
            return self.stderr.read_text(errors="replace")
        except OSError:
            return "(no stderr file)"

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def delivered_lines(self) -> List[bytes]:
        try:
            data = self.delivered.read_bytes()
        except FileNotFoundError:
            return []
        return data.split(b"\n")[:-1]


@pytest.fixture(scope="session")
def daemon():
    tmp = Path(tempfile.mkdtemp(prefix="spillway-py-"))
    os.chmod(tmp, 0o700)
    d = Daemon(tmp)
    try:
        d.start()
        yield d
    finally:
        d.stop()
        if d.proc is not None and d.proc.returncode not in (0, None, -signal.SIGTERM):
            print("daemon exited with %s; stderr:\n%s" % (d.proc.returncode, d.stderr_text()))
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def sock_dir():
    tmp = tempfile.mkdtemp(prefix="spillway-py-fake-")
    os.chmod(tmp, 0o700)
    yield Path(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


# -- fake daemons -----------------------------------------------------------


def read_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(conn: socket.socket) -> bytes:
    """One request frame (header, payload, trailer) from a client."""
    header = read_exact(conn, 16)
    (length,) = struct.unpack_from("<I", header, 8)
    return header + read_exact(conn, length + 4)


def response_frame(message_type: int, payload: bytes = b"") -> bytes:
    head = struct.pack("<4sBBBBI", b"WEIR", 1, message_type, 1, 0, len(payload))
    head += struct.pack("<I", zlib.crc32(head))
    return head + payload + struct.pack("<I", zlib.crc32(payload) if payload else 0)


def nack_frame(reason: int) -> bytes:
    return response_frame(3, bytes([reason, 1]) if reason == 2 else bytes([reason]))


ACK = response_frame(2)
HEALTH_OK = response_frame(5)


def ack_batch_frame(count: int) -> bytes:
    return response_frame(7, struct.pack("<I", count))


class FakeDaemon:
    """A Unix socket listener that serves each connection with ``handler``
    (in a thread). ``stop`` is an Event handlers may wait on."""

    def __init__(self, directory: Path, handler: Callable[[socket.socket, threading.Event], None]) -> None:
        self.path = str(directory / ("fake-%d.sock" % id(self)))
        self.stop = threading.Event()
        self._handler = handler
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self._threads: List[threading.Thread] = []
        self.errors: List[BaseException] = []
        self._accept = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept.start()

    def _accept_loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            self._handler(conn, self.stop)
        except (EOFError, OSError):
            pass
        except BaseException as e:  # surfaced by close()
            self.errors.append(e)
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self._accept.join(5)
        self._listener.close()
        for t in self._threads:
            t.join(5)
        if self.errors:
            raise self.errors[0]

    def __enter__(self) -> "FakeDaemon":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@pytest.fixture
def fake(sock_dir):
    """fake(handler) starts a FakeDaemon; all are closed at teardown."""
    started: List[FakeDaemon] = []

    def start(handler):
        f = FakeDaemon(sock_dir, handler)
        started.append(f)
        return f

    yield start
    for f in started:
        f.close()
