"""Every conformance vector of protocol/conformance/vectors.json: the
encoder, the decoder, the client's decode path (through a fake daemon that
answers with the vector's frame) and the real daemon."""

import asyncio
import socket
from collections import Counter

import pytest

import spillway
from spillway import protocol

from conftest import load_vectors, read_frame, vectors_of

REQUESTS = vectors_of("request")
RESPONSES = vectors_of("response")
REJECTED_REQUESTS = vectors_of("rejected_request")
REJECTED_RESPONSES = vectors_of("rejected_response")


def ids(vectors):
    return [v["name"] for v in vectors]


def test_the_vector_file_is_the_one_described():
    data = load_vectors()
    assert data["format"] == 1
    assert data["protocol_version"] == protocol.VERSION
    assert data["payload_bytes_hard_max"] == protocol.PAYLOAD_BYTES_HARD_MAX
    kinds = Counter(v["kind"] for v in data["vectors"])
    assert kinds == {"request": 10, "response": 15, "rejected_request": 28, "rejected_response": 13}
    # every vector is run by one of the parametrized tests below
    assert len(REQUESTS) + len(RESPONSES) + len(REJECTED_REQUESTS) + len(REJECTED_RESPONSES) == 66
    assert len({v["name"] for v in data["vectors"]}) == 66


def encode(request):
    kind = request["type"]
    if kind == "push":
        return protocol.encode_push(request["tier"], bytes.fromhex(request["payload"]))
    if kind == "push_batch":
        return protocol.encode_push_batch(request["tier"], [bytes.fromhex(r) for r in request["records"]])
    assert kind == "health_check"
    return protocol.encode_health_check()


@pytest.mark.parametrize("vector", REQUESTS, ids=ids(REQUESTS))
def test_request_vector_encodes_to_frame(vector):
    assert encode(vector["request"]).hex() == vector["frame"]


@pytest.mark.parametrize("vector", REQUESTS, ids=ids(REQUESTS))
def test_request_vector_encodes_the_same_with_tier_enum(vector):
    request = dict(vector["request"])
    if "tier" in request:
        request["tier"] = spillway.Tier[request["tier"].upper()]
    assert encode(request).hex() == vector["frame"]


def check_response(decoded, expected):
    assert decoded.type_name == expected["type"]
    if expected["type"] == "ack_batch":
        assert decoded.count == expected["count"]
    else:
        assert decoded.count is None
    if expected["type"] == "nack":
        reason = decoded.reason
        assert reason.wire_name == expected["reason"]
        assert int(reason) == expected["reason_byte"]
        assert reason.retryable == expected["retryable"]
        assert reason.closes_connection == expected["closes_connection"]
        assert decoded.daemon_version == expected.get("daemon_version")
        err = spillway.NackError(reason, decoded.daemon_version)
        assert err.reason_name == expected["reason"]
        assert err.byte == expected["reason_byte"]
        assert err.retryable == expected["retryable"]
        assert ("0x%02x" % expected["reason_byte"]) in str(err)
        assert expected["reason"] in str(err)
    else:
        assert decoded.reason is None


@pytest.mark.parametrize("vector", RESPONSES, ids=ids(RESPONSES))
def test_response_vector_decodes(vector):
    frame = bytes.fromhex(vector["frame"])
    decoded, end = protocol.decode_response(frame)
    assert end == len(frame)
    check_response(decoded, vector["response"])
    # byte by byte: a prefix is "need more", never an error or a response
    for cut in range(len(frame)):
        assert protocol.decode_response(frame[:cut]) is None
    # at an offset, followed by the next frame
    decoded2, end2 = protocol.decode_response(b"xx" + frame + frame, 2)
    assert end2 == 2 + len(frame)
    assert decoded2 == decoded


@pytest.mark.parametrize("vector", REJECTED_RESPONSES, ids=ids(REJECTED_RESPONSES))
def test_rejected_response_vector_is_a_protocol_error(vector):
    frame = bytes.fromhex(vector["frame"])
    with pytest.raises(spillway.ProtocolError):
        protocol.decode_response(frame)


