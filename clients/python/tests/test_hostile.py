"""Broken and hostile daemons (fake servers on a Unix socket in a temp
folder): the client must fail with the right error, never hang."""

import asyncio
import time

import pytest

import spillway
from spillway import Tier

from conftest import (
    ACK,
    HEALTH_OK,
    ack_batch_frame,
    nack_frame,
    read_frame,
)

FLAVOURS = ["blocking", "asyncio"]


def silent(conn, stop):
    """Accepts, reads, never answers."""
    conn.settimeout(0.1)
    while not stop.is_set():
        try:
            if not conn.recv(65536):
                return
        except OSError:
            continue


def half_frame(conn, stop):
    read_frame(conn)
    conn.sendall(ACK[:10])


def garbage(conn, stop):
    read_frame(conn)
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    stop.wait(5)


def version_mismatch(conn, stop):
    read_frame(conn)
    conn.sendall(nack_frame(0x02))


def overloaded_then_ack(conn, stop):
    """Overloaded for the first two requests, then the right answers."""
    n = 0
    while True:
        frame = read_frame(conn)
        n += 1
        if n <= 2:
            conn.sendall(nack_frame(0x0A))
        elif frame[5] == 0x04:
            conn.sendall(HEALTH_OK)
        elif frame[5] == 0x06:
            conn.sendall(ack_batch_frame(int.from_bytes(frame[16:20], "little")))
        else:
            conn.sendall(ACK)


def wrong_count(conn, stop):
    read_frame(conn)
    conn.sendall(ack_batch_frame(2))
    stop.wait(5)


def wrong_type(conn, stop):
    read_frame(conn)
    conn.sendall(ACK)  # an Ack for a HealthCheck
    stop.wait(5)


def closes_at_once(conn, stop):
    read_frame(conn)


