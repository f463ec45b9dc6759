"""Against the real daemon ($SPILLWAY_BIN, started by conftest.py)."""

import asyncio
import os
import time
import uuid

import pytest

import spillway
from spillway import Tier

from conftest import DAEMON_PAYLOAD_MAX

TIERS = [Tier.SYNC, Tier.BATCHED, Tier.BUFFERED]


def connect(daemon, **options):
    options.setdefault("timeout", 10)
    options.setdefault("payload_bytes_max", DAEMON_PAYLOAD_MAX)
    return spillway.connect(daemon.socket_path, **options)


def unique(tag):
    return "py-%s-%s" % (tag, uuid.uuid4().hex[:12])


def wait_delivered(daemon, prefix, count, timeout=15.0):
    """The delivered records starting with ``prefix``, once ``count`` are there."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in daemon.delivered_lines() if line.startswith(prefix)]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


class SpySocket:
    """Wraps a client's socket to count the bytes it writes."""

    def __init__(self, sock):
        self._sock = sock
        self.sent = 0

    def sendall(self, data):
        self.sent += len(data)
        return self._sock.sendall(data)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def spy(client):
    s = SpySocket(client._sock)
    client._sock = s
    return s


# -- blocking client ----------------------------------------------------------


@pytest.mark.parametrize("tier", TIERS, ids=[t.name.lower() for t in TIERS])
def test_push_at_each_tier(daemon, tier):
    prefix = unique("tier-" + tier.name.lower())
    with connect(daemon) as c:
        assert c.push(tier, prefix.encode()) is None
    assert wait_delivered(daemon, prefix.encode(), 1) == [prefix.encode()]


def test_tier_by_int_and_name(daemon):
    with connect(daemon) as c:
        c.push(1, b"py-tier-int")
        c.push("buffered", b"py-tier-name")
        with pytest.raises(spillway.RecordRejected):
            c.push(4, b"x")
        with pytest.raises(spillway.RecordRejected):
            c.push("fast", b"x")
        c.health()


def test_health(daemon):
    with connect(daemon) as c:
        assert c.health() is None
        assert c.health() is None


def test_push_batch_of_one(daemon):
    prefix = unique("batch1")
    with connect(daemon) as c:
        assert c.push_batch(Tier.SYNC, [prefix.encode()]) == 1
    assert wait_delivered(daemon, prefix.encode(), 1) == [prefix.encode()]


@pytest.mark.parametrize("tier", TIERS, ids=[t.name.lower() for t in TIERS])
def test_push_batch_of_1000(daemon, tier):
    prefix = unique("batch1000")
    # mixed sizes exercise the general encoder, not only the equal-size one
    records = [("%s-%04d" % (prefix, i) + "x" * (i % 7)).encode() for i in range(1000)]
    with connect(daemon) as c:
        assert c.push_batch(tier, records) == 1000
        assert c.push_batch(tier, [b"%s-same-%04d" % (prefix.encode(), i) for i in range(1000)]) == 1000
        assert c.push_batch(tier, (bytearray(b"%s-ba" % prefix.encode()), memoryview(b"%s-mv" % prefix.encode()))) == 2
    got = wait_delivered(daemon, prefix.encode(), 2002)
    assert got[:1000] == records
    assert len(got) == 2002


def test_pipeline_5000_pushes_all_acked_in_order(daemon):
    prefix = unique("pipe")
    records = [("%s-%05d" % (prefix, i)).encode() for i in range(5000)]
    with connect(daemon) as c:
        p = c.pipeline(window=64)
        for r in records:
            p.push(Tier.SYNC, r)
            assert p.outstanding <= 64
        outcomes = p.flush()
        p.close()
        assert outcomes == [1] * 5000
        c.health()  # the client is usable again after the pipeline
    assert wait_delivered(daemon, prefix.encode(), 5000) == records


