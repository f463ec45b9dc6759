"""The TCP door (``[server.tcp]``) of the real daemon ($SPILLWAY_BIN): the
same protocol as on the Unix socket, in the clear on loopback and over
mutual TLS. The certificates are made at run time with the ``openssl``
command-line tool (two CAs, the daemon's certificate for localhost and
127.0.0.1, a client certificate with the allowed name and one without)."""

import asyncio
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List

import pytest

import spillway
from spillway import Tier

from conftest import DAEMON_PAYLOAD_MAX, Daemon, spillway_bin

TIERS = [Tier.SYNC, Tier.BATCHED, Tier.BUFFERED]
ALLOWED_NAME = "producer.example"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unique(tag: str) -> str:
    return "py-%s-%s" % (tag, uuid.uuid4().hex[:12])


def wait_delivered(daemon: Daemon, prefix: bytes, count: int, timeout: float = 15.0) -> List[bytes]:
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in daemon.delivered_lines() if line.startswith(prefix)]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def run(coro):
    return asyncio.run(coro)


# -- certificates -------------------------------------------------------------


def openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=str(cwd), stdin=subprocess.DEVNULL, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(
            "openssl %s failed (%d):\n%s" % (" ".join(args), done.returncode, done.stderr.decode(errors="replace"))
        )


def make_ca(d: Path, name: str, cn: str) -> None:
    openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".crt", "-days", "2", "-subj", "/CN=" + cn,
        cwd=d,
    )


def make_leaf(d: Path, name: str, ca: str, san: str, usage: str) -> None:
    """``name``.crt/.key signed by ``ca``, with subjectAltName ``san``."""
    (d / (name + ".ext")).write_text(
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = %s\n"
        "subjectAltName = %s\n" % (usage, san)
    )
    openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name,
        cwd=d,
    )
    openssl(
        "x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey", ca + ".key",
        "-set_serial", "0x" + uuid.uuid4().hex[:16], "-days", "2", "-extfile", name + ".ext",
        "-out", name + ".crt",
        cwd=d,
    )


def make_certs(d: Path) -> Dict[str, str]:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command-line tool is needed to make the TLS tests' certificates")
    make_ca(d, "server-ca", "spillway test server CA")
    make_ca(d, "client-ca", "spillway test client CA")
    make_leaf(d, "server", "server-ca", "DNS:localhost, IP:127.0.0.1", "serverAuth")
    make_leaf(d, "producer", "client-ca", "DNS:" + ALLOWED_NAME, "clientAuth")
    make_leaf(d, "intruder", "client-ca", "DNS:intruder.example", "clientAuth")
    # Signed by the CA the daemon trusts for servers, not for clients.
    make_leaf(d, "stranger", "server-ca", "DNS:" + ALLOWED_NAME, "clientAuth")
    return {n: str(d / n) for n in ("server-ca", "client-ca", "server", "producer", "intruder", "stranger")}


# -- daemons --------------------------------------------------------------------


def stop_daemon(d: Daemon) -> None:
    d.stop()
    if d.proc is not None and d.proc.returncode not in (0, None, -signal.SIGTERM):
        print("daemon exited with %s; stderr:\n%s" % (d.proc.returncode, d.stderr_text()))


