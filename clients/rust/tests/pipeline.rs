//! `Pipeline` against a fake daemon: ordering, nacks mid-stream, the window
//! and flush triggers, deadlock freedom, and hand-back to the `Client`.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{correct_answer, serve, Peer};
use spillway_client::{Client, Error, NackReason, Reply, Tier};
use spillway_protocol::{Request, Response};

const PATIENCE: Duration = Duration::from_secs(20);

fn connect(path: &std::path::Path) -> Client {
    let mut client = Client::connect(path).unwrap();
    // A hang would be a bug: fail instead of blocking the test run forever.
    client.set_timeout(Some(PATIENCE)).unwrap();
    client
}

#[test]
fn answers_come_back_in_request_order() {
    let fake = serve(|peer: &mut Peer| {
        let mut seen = Vec::new();
        while let Some(r) = peer.recv() {
            peer.send(correct_answer(&r));
            seen.push(r);
        }
        seen
    });
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(8);
    for i in 0..300u32 {
        match i % 3 {
            0 => p.push(Tier::Sync, &i.to_le_bytes()).unwrap(),
            1 => p
                .push_batch(Tier::Batched, &[&b"x"[..], &i.to_le_bytes()])
                .unwrap(),
            _ => p.health().unwrap(),
        }
        assert!(p.outstanding() as u32 == i + 1, "nothing received yet");
    }
    for i in 0..300u32 {
        let expected = match i % 3 {
            0 => Reply::Ack,
            1 => Reply::AckBatch(2),
            _ => Reply::HealthCheckResponse,
        };
        assert_eq!(p.recv().unwrap(), expected, "answer {i}");
        assert_eq!(p.outstanding() as u32, 299 - i);
    }
    let err = p.recv().unwrap_err();
    assert!(matches!(err, Error::InvalidRequest(_)), "{err:?}");
    drop(p);
    drop(client);
    let seen = fake.join();
    assert_eq!(seen.len(), 300);
    for (i, r) in seen.iter().enumerate() {
        if i % 3 == 0 {
            let Request::Push { payload, .. } = r else {
                panic!("{r:?}")
            };
            assert_eq!(&payload[..], &(i as u32).to_le_bytes());
        }
    }
}

#[test]
fn retryable_nack_mid_stream_is_returned_in_place() {
    let fake = serve(|peer: &mut Peer| {
        let mut n = 0;
        while let Some(r) = peer.recv() {
            n += 1;
            let answer = if n == 5 {
                Response::Nack(NackReason::Overloaded)
            } else {
                correct_answer(&r)
            };
            peer.send(answer);
        }
    });
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(4);
    for _ in 0..10 {
        p.push(Tier::Buffered, b"r").unwrap();
    }
    for i in 1..=10 {
        let got = p.recv();
        if i == 5 {
            assert!(
                matches!(got, Err(Error::Nack(NackReason::Overloaded))),
                "{got:?}"
            );
        } else {
            assert_eq!(got.unwrap(), Reply::Ack, "answer {i}");
        }
    }
    // Still usable afterwards.
    p.push(Tier::Buffered, b"after").unwrap();
    assert_eq!(p.recv().unwrap(), Reply::Ack);
    drop(p);
    drop(client);
    fake.join();
}

#[test]
fn full_window_flushes_without_being_asked() {
    let (tx, rx) = mpsc::channel();
    let fake = serve(move |peer: &mut Peer| {
        for _ in 0..4 {
            let r = peer.recv().unwrap();
            tx.send(()).unwrap();
            peer.send(correct_answer(&r));
        }
        peer.serve_all()
    });
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(4);
    for _ in 0..4 {
        p.push(Tier::Sync, b"tiny").unwrap();
    }
    // No flush or recv yet: the window being full must have sent them.
    for _ in 0..4 {
        rx.recv_timeout(PATIENCE).expect("request not sent");
    }
    assert_eq!(p.outstanding(), 4);
    for _ in 0..4 {
        assert_eq!(p.recv().unwrap(), Reply::Ack);
    }
    drop(p);
    drop(client);
    fake.join();
}