def test_pipeline_matches_mixed_answers_in_order(daemon):
    """Pushes, batches of distinct sizes and health checks interleaved: any
    mismatch in answer order would show as a wrong count or type."""
    prefix = unique("mixed")
    expected = []
    sent = []
    with connect(daemon) as c:
        with c.pipeline(window=16) as p:
            for i in range(300):
                if i % 10 == 3:
                    batch = [("%s-%03d-%d" % (prefix, i, j)).encode() for j in range(i % 13 + 2)]
                    p.push_batch(Tier.BUFFERED, batch)
                    expected.append(len(batch))
                    sent.extend(batch)
                elif i % 10 == 7:
                    p.health()
                    expected.append(0)
                else:
                    r = ("%s-%03d" % (prefix, i)).encode()
                    p.push(Tier.BATCHED, r)
                    expected.append(1)
                    sent.append(r)
            assert p.flush() == expected
            # a second round on the same pipeline
            p.push(Tier.SYNC, ("%s-last" % prefix).encode())
            sent.append(("%s-last" % prefix).encode())
            assert p.flush() == [1]
    assert wait_delivered(daemon, prefix.encode(), len(sent)) == sent


def test_records_arrive_in_order_sent(daemon):
    prefix = unique("order")
    records = [("%s-%04d" % (prefix, i)).encode() for i in range(600)]
    with connect(daemon) as c:
        for r in records[:100]:
            c.push(Tier.SYNC, r)
        c.push_batch(Tier.BUFFERED, records[100:300])
        with c.pipeline(window=64) as p:
            for r in records[300:]:
                p.push(Tier.BUFFERED, r)
    assert wait_delivered(daemon, prefix.encode(), 600) == records


def test_local_refusals_send_nothing_and_keep_the_connection(daemon):
    prefix = unique("refuse")
    with connect(daemon) as c:
        s = spy(c)
        with pytest.raises(spillway.RecordRejected) as e:
            c.push(Tier.SYNC, b"")
        assert e.value.index == 0 and "empty" in str(e.value)
        assert isinstance(e.value, ValueError)
        with pytest.raises(spillway.RecordRejected) as e:
            c.push(Tier.SYNC, b"x" * (DAEMON_PAYLOAD_MAX + 1))
        assert e.value.limit == DAEMON_PAYLOAD_MAX
        assert "1048577" in str(e.value) and "1048576" in str(e.value)
        with pytest.raises(spillway.RecordRejected):
            c.push_batch(Tier.SYNC, [])
        with pytest.raises(spillway.RecordRejected) as e:
            c.push_batch(Tier.SYNC, [b"a", b"b", b"", b"d"])
        assert e.value.index == 2 and "record 2" in str(e.value)
        assert s.sent == 0, "a refused request wrote bytes"
        # the daemon would have closed the connection had any of them arrived
        c.push(Tier.SYNC, prefix.encode())
        c.health()
        assert s.sent > 0
        # the largest record the cap allows is accepted by the daemon
        c.push(Tier.BUFFERED, (prefix + "-max-").encode().ljust(DAEMON_PAYLOAD_MAX, b"m"))
    assert wait_delivered(daemon, prefix.encode(), 2)[0] == prefix.encode()


def test_push_batch_over_the_cap_is_refused_locally(daemon):
    with connect(daemon) as c:
        s = spy(c)
        # 4 + 2 * (4 + 524284) = 1048580 > 1048576
        records = [b"a" * 524284, b"b" * 524284]
        with pytest.raises(spillway.RecordRejected) as e:
            c.push_batch(Tier.SYNC, records)
        assert e.value.index == 1 and e.value.limit == DAEMON_PAYLOAD_MAX
        assert "1048576" in str(e.value) and "record 1" in str(e.value)
        # many small records over the cap: the index is the first that does not fit
        small = [b"r" * 1000] * 2000
        with pytest.raises(spillway.RecordRejected) as e:
            c.push_batch(Tier.SYNC, small)
        assert e.value.index == (DAEMON_PAYLOAD_MAX - 4) // 1004
        assert s.sent == 0
        # exactly at the cap is fine: 4 + 2 * (4 + 524282) = 1048576
        assert c.push_batch(Tier.BUFFERED, [b"py-cap-" + b"a" * 524275, b"py-cap-" + b"b" * 524275]) == 2