def call(flavour, path, method, *args, timeout=5.0):
    """Runs one client call against ``path``; returns (result, error, seconds)."""
    start = time.monotonic()
    if flavour == "blocking":
        with spillway.connect(path, timeout=timeout) as c:
            try:
                return getattr(c, method)(*args), None, time.monotonic() - start
            except spillway.SpillwayError as e:
                return None, e, time.monotonic() - start

    async def main():
        c = await spillway.AsyncClient.connect(path, timeout=timeout)
        try:
            return await getattr(c, method)(*args), None, time.monotonic() - start
        except spillway.SpillwayError as e:
            return None, e, time.monotonic() - start
        finally:
            await c.close()

    return asyncio.run(main())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_daemon_that_never_answers_times_out(flavour, fake):
    server = fake(silent)
    _, err, seconds = call(flavour, server.path, "push", Tier.SYNC, b"hello", timeout=0.5)
    assert isinstance(err, spillway.SpillwayTimeout), err
    assert isinstance(err, TimeoutError)
    assert "0.5 s" in str(err)
    assert 0.4 <= seconds < 3, seconds


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_silent_daemon_times_out_a_pipeline(flavour, fake):
    server = fake(silent)
    start = time.monotonic()
    if flavour == "blocking":
        with spillway.connect(server.path, timeout=0.5) as c:
            p = c.pipeline(window=4)
            for _ in range(4):
                p.push(Tier.SYNC, b"x")
            with pytest.raises(spillway.SpillwayTimeout):
                p.push(Tier.SYNC, b"x")  # 4 outstanding: the fifth has to wait for room
            outcomes = p.flush(raise_first=False)
            assert isinstance(outcomes[0], spillway.SpillwayTimeout)
            assert all(isinstance(o, spillway.ConnectionClosed) for o in outcomes[1:])
            assert len(outcomes) == 4
    else:

        async def main():
            c = await spillway.AsyncClient.connect(server.path, timeout=0.5)
            try:
                results = await asyncio.gather(
                    *(c.push(Tier.SYNC, b"x") for _ in range(10)), return_exceptions=True
                )
                assert isinstance(results[0], spillway.SpillwayTimeout)
                assert all(isinstance(r, spillway.SpillwayError) for r in results)
            finally:
                await c.close()

        asyncio.run(main())
    assert time.monotonic() - start < 3


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_daemon_closing_mid_frame_is_a_protocol_error(flavour, fake):
    server = fake(half_frame)
    _, err, _ = call(flavour, server.path, "push", Tier.SYNC, b"hello")
    assert isinstance(err, spillway.ProtocolError), err
    assert "mid-frame" in str(err)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_daemon_closing_without_answering_is_connection_closed(flavour, fake):
    server = fake(closes_at_once)
    _, err, _ = call(flavour, server.path, "health")
    assert isinstance(err, spillway.ConnectionClosed), err


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_garbage_is_a_protocol_error(flavour, fake):
    server = fake(garbage)
    _, err, seconds = call(flavour, server.path, "push", Tier.SYNC, b"hello")
    assert isinstance(err, spillway.ProtocolError), err
    assert "magic" in str(err)
    assert seconds < 3


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_version_mismatch_is_a_fatal_nack(flavour, fake):
    server = fake(version_mismatch)
    _, err, _ = call(flavour, server.path, "push", Tier.SYNC, b"hello")
    assert isinstance(err, spillway.NackError), err
    assert err.reason is spillway.NackReason.VERSION_MISMATCH
    assert err.reason_name == "version_mismatch" and err.byte == 0x02
    assert err.retryable is False
    assert err.daemon_version == 1
    assert "version_mismatch (0x02" in str(err) and "not retryable" in str(err)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_overloaded_is_retryable_on_the_same_connection(flavour, fake):
    server = fake(overloaded_then_ack)

    def check(err):
        assert isinstance(err, spillway.NackError), err
        assert err.reason is spillway.NackReason.OVERLOADED
        assert err.byte == 0x0A and err.retryable is True
        assert str(err) == (
            "daemon nacked: overloaded (0x0a, retryable: back off and resend on the same connection)"
        )

    if flavour == "blocking":
        with spillway.connect(server.path, timeout=5) as c:
            with pytest.raises(spillway.NackError) as e:
                c.push(Tier.SYNC, b"hello")
            check(e.value)
            with pytest.raises(spillway.NackError) as e:
                c.push_batch(Tier.SYNC, [b"a", b"b"])
            check(e.value)
            assert not c.closed
            c.push(Tier.SYNC, b"hello")  # the resend succeeds
            assert c.push_batch(Tier.SYNC, [b"a", b"b"]) == 2
            c.health()
    else:

        async def main():
            c = await spillway.AsyncClient.connect(server.path, timeout=5)
            try:
                with pytest.raises(spillway.NackError) as e:
                    await c.push(Tier.SYNC, b"hello")
                check(e.value)
                with pytest.raises(spillway.NackError) as e:
                    await c.health()
                check(e.value)
                assert not c.closed
                await c.push(Tier.SYNC, b"hello")
                assert await c.push_batch(Tier.SYNC, [b"a", b"b", b"c"]) == 3
                await c.health()
            finally:
                await c.close()

        asyncio.run(main())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_overloaded_in_a_pipeline_is_a_per_request_outcome(flavour, fake):
    server = fake(overloaded_then_ack)
    if flavour == "blocking":
        with spillway.connect(server.path, timeout=5) as c:
            with c.pipeline(window=4) as p:
                for i in range(6):
                    p.push(Tier.SYNC, b"r%d" % i)
                p.push_batch(Tier.BUFFERED, [b"a", b"b"])
                p.health()
                outcomes = p.flush(raise_first=False)
                assert [type(o) for o in outcomes[:2]] == [spillway.NackError] * 2
                assert outcomes[1].request_index == 1
                assert outcomes[2:] == [1, 1, 1, 1, 2, 0]
                p.push(Tier.SYNC, b"again")
                assert p.flush() == [1]
    else:

        async def main():
            c = await spillway.AsyncClient.connect(server.path, timeout=5)
            try:
                p = c.pipeline(window=4)
                for i in range(6):
                    await p.push(Tier.SYNC, b"r%d" % i)
                with pytest.raises(spillway.NackError) as e:
                    await p.flush()
                assert e.value.retryable and e.value.request_index == 0
                await p.push(Tier.SYNC, b"again")
                assert await p.flush() == [1]
            finally:
                await c.close()

        asyncio.run(main())


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_wrong_ack_batch_count_is_a_protocol_error(flavour, fake):
    server = fake(wrong_count)
    _, err, _ = call(flavour, server.path, "push_batch", Tier.SYNC, [b"a", b"b", b"c"])
    assert isinstance(err, spillway.ProtocolError), err
    assert "3 records" in str(err) and "2" in str(err)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_an_unexpected_response_type_is_a_protocol_error(flavour, fake):
    server = fake(wrong_type)
    _, err, _ = call(flavour, server.path, "health")
    assert isinstance(err, spillway.ProtocolError), err
    assert "HealthCheckResponse" in str(err)


def test_after_a_fatal_error_the_client_says_why(fake):
    server = fake(version_mismatch)
    with spillway.connect(server.path, timeout=5) as c:
        with pytest.raises(spillway.NackError):
            c.push(Tier.SYNC, b"hello")
        with pytest.raises(spillway.ConnectionClosed) as e:
            c.push(Tier.SYNC, b"hello")
        assert "version_mismatch" in str(e.value)