def ctl_stat(d: Daemon, key: str) -> int:
    out = subprocess.run(
        [spillway_bin(), "ctl", "--admin-socket", str(d.tmp / "admin.sock"), "stats", "--flat"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=15,
    )
    text = out.stdout.decode(errors="replace")
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if name.strip() == key:
            return int(value)
    raise AssertionError("no %s in ctl stats (exit %d):\n%s%s" % (key, out.returncode, text, out.stderr.decode()))


@pytest.fixture(scope="module")
def tcp_daemon():
    tmp = Path(tempfile.mkdtemp(prefix="spillway-py-tcp-"))
    os.chmod(tmp, 0o700)
    port = free_port()
    d = Daemon(tmp, '[server.tcp]\nlisten = "127.0.0.1:%d"\ntls = false\n' % port)
    d.port = port
    try:
        d.start()  # ready once it answers on its Unix socket; the TCP door is bound before that
        yield d
    finally:
        stop_daemon(d)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_daemon():
    tmp = Path(tempfile.mkdtemp(prefix="spillway-py-tls-"))
    os.chmod(tmp, 0o700)
    certs = make_certs(tmp)
    port = free_port()
    d = Daemon(
        tmp,
        '[server.tcp]\nlisten = "127.0.0.1:%d"\ncert_file = "%s.crt"\nkey_file = "%s.key"\n'
        'ca_file = "%s.crt"\nallowed_names = ["%s"]\n'
        % (port, certs["server"], certs["server"], certs["client-ca"], ALLOWED_NAME),
    )
    d.port = port
    d.certs = certs
    try:
        d.start()  # ready once it answers on its Unix socket; the TCP door is bound before that
        yield d
    finally:
        stop_daemon(d)
        shutil.rmtree(tmp, ignore_errors=True)


def producer_context(d: Daemon, who: str = "producer") -> ssl.SSLContext:
    c = d.certs
    return spillway.tls_context(c["server-ca"] + ".crt", c[who] + ".crt", c[who] + ".key")


# -- the same protocol over the door --------------------------------------------


def speak(c: spillway.Client, prefix: str) -> List[bytes]:
    """Every tier, batches and a pipeline on one client; the records sent, in order."""
    sent = []
    c.health()
    for tier in TIERS:
        r = ("%s-%s" % (prefix, tier.name.lower())).encode()
        assert c.push(tier, r) is None
        sent.append(r)
    for tier in TIERS:
        batch = [("%s-batch-%s-%03d" % (prefix, tier.name.lower(), i)).encode() for i in range(100)]
        assert c.push_batch(tier, batch) == 100
        sent.extend(batch)
    expected = []
    with c.pipeline(window=32) as p:
        for i in range(500):
            if i % 50 == 7:
                batch = [("%s-pb-%03d-%d" % (prefix, i, j)).encode() for j in range(5)]
                p.push_batch(Tier.BUFFERED, batch)
                sent.extend(batch)
                expected.append(5)
            elif i % 50 == 9:
                p.health()
                expected.append(0)
            else:
                r = ("%s-p-%03d" % (prefix, i)).encode()
                p.push(TIERS[i % 3], r)
                sent.append(r)
                expected.append(1)
        assert p.flush() == expected
    # a record large enough to span many TCP segments / TLS records
    big = ("%s-big-" % prefix).encode().ljust(DAEMON_PAYLOAD_MAX, b"b")
    c.push(Tier.SYNC, big)
    sent.append(big)
    c.health()
    return sent


def test_tcp_in_the_clear_every_tier_batch_and_pipeline(tcp_daemon):
    prefix = unique("tcp")
    with spillway.connect_tcp(
        "127.0.0.1", tcp_daemon.port, payload_bytes_max=DAEMON_PAYLOAD_MAX, timeout=10
    ) as c:
        assert c.path == "tcp://127.0.0.1:%d" % tcp_daemon.port
        assert not isinstance(c._sock, ssl.SSLSocket)
        assert c._sock.family == socket.AF_INET
        sent = speak(c, prefix)
    assert c.closed
    assert wait_delivered(tcp_daemon, prefix.encode(), len(sent)) == sent


def test_tcp_in_the_clear_async(tcp_daemon):
    prefix = unique("tcp-async")
    records = [("%s-%04d" % (prefix, i)).encode() for i in range(300)]

    async def main():
        c = await spillway.aio.connect_tcp(
            "127.0.0.1", tcp_daemon.port, payload_bytes_max=DAEMON_PAYLOAD_MAX, window=32
        )
        async with c:
            assert c.path == "tcp://127.0.0.1:%d" % tcp_daemon.port
            await c.health()
            for tier, r in zip(TIERS, records[:3]):
                await c.push(tier, r)
            assert await c.push_batch(Tier.BATCHED, records[3:100]) == 97
            # gather does not promise the order of writes: delivery order is
            # checked for the sequential calls above and the pipeline below
            await asyncio.gather(*(c.push(Tier.SYNC, r) for r in records[100:200]))
            async with c.pipeline(window=16) as p:
                for r in records[200:]:
                    await p.push(Tier.BUFFERED, r)

    run(main())
    got = wait_delivered(tcp_daemon, prefix.encode(), len(records))
    assert got[:100] == records[:100]
    assert sorted(got[100:200]) == records[100:200]
    assert got[200:] == records[200:]


def test_the_clear_door_does_not_speak_tls(tcp_daemon):
    with pytest.raises(spillway.ConnectFailed) as e:
        spillway.connect_tcp("127.0.0.1", tcp_daemon.port, tls=True, connect_timeout=5)
    assert "tls://127.0.0.1:%d" % tcp_daemon.port in str(e.value)


def test_connect_tcp_option_checks(tmp_path):
    with pytest.raises(TypeError):
        spillway.connect_tcp("127.0.0.1", 1, tls="yes")
    with pytest.raises(ValueError):
        spillway.connect_tcp("127.0.0.1", 1, server_hostname="localhost")
    with pytest.raises(ValueError):
        spillway.connect_tcp("127.0.0.1", 0)
    with pytest.raises(ValueError):
        spillway.connect_tcp("", 7070)
    with pytest.raises(ValueError):
        spillway.connect_tcp("127.0.0.1", 7070, timeout=0)
    with pytest.raises(ValueError):
        spillway.tls_context(keyfile=str(tmp_path / "k.pem"))
    port = free_port()  # nothing listens there now
    with pytest.raises(spillway.ConnectFailed) as e:
        spillway.connect_tcp("127.0.0.1", port, connect_timeout=5)
    assert "tcp://127.0.0.1:%d" % port in str(e.value)

    async def main():
        with pytest.raises(spillway.ConnectFailed):
            await spillway.AsyncClient.connect_tcp("127.0.0.1", port, connect_timeout=5)
        with pytest.raises(TypeError):
            await spillway.AsyncClient.connect_tcp("127.0.0.1", port, tls=object())

    run(main())


# -- mutual TLS ------------------------------------------------------------------


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_mutual_tls_good_client(tls_daemon, host):
    prefix = unique("tls-" + host)
    with spillway.connect_tcp(
        host, tls_daemon.port, tls=producer_context(tls_daemon), payload_bytes_max=DAEMON_PAYLOAD_MAX
    ) as c:
        assert c.path == "tls://%s:%d" % (host, tls_daemon.port)
        assert isinstance(c._sock, ssl.SSLSocket)
        assert c._sock.version() in ("TLSv1.2", "TLSv1.3")
        assert c._sock.getpeercert()["subjectAltName"] == (("DNS", "localhost"), ("IP Address", "127.0.0.1"))
        sent = speak(c, prefix)
    assert wait_delivered(tls_daemon, prefix.encode(), len(sent)) == sent


def test_mutual_tls_good_client_async(tls_daemon):
    prefix = unique("tls-async")
    records = [("%s-%04d" % (prefix, i)).encode() for i in range(200)]

    async def main():
        c = await spillway.AsyncClient.connect_tcp(
            "localhost", tls_daemon.port, tls=producer_context(tls_daemon), payload_bytes_max=DAEMON_PAYLOAD_MAX
        )
        async with c:
            assert c.path == "tls://localhost:%d" % tls_daemon.port
            await c.health()
            for tier, r in zip(TIERS, records[:3]):
                await c.push(tier, r)
            assert await c.push_batch(Tier.SYNC, records[3:100]) == 97
            async with c.pipeline(window=16) as p:
                for r in records[100:]:
                    await p.push(Tier.BATCHED, r)

    run(main())
    assert wait_delivered(tls_daemon, prefix.encode(), len(records)) == records


def attempt(flavour: str, port: int, ctx: ssl.SSLContext, record: bytes) -> spillway.SpillwayError:
    """Connects and pushes; returns the error, failing the test if the push
    was acked. A timeout is not a refusal: SpillwayTimeout propagates."""

    def blocking() -> None:
        with spillway.connect_tcp("localhost", port, tls=ctx, connect_timeout=5, timeout=5) as c:
            c.push(Tier.SYNC, record)
            c.health()

    async def asynchronous() -> None:
        c = await spillway.AsyncClient.connect_tcp("localhost", port, tls=ctx, connect_timeout=5, timeout=5)
        async with c:
            await c.push(Tier.SYNC, record)
            await c.health()

    try:
        if flavour == "blocking":
            blocking()
        else:
            run(asynchronous())
    except (spillway.ConnectFailed, spillway.ConnectionClosed) as e:
        return e
    pytest.fail("a client the daemon must refuse had its push acked")


REFUSALS = [
    ("no_client_certificate", None),
    ("name_not_allowed", "intruder"),
    ("unknown_ca", "stranger"),
]


@pytest.mark.parametrize("flavour", ["blocking", "async"])
@pytest.mark.parametrize("reason,who", REFUSALS, ids=[r for r, _ in REFUSALS])
def test_mutual_tls_refuses_the_wrong_clients(tls_daemon, flavour, reason, who):
    key = 'tcp_tls_handshakes_failed{reason="%s"}' % reason
    before = ctl_stat(tls_daemon, key)
    if who is None:
        ctx = spillway.tls_context(tls_daemon.certs["server-ca"] + ".crt")
    else:
        ctx = producer_context(tls_daemon, who)
    tag = unique("refused-%s-%s" % (reason, flavour))
    started = time.monotonic()
    err = attempt(flavour, tls_daemon.port, ctx, tag.encode())
    assert time.monotonic() - started < 5, "the refusal took %.1f s" % (time.monotonic() - started)
    assert str(err)
    # The daemon refused it for that reason (counted before it hangs up,
    # but the client may read the alert first: allow a moment).
    deadline = time.monotonic() + 5
    while ctl_stat(tls_daemon, key) != before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ctl_stat(tls_daemon, key) == before + 1, key
    # Nothing of it landed: a later record of a good client is delivered
    # (one shard: in order), the refused one is not.
    marker = unique("after-refusal").encode()
    with spillway.connect_tcp("localhost", tls_daemon.port, tls=producer_context(tls_daemon)) as c:
        c.push(Tier.SYNC, marker)
    assert wait_delivered(tls_daemon, marker, 1) == [marker]
    assert not any(line.startswith(tag.encode()) for line in tls_daemon.delivered_lines())


def test_the_daemons_certificate_must_verify(tls_daemon):
    c = tls_daemon.certs
    # Trusting only the client CA: the daemon's certificate does not chain.
    wrong_trust = spillway.tls_context(c["client-ca"] + ".crt", c["producer"] + ".crt", c["producer"] + ".key")
    with pytest.raises(spillway.ConnectFailed) as e:
        spillway.connect_tcp("localhost", tls_daemon.port, tls=wrong_trust, connect_timeout=5)
    assert "does not verify" in str(e.value)
    # A name the daemon's certificate does not carry.
    with pytest.raises(spillway.ConnectFailed) as e:
        spillway.connect_tcp(
            "127.0.0.1",
            tls_daemon.port,
            tls=producer_context(tls_daemon),
            server_hostname="elsewhere.example",
            connect_timeout=5,
        )
    assert "elsewhere.example" in str(e.value) or "does not verify" in str(e.value)

    async def main():
        with pytest.raises(spillway.ConnectFailed):
            await spillway.AsyncClient.connect_tcp("localhost", tls_daemon.port, tls=wrong_trust, connect_timeout=5)

    run(main())
    # server_hostname names the certificate's name when connecting by another.
    with spillway.connect_tcp(
        "127.0.0.1", tls_daemon.port, tls=producer_context(tls_daemon), server_hostname="localhost"
    ) as client:
        client.health()