def test_pipeline_local_refusal_keeps_the_pipeline(daemon):
    with connect(daemon) as c:
        with c.pipeline(window=8) as p:
            p.push(Tier.SYNC, b"py-pipe-refuse-1")
            with pytest.raises(spillway.RecordRejected):
                p.push(Tier.SYNC, b"")
            with pytest.raises(spillway.RecordRejected):
                p.push_batch(Tier.SYNC, [b"x" * DAEMON_PAYLOAD_MAX])
            p.push(Tier.SYNC, b"py-pipe-refuse-2")
            assert p.flush() == [1, 1]


def test_the_client_refuses_calls_while_a_pipeline_is_open(daemon):
    with connect(daemon) as c:
        p = c.pipeline()
        with pytest.raises(RuntimeError):
            c.push(Tier.SYNC, b"x")
        p.close()
        c.push(Tier.SYNC, b"py-after-pipeline")


def test_an_abandoned_pipeline_does_not_shift_later_answers(daemon):
    with connect(daemon) as c:
        p = c.pipeline(window=4)
        for i in range(10):
            p.push(Tier.SYNC, b"py-abandoned-%d" % i)
        p.close()  # answers for what was written are still owed
        assert c.push_batch(Tier.SYNC, [b"py-after-abandon-a", b"py-after-abandon-b"]) == 2
        c.health()


def test_a_daemon_nack_that_closes_is_reported_by_the_pipeline(daemon):
    """payload_bytes_max above the daemon's cap: the daemon nacks
    payload_too_large and hangs up; later requests get ConnectionClosed."""
    with connect(daemon, payload_bytes_max=spillway.PAYLOAD_BYTES_HARD_MAX) as c:
        p = c.pipeline(window=8)
        p.push(Tier.SYNC, b"py-before-too-large")
        try:
            # the big frame is written at once (over 256 KiB buffered): the
            # daemon nacks it from its header and hangs up mid-write
            p.push(Tier.SYNC, b"x" * (DAEMON_PAYLOAD_MAX + 1))
            p.push(Tier.SYNC, b"py-after-too-large")
        except spillway.ConnectionClosed as e:
            assert "payload_too_large" in str(e)
        outcomes = p.flush(raise_first=False)
        assert outcomes[0] == 1
        assert isinstance(outcomes[1], spillway.NackError)
        assert outcomes[1].reason is spillway.NackReason.PAYLOAD_TOO_LARGE
        assert not outcomes[1].retryable
        assert outcomes[1].request_index == 1
        assert all(isinstance(o, spillway.ConnectionClosed) for o in outcomes[2:])
        with pytest.raises(spillway.ConnectionClosed):
            p.push(Tier.SYNC, b"y")


def test_serial_nack_payload_too_large_from_the_daemon(daemon):
    with connect(daemon, payload_bytes_max=spillway.PAYLOAD_BYTES_HARD_MAX) as c:
        with pytest.raises((spillway.NackError, spillway.ConnectionClosed)) as e:
            c.push(Tier.SYNC, b"x" * (DAEMON_PAYLOAD_MAX + 1))
        if isinstance(e.value, spillway.NackError):
            assert e.value.reason is spillway.NackReason.PAYLOAD_TOO_LARGE
            assert "payload_too_large (0x04" in str(e.value)
        with pytest.raises(spillway.ConnectionClosed):
            c.health()


def test_connect_to_a_missing_socket(tmp_path):
    with pytest.raises(spillway.ConnectFailed):
        spillway.connect(str(tmp_path / "nothing.sock"))


def test_bad_options():
    with pytest.raises(ValueError):
        spillway.connect("/nonexistent", timeout=0)
    with pytest.raises(ValueError):
        spillway.connect("/nonexistent", timeout=None)
    with pytest.raises(ValueError):
        spillway.connect("/nonexistent", payload_bytes_max=spillway.PAYLOAD_BYTES_HARD_MAX + 1)


