//! `Client` against a fake daemon: acks, nacks (retryable and closing),
//! local validation, malformed answers, timeouts and hang-ups.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{serve, Peer};
use spillway_client::{Client, Error, NackReason, Options, Tier};
use spillway_protocol::{encode_frame, encode_push, Bytes, BytesMut, Request, Response};

fn push(tier: Tier, payload: &'static [u8]) -> Request {
    Request::Push {
        tier,
        payload: Bytes::from_static(payload),
    }
}

#[test]
fn push_sends_the_exact_frame_and_returns_on_ack() {
    let fake = serve(|peer: &mut Peer| {
        let raw = peer.recv_raw(25);
        peer.send(Response::Ack);
        raw
    });
    let mut client = Client::connect(&fake.path).unwrap();
    client.push(Tier::Sync, b"hello").unwrap();
    let mut expected = BytesMut::new();
    encode_push(Tier::Sync, b"hello", &mut expected);
    assert_eq!(fake.join(), expected.to_vec());
}

#[test]
fn every_call_kind_round_trips() {
    let fake = serve(|peer: &mut Peer| {
        let mut seen = Vec::new();
        while let Some(r) = peer.recv() {
            peer.send(common::correct_answer(&r));
            seen.push(r);
        }
        seen
    });
    let mut client = Client::connect(&fake.path).unwrap();
    client.health().unwrap();
    client.push(Tier::Buffered, b"one").unwrap();
    assert_eq!(
        client
            .push_batch(Tier::Batched, &[&b"a"[..], b"bc", b"def"])
            .unwrap(),
        3
    );
    drop(client);
    let seen = fake.join();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], Request::HealthCheck);
    assert_eq!(seen[1], push(Tier::Buffered, b"one"));
    assert_eq!(seen[2].record_count(), 3);
}

#[test]
fn retryable_nack_keeps_the_connection_usable() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        peer.send(Response::Nack(NackReason::Overloaded));
        peer.recv().unwrap();
        peer.send(Response::Nack(NackReason::InternalError));
        peer.serve_all()
    });
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert_eq!(err.nack_reason(), Some(NackReason::Overloaded));
    assert!(err.is_retryable());
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert!(matches!(err, Error::Nack(NackReason::InternalError)));
    client.push(Tier::Sync, b"x").unwrap();
    drop(client);
    assert_eq!(fake.join(), 1);
}

#[test]
fn closing_nack_then_closed() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        peer.send(Response::Nack(NackReason::BadPayloadCrc));
        // Dropping the peer closes the connection, as the daemon does.
    });
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert_eq!(err.nack_reason(), Some(NackReason::BadPayloadCrc));
    assert!(!err.is_retryable());
    fake.join();
    let err = client.push(Tier::Sync, b"again").unwrap_err();
    assert!(matches!(err, Error::Closed), "{err:?}");
}

#[test]
fn nack_sent_before_the_payload_is_read_is_reported() {
    // The daemon refuses an oversized frame from its header and hangs up
    // while the client is still writing the payload.
    let fake = serve(|peer: &mut Peer| {
        peer.recv_raw(16);
        peer.send(Response::Nack(NackReason::PayloadTooLarge));
    });
    let mut client = Client::connect(&fake.path).unwrap();
    client.set_timeout(Some(Duration::from_secs(10))).unwrap();
    let big = vec![7u8; 8 * 1024 * 1024];
    let err = client.push(Tier::Sync, &big).unwrap_err();
    assert_eq!(
        err.nack_reason(),
        Some(NackReason::PayloadTooLarge),
        "{err:?}"
    );
    fake.join();
}

#[test]
fn hang_up_without_answer_is_closed() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
    });
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert!(matches!(err, Error::Closed), "{err:?}");
    fake.join();
}

#[test]
fn invalid_requests_are_refused_before_sending() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.push(Tier::Sync, b"").unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("empty payload")),
        "{err}"
    );
    let none: [&[u8]; 0] = [];
    let err = client.push_batch(Tier::Sync, &none).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("no records")),
        "{err}"
    );
    let err = client
        .push_batch(Tier::Sync, &[&b"a"[..], b""])
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.starts_with("record 2 of 2 is empty")),
        "{err}"
    );
    let huge = vec![0u8; 16 * 1024 * 1024 + 1];
    let err = client.push(Tier::Sync, &huge).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("16777217")),
        "{err}"
    );
    drop(client);
    assert_eq!(fake.join(), 0, "nothing reached the daemon");
}