#[test]
fn small_requests_stay_buffered_until_64k_or_flush() {
    let (tx, rx) = mpsc::channel();
    let fake = serve(move |peer: &mut Peer| {
        while let Some(r) = peer.recv() {
            tx.send(r.payload_bytes()).unwrap();
            peer.send(correct_answer(&r));
        }
    });
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(10_000);
    p.push(Tier::Sync, b"one").unwrap();
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "sent too early"
    );
    p.flush().unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 3);

    // 15 frames of 4116 bytes stay under 64 KiB; the 16th crosses it and
    // all 16 are written without an explicit flush.
    for _ in 0..15 {
        p.push(Tier::Sync, &[1u8; 4096]).unwrap();
    }
    assert!(
        rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "sent too early"
    );
    p.push(Tier::Sync, &[1u8; 4096]).unwrap();
    for _ in 0..16 {
        assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), 4096);
    }
    for _ in 0..17 {
        assert_eq!(p.recv().unwrap(), Reply::Ack);
    }
    drop(p);
    drop(client);
    fake.join();
}

/// The fake daemon answers every request before reading the next, so if the
/// client only wrote it would fill both socket buffers and both would block.
#[test]
fn never_deadlocks_when_the_caller_only_pushes() {
    const N: usize = 60_000;
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(64);
    for i in 0..N {
        p.push(Tier::Buffered, &(i as u64).to_le_bytes()).unwrap();
    }
    assert_eq!(p.outstanding(), N);
    for _ in 0..N {
        assert_eq!(p.recv().unwrap(), Reply::Ack);
    }
    drop(p);
    drop(client);
    assert_eq!(fake.join(), N);
}

#[test]
fn closing_nack_is_still_received_after_the_daemon_hangs_up() {
    let fake = serve(|peer: &mut Peer| {
        peer.recv().unwrap();
        peer.send(Response::Ack);
        peer.recv().unwrap();
        peer.send(Response::Nack(NackReason::UnknownMessage));
    });
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(16);
    p.push(Tier::Sync, b"fine").unwrap();
    p.push_batch(Tier::Sync, &[b"unsupported"]).unwrap();
    p.push(Tier::Sync, b"never answered").unwrap();
    assert_eq!(p.recv().unwrap(), Reply::Ack);
    let err = p.recv().unwrap_err();
    assert_eq!(err.nack_reason(), Some(NackReason::UnknownMessage));
    assert!(!err.is_retryable());
    let err = p.recv().unwrap_err();
    assert!(matches!(err, Error::Closed), "{err:?}");
    drop(p);
    drop(client);
    fake.join();
}

#[test]
fn dropped_pipeline_answers_do_not_leak_into_the_client() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(8);
    for _ in 0..5 {
        p.push(Tier::Sync, b"abandoned").unwrap();
    }
    p.flush().unwrap();
    p.push(Tier::Sync, b"never sent").unwrap();
    drop(p);
    // Five Acks are still on their way; a batch must get its AckBatch.
    assert_eq!(client.push_batch(Tier::Sync, &[b"a", b"b"]).unwrap(), 2);
    client.health().unwrap();
    // And a fresh pipeline starts in step too.
    let mut p = client.pipeline(2);
    p.health().unwrap();
    assert_eq!(p.recv().unwrap(), Reply::HealthCheckResponse);
    drop(p);
    drop(client);
    assert_eq!(fake.join(), 5 + 2 + 1, "the unflushed push was discarded");
}

#[test]
fn invalid_requests_are_refused_without_queueing() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(4);
    assert!(matches!(
        p.push(Tier::Sync, b""),
        Err(Error::InvalidRequest(_))
    ));
    let none: [&[u8]; 0] = [];
    assert!(matches!(
        p.push_batch(Tier::Sync, &none),
        Err(Error::InvalidRequest(_))
    ));
    assert_eq!(p.outstanding(), 0);
    drop(p);
    drop(client);
    assert_eq!(fake.join(), 0);
}

#[test]
fn zero_window_behaves_like_one() {
    let fake = serve(|peer: &mut Peer| peer.serve_all());
    let mut client = connect(&fake.path);
    let mut p = client.pipeline(0);
    for _ in 0..3 {
        p.push(Tier::Sync, b"x").unwrap();
    }
    for _ in 0..3 {
        assert_eq!(p.recv().unwrap(), Reply::Ack);
    }
    drop(p);
    drop(client);
    assert_eq!(fake.join(), 3);
}