# -- asyncio client -------------------------------------------------------------


def run(coro):
    return asyncio.run(coro)


async def aconnect(daemon, **options):
    options.setdefault("timeout", 10)
    options.setdefault("payload_bytes_max", DAEMON_PAYLOAD_MAX)
    return await spillway.AsyncClient.connect(daemon.socket_path, **options)


def test_async_push_each_tier_batch_and_health(daemon):
    prefix = unique("async")

    async def main():
        async with await aconnect(daemon) as c:
            await c.health()
            for t in TIERS:
                assert await c.push(t, ("%s-%d" % (prefix, int(t))).encode()) is None
            assert await c.push_batch(Tier.SYNC, [("%s-b1" % prefix).encode()]) == 1
            batch = [("%s-k%04d" % (prefix, i)).encode() for i in range(1000)]
            assert await c.push_batch(Tier.BUFFERED, batch) == 1000

    run(main())
    got = wait_delivered(daemon, prefix.encode(), 1004)
    assert got[:4] == [("%s-%d" % (prefix, i)).encode() for i in (1, 2, 3)] + [("%s-b1" % prefix).encode()]
    assert len(got) == 1004


def test_async_gather_5000_pushes_window_64(daemon):
    prefix = unique("agather")
    records = [("%s-%05d" % (prefix, i)).encode() for i in range(5000)]

    async def main():
        async with await aconnect(daemon, window=64) as c:
            results = await asyncio.gather(*(c.push(Tier.SYNC, r) for r in records))
            assert results == [None] * 5000
            assert len(c._pending) == 0

    run(main())
    assert wait_delivered(daemon, prefix.encode(), 5000) == records


def test_async_pipeline_in_order(daemon):
    prefix = unique("apipe")
    records = [("%s-%05d" % (prefix, i)).encode() for i in range(2000)]

    async def main():
        async with await aconnect(daemon) as c:
            p = c.pipeline(window=64)
            expected = []
            for i, r in enumerate(records):
                await p.push(Tier.BATCHED, r)
                expected.append(1)
                if i % 500 == 0:
                    await p.health()
                    expected.append(0)
                    # "/" never occurs in the random hex of the prefix, so it marks
                    # the batch records without colliding with a name.
                    await p.push_batch(Tier.BUFFERED, [r + b"/b0", r + b"/b1", r + b"/b2"])
                    expected.append(3)
                assert p.outstanding <= 64
            assert await p.flush() == expected

    run(main())
    got = wait_delivered(daemon, prefix.encode(), 2000 + 12)
    assert [line for line in got if b"/b" not in line] == records


def test_async_local_refusals(daemon):
    async def main():
        async with await aconnect(daemon) as c:
            with pytest.raises(spillway.RecordRejected):
                await c.push(Tier.SYNC, b"")
            with pytest.raises(spillway.RecordRejected):
                await c.push(Tier.SYNC, b"x" * (DAEMON_PAYLOAD_MAX + 1))
            with pytest.raises(spillway.RecordRejected):
                await c.push_batch(Tier.SYNC, [])
            with pytest.raises(spillway.RecordRejected) as e:
                await c.push_batch(Tier.SYNC, [b"a" * 524284, b"b" * 524284])
            assert e.value.index == 1
            await c.push(Tier.SYNC, b"py-async-after-refusal")
            await c.health()

    run(main())


def test_the_installed_package_is_tested():
    """run-tests.sh installs the package into a venv and sets
    SPILLWAY_PY_INSTALLED=1: the import must come from there."""
    if os.environ.get("SPILLWAY_PY_INSTALLED") != "1":
        pytest.skip("not run by run-tests.sh")
    source = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", "src"))
    assert not os.path.realpath(spillway.__file__).startswith(source + os.sep), spillway.__file__
    assert "site-packages" in spillway.__file__
    # From the wheel (run-tests.sh builds one and installs it), pure Python.
    from importlib import metadata

    wheel = metadata.distribution("spillway-client").read_text("WHEEL") or ""
    assert "Root-Is-Purelib: true" in wheel, wheel