#[test]
fn the_daemons_lower_payload_cap_is_checked_before_sending() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let options = Options {
        payload_bytes_max: 1024,
        ..Options::default()
    };
    let mut client = Client::connect_with(&fake.path, options).unwrap();
    let err = client.push(Tier::Sync, &[7u8; 1025]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("1025") && m.contains("1024")),
        "{err}"
    );
    // 4 + 2 × (4 + 510) = 1032 > 1024.
    let two = [vec![1u8; 510], vec![2u8; 510]];
    let err = client.push_batch(Tier::Sync, &two).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidRequest(m) if m.contains("batch payload of 1032")),
        "{err}"
    );
    drop(client);
    assert_eq!(fake.join(), 0, "nothing reached the daemon");
}

#[test]
fn a_daemon_that_never_answers_times_out() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        std::thread::sleep(Duration::from_millis(800));
    });
    let options = Options {
        timeout: Some(Duration::from_millis(200)),
        ..Options::default()
    };
    let mut client = Client::connect_with(&fake.path, options).unwrap();
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(!err.is_retryable() && !err.is_fatal_nack());
    fake.join();
}

#[test]
fn wrong_kind_of_answer_is_unexpected() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        peer.send(Response::Ack);
        peer.recv().unwrap();
        peer.send(Response::AckBatch { count: 2 });
        peer.recv().unwrap();
        peer.send(Response::HealthCheckResponse);
    });
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.health().unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnexpectedResponse {
                expected: "HealthCheckResponse",
                got: Response::Ack
            }
        ),
        "{err:?}"
    );
    let err = client
        .push_batch(Tier::Sync, &[b"a", b"b", b"c"])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::UnexpectedResponse {
                got: Response::AckBatch { count: 2 },
                ..
            }
        ),
        "{err:?}"
    );
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert!(
        err.to_string()
            .contains("HealthCheckResponse where Ack was expected"),
        "{err}"
    );
    fake.join();
}

#[test]
fn malformed_answer_is_a_protocol_error() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        let mut out = BytesMut::new();
        encode_frame(0x03, 0x01, 0, &[0x0b], &mut out); // unknown nack reason
        peer.send_raw(&out);
    });
    let mut client = Client::connect(&fake.path).unwrap();
    let err = client.push(Tier::Sync, b"x").unwrap_err();
    assert!(matches!(err, Error::Protocol(_)), "{err:?}");
    assert!(
        err.to_string().contains("unknown reason byte 0x0b"),
        "{err}"
    );
    fake.join();
}

#[test]
fn connect_failure_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nobody-home.sock");
    let err = Client::connect(&path).unwrap_err();
    assert!(matches!(err, Error::Connect { .. }));
    assert!(err.to_string().contains("nobody-home.sock"), "{err}");
}

#[test]
fn late_answer_after_a_timeout_is_not_mistaken_for_the_next_one() {
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let fake = serve(move |peer: &mut Peer| {
        peer.recv().unwrap();
        wait.recv().unwrap(); // hold the answer until the client has timed out
        peer.send(Response::Nack(NackReason::Overloaded)); // the late answer
        peer.recv().unwrap();
        peer.send(Response::Ack);
    });
    let mut client = Client::connect(&fake.path).unwrap();
    client
        .set_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let err = client.push(Tier::Sync, b"slow").unwrap_err();
    let Error::Io(io) = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(
            io.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{io:?}"
    );
    go.send(()).unwrap();
    client.set_timeout(Some(Duration::from_secs(10))).unwrap();
    client.push(Tier::Sync, b"next").unwrap();
    fake.join();
}

#[test]
fn into_stream_returns_the_socket() {
    let fake = serve(|peer: &mut Peer| {
        peer.send_raw(b"hi");
    });
    let client = Client::connect(&fake.path).unwrap();
    let mut stream = client.into_stream().expect("a Unix socket");
    let mut got = [0u8; 2];
    stream.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hi");
    fake.join();
}