@pytest.mark.parametrize("vector", REJECTED_REQUESTS, ids=ids(REJECTED_REQUESTS))
def test_rejected_request_vector_is_never_produced_by_the_encoder(vector):
    assert vector["frame"] not in {v["frame"] for v in REQUESTS}


# -- through the client, against a fake daemon answering the vector's frame --


def answering(frame):
    def handler(conn, stop):
        read_frame(conn)
        conn.sendall(frame)
        stop.wait(5)

    return handler


def request_for(expected):
    """A client call whose answer may legitimately be ``expected``."""
    kind = expected["type"]
    if kind == "health_check_response":
        return "health", ()
    if kind == "ack_batch":
        return "push_batch", (spillway.Tier.SYNC, [b"r"] * expected["count"])
    return "push", (spillway.Tier.SYNC, b"hello")


@pytest.mark.parametrize("vector", RESPONSES, ids=ids(RESPONSES))
@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_response_vector_through_the_client(vector, flavour, fake):
    server = fake(answering(bytes.fromhex(vector["frame"])))
    expected = vector["response"]
    method, args = request_for(expected)

    def check(result, error):
        if expected["type"] == "nack":
            assert isinstance(error, spillway.NackError), error
            assert error.reason_name == expected["reason"]
            assert error.byte == expected["reason_byte"]
            assert error.retryable == expected["retryable"]
        else:
            assert error is None, error
            if expected["type"] == "ack_batch":
                assert result == expected["count"]

    if flavour == "blocking":
        with spillway.connect(server.path, timeout=5) as c:
            try:
                check(getattr(c, method)(*args), None)
            except spillway.SpillwayError as e:
                check(None, e)
    else:

        async def main():
            c = await spillway.AsyncClient.connect(server.path, timeout=5)
            try:
                check(await getattr(c, method)(*args), None)
            except spillway.SpillwayError as e:
                check(None, e)
            finally:
                await c.close()

        asyncio.run(main())


@pytest.mark.parametrize("vector", REJECTED_RESPONSES, ids=ids(REJECTED_RESPONSES))
@pytest.mark.parametrize("flavour", ["blocking", "asyncio"])
def test_rejected_response_vector_through_the_client(vector, flavour, fake):
    server = fake(answering(bytes.fromhex(vector["frame"])))
    if flavour == "blocking":
        with spillway.connect(server.path, timeout=5) as c:
            with pytest.raises(spillway.ProtocolError):
                c.push(spillway.Tier.SYNC, b"hello")
            assert c.closed
    else:

        async def main():
            c = await spillway.AsyncClient.connect(server.path, timeout=5)
            try:
                with pytest.raises(spillway.ProtocolError):
                    await c.push(spillway.Tier.SYNC, b"hello")
                assert c.closed
            finally:
                await c.close()

        asyncio.run(main())


# -- raw frames against the real daemon -------------------------------------


def raw_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    return s


def read_until_eof(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk


@pytest.mark.parametrize("vector", REQUESTS, ids=ids(REQUESTS))
def test_request_vector_frame_is_answered_by_the_daemon(vector, daemon):
    answer = bytes.fromhex(vector["answer"])
    with raw_connect(daemon.socket_path) as s:
        s.sendall(bytes.fromhex(vector["frame"]))
        got = b""
        while len(got) < len(answer):
            chunk = s.recv(len(answer) - len(got))
            assert chunk, "the daemon closed the connection after %r" % got
            got += chunk
        assert got.hex() == vector["answer"]


@pytest.mark.parametrize("vector", REJECTED_REQUESTS, ids=ids(REJECTED_REQUESTS))
def test_rejected_request_vector_is_nacked_and_closed_by_the_daemon(vector, daemon):
    assert vector["closes_connection"] is True
    with raw_connect(daemon.socket_path) as s:
        try:
            s.sendall(bytes.fromhex(vector["frame"]))
        except BrokenPipeError:
            pass  # the daemon may hang up before the last bytes; its answer is still there
        got, eof = read_until_eof(s)
    assert eof
    assert got.hex() == vector["answer"], vector["description"]
    decoded, end = protocol.decode_response(got)
    assert end == len(got)
    assert decoded.reason.wire_name == vector["nack"]["reason"]
    assert int(decoded.reason) == vector["nack"]["reason_byte"]
