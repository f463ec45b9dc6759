//! Pipelining: many frames in flight on one connection, answered in order,
//! stored in push order; PushBatch answered by AckBatch.

use std::io::{Read, Write};
use std::thread;
use std::time::Duration;

use spillway_tests::*;

/// The one shard holding records, asserting every other shard is empty.
fn only_shard(d: &Daemon) -> Vec<StoredRecord> {
    let mut with_records: Vec<(u32, Vec<StoredRecord>)> = d
        .read_shards()
        .into_iter()
        .filter(|(_, r)| !r.is_empty())
        .collect();
    assert_eq!(
        with_records.len(),
        1,
        "records of one connection must all be in one shard"
    );
    with_records.pop().unwrap().1
}

fn assert_consecutive_seqs(recs: &[StoredRecord]) {
    for w in recs.windows(2) {
        assert_eq!(
            w[1].seq,
            w[0].seq + 1,
            "sequence numbers must be consecutive within a shard"
        );
    }
}

#[test]
fn raw_2000_sync_pushes_written_before_any_read_are_acked_in_order() {
    let d = Daemon::start("");
    let mut c = d.raw();
    let payloads: Vec<String> = (0..2000).map(|i| format!("rec-{i:05}")).collect();
    let mut all = Vec::new();
    for p in &payloads {
        all.extend(push_frame(Tier::Sync, p.as_bytes()));
    }
    // Every frame is written before anything is read.
    c.stream.write_all(&all).unwrap();
    let mut acks = vec![0u8; 2000 * 20];
    c.stream.read_exact(&mut acks).expect("2000 ack frames");
    let ack = expected_ack();
    for (i, got) in acks.chunks(20).enumerate() {
        assert_eq!(got, &ack[..], "answer {i} is not an Ack: {got:02x?}");
    }
    c.expect_health();

    let recs = only_shard(&d);
    assert_eq!(texts(&recs), payloads);
    assert!(recs.iter().all(|r| r.meta.tier == Tier::Sync.as_byte()));
    assert_consecutive_seqs(&recs);
}

#[test]
fn raw_pipeline_of_mixed_requests_is_answered_in_request_order() {
    let d = Daemon::start("");
    let mut c = d.raw();
    let mut all = Vec::new();
    let mut expected_answers = Vec::new();
    let mut expected_records = Vec::new();
    for i in 0..600u32 {
        match i % 7 {
            0 => {
                all.extend(health_frame());
                expected_answers.push(expected_health_response());
            }
            3 => {
                let recs: Vec<String> = (0..(i % 5 + 1)).map(|j| format!("b{i}-{j}")).collect();
                let refs: Vec<&[u8]> = recs.iter().map(|r| r.as_bytes()).collect();
                all.extend(batch_frame(Tier::Batched, &refs));
                expected_answers.push(expected_ack_batch(recs.len() as u32));
                expected_records.extend(recs.into_iter().map(|r| (r, Tier::Batched.as_byte())));
            }
            _ => {
                let tier = Tier::ALL[(i % 3) as usize];
                let p = format!("p{i}");
                all.extend(push_frame(tier, p.as_bytes()));
                expected_answers.push(expected_ack());
                expected_records.push((p, tier.as_byte()));
            }
        }
    }
    c.stream.write_all(&all).unwrap();
    for (i, want) in expected_answers.iter().enumerate() {
        let got = c.read_frame();
        assert_eq!(
            &got, want,
            "answer {i}: got {got:02x?}, expected {want:02x?}"
        );
    }
    let recs = only_shard(&d);
    let got: Vec<(String, u8)> = recs.iter().map(|r| (text(r), r.meta.tier)).collect();
    assert_eq!(got, expected_records);
    assert_consecutive_seqs(&recs);
}

#[test]
fn client_pipeline_1024_acks_every_push_in_order() {
    let d = Daemon::start("");
    let mut client = d.client();
    let payloads: Vec<String> = (0..5000).map(|i| format!("pipe-{i}")).collect();
    let mut acked = 0usize;
    {
        let mut p = client.pipeline(1024);
        for (i, payload) in payloads.iter().enumerate() {
            p.push(Tier::Sync, payload.as_bytes())
                .unwrap_or_else(|e| panic!("push {i}: {e}"));
        }
        p.health().unwrap();
        p.flush().unwrap();
        while p.outstanding() > 1 {
            match p.recv() {
                Ok(Reply::Ack) => acked += 1,
                other => panic!("answer {acked}: expected Ack, got {other:?}"),
            }
        }
        assert_eq!(
            p.recv().unwrap(),
            Reply::HealthCheckResponse,
            "the last answer is the health check's"
        );
        assert_eq!(p.outstanding(), 0);
    }
    assert_eq!(acked, 5000);
    client.health().unwrap();
    let recs = only_shard(&d);
    assert_eq!(texts(&recs), payloads);
    assert_consecutive_seqs(&recs);
}

#[test]
fn push_batch_is_answered_by_ack_batch_with_the_record_count() {
    let d = Daemon::start("");
    let mut client = d.client();
    let mut expected = Vec::new();

    // One batch through the blocking client.
    let first: Vec<String> = (0..100).map(|i| format!("batch0-{i}")).collect();
    assert_eq!(client.push_batch(Tier::Sync, &first).unwrap(), 100);
    expected.extend(first);

    // Exact AckBatch bytes on a raw connection (count 100 = 64 00 00 00).
    let mut raw = d.raw();
    let raw_recs: Vec<String> = (0..100).map(|i| format!("raw-{i}")).collect();
    let refs: Vec<&[u8]> = raw_recs.iter().map(|r| r.as_bytes()).collect();
    raw.send(&batch_frame(Tier::Batched, &refs));
    let got = raw.read_frame();
    assert_eq!(got, expected_ack_batch(100), "{got:02x?}");
    assert_eq!(&got[16..20], &[0x64, 0, 0, 0]);

    // Pipelined batches of varying sizes: one AckBatch each, in order, with its count.
    let mut sizes = Vec::new();
    {
        let mut p = client.pipeline(64);
        for b in 1..=150u32 {
            let n = (b * 7) % 23 + 1;
            let recs: Vec<String> = (0..n).map(|i| format!("batch{b}-{i}")).collect();
            p.push_batch(Tier::Buffered, &recs).unwrap();
            expected.extend(recs);
            sizes.push(n);
        }
        for (i, n) in sizes.iter().enumerate() {
            assert_eq!(p.recv().unwrap(), Reply::AckBatch(*n), "batch {i}");
        }
    }
    client.health().unwrap();

    let shards = d.read_shards();
    let all: Vec<StoredRecord> = shards.iter().flat_map(|(_, r)| r.clone()).collect();
    // The raw connection's records, in order, wherever they are.
    let raw_got: Vec<String> = all
        .iter()
        .map(text)
        .filter(|t| t.starts_with("raw-"))
        .collect();
    assert_eq!(raw_got, raw_recs);
    // The client's records, in order.
    let client_got: Vec<String> = all
        .iter()
        .map(text)
        .filter(|t| t.starts_with("batch"))
        .collect();
    assert_eq!(client_got, expected);
    for r in &all {
        let t = text(r);
        let want = if t.starts_with("raw-") {
            Tier::Batched
        } else if t.starts_with("batch0-") {
            Tier::Sync
        } else {
            Tier::Buffered
        };
        assert_eq!(r.meta.tier, want.as_byte(), "tier of {t}");
    }
    assert_eq!(all.len(), 100 + expected.len());
}

#[test]
fn pipelining_past_a_small_daemon_window_keeps_order() {
    // The daemon may hold only 8 records / 64 KiB per connection: it must
    // stop reading and resume, never reorder, drop or deadlock.
    let d = Daemon::start("[server]\ninflight_records_max = 8\ninflight_bytes_max = 65536\n");
    let c = d.raw();
    let mut writer = c.stream.try_clone().unwrap();
    let payloads: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| {
            let mut p = format!("w-{i:05}-").into_bytes();
            // Some records are large enough that bytes, not records, fill the window.
            let pad = if i % 100 == 0 {
                40_000
            } else {
                (i % 50) as usize
            };
            p.resize(p.len() + pad, b'.');
            p
        })
        .collect();
    let to_send = payloads.clone();
    let w = thread::spawn(move || {
        let mut all = Vec::new();
        for (i, p) in to_send.iter().enumerate() {
            if i % 10 == 9 {
                all.extend(batch_frame(Tier::Sync, &[&p[..]]));
            } else {
                all.extend(push_frame(Tier::Sync, p));
            }
        }
        writer.write_all(&all).unwrap();
    });
    let mut c = c;
    for i in 0..payloads.len() {
        let want = if i % 10 == 9 {
            expected_ack_batch(1)
        } else {
            expected_ack()
        };
        let got = c.read_frame();
        assert_eq!(got, want, "answer {i}");
    }
    w.join().unwrap();
    c.expect_health();
    let recs = only_shard(&d);
    assert_eq!(recs.len(), payloads.len());
    for (i, (r, p)) in recs.iter().zip(&payloads).enumerate() {
        assert!(
            r.payload[..] == p[..],
            "record {i} out of order: {:?}",
            String::from_utf8_lossy(&r.payload[..12.min(r.payload.len())])
        );
    }
    assert_consecutive_seqs(&recs);
}

#[test]
fn concurrent_pipelining_connections_each_keep_their_order() {
    let d = Daemon::start("");
    let per_conn = 1500;
    let handles: Vec<_> = (0..4)
        .map(|conn| {
            let socket = d.socket_path().to_path_buf();
            thread::spawn(move || {
                let mut client = Client::connect(&socket).unwrap();
                client.set_timeout(Some(IO_TIMEOUT)).unwrap();
                let mut p = client.pipeline(256);
                let mut acks = 0;
                for n in 0..per_conn {
                    p.push(Tier::Sync, format!("c{conn}:{n}").as_bytes())
                        .unwrap();
                }
                while p.outstanding() > 0 {
                    assert_eq!(p.recv().unwrap(), Reply::Ack);
                    acks += 1;
                }
                acks
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), per_conn);
    }
    let shards = d.read_shards();
    for conn in 0..4 {
        let tag = format!("c{conn}");
        let mut seen_in = Vec::new();
        for (shard, recs) in &shards {
            let ns: Vec<u64> = recs
                .iter()
                .filter_map(|r| parse_tagged(&r.payload))
                .filter(|(t, _)| *t == tag)
                .map(|(_, n)| n)
                .collect();
            if !ns.is_empty() {
                assert_eq!(
                    ns,
                    (0..per_conn as u64).collect::<Vec<_>>(),
                    "connection {conn} in shard {shard}"
                );
                seen_in.push(*shard);
            }
        }
        assert_eq!(
            seen_in.len(),
            1,
            "connection {conn} must be pinned to one shard, found in {seen_in:?}"
        );
    }
    let total: usize = shards.iter().map(|(_, r)| r.len()).sum();
    assert_eq!(total, 4 * per_conn);
}

#[test]
fn half_closed_client_still_gets_every_ack() {
    // The client writes 500 pushes and shuts down its write side at once:
    // the daemon must answer every frame it read, then close.
    let d = Daemon::start("");
    let mut c = d.raw();
    let mut all = Vec::new();
    for i in 0..500 {
        all.extend(push_frame(Tier::Sync, format!("half-{i}").as_bytes()));
    }
    c.stream.write_all(&all).unwrap();
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    for i in 0..500 {
        match c.read_frame_within(IO_TIMEOUT) {
            ReadOutcome::Frame(f) => assert_eq!(f, expected_ack(), "answer {i}"),
            other => panic!("answer {i} of 500 after a half-close: {other:?}"),
        }
    }
    c.expect_closed();
    assert_eq!(
        texts(&only_shard(&d)),
        (0..500).map(|i| format!("half-{i}")).collect::<Vec<_>>()
    );
}

#[test]
fn one_push_batch_of_10000_records_is_one_ack_batch() {
    let d = Daemon::start("");
    let mut client = d.client();
    let recs: Vec<String> = (0..10_000).map(|i| format!("r{i}")).collect();
    assert_eq!(client.push_batch(Tier::Sync, &recs).unwrap(), 10_000);
    // Larger than the daemon's per-connection record window, while other records are in flight.
    let small = Daemon::start("[server]\ninflight_records_max = 8\n");
    let mut raw = small.raw();
    let mut all = Vec::new();
    for i in 0..20 {
        all.extend(push_frame(Tier::Sync, format!("before-{i}").as_bytes()));
    }
    let refs: Vec<&[u8]> = recs[..100].iter().map(|r| r.as_bytes()).collect();
    all.extend(batch_frame(Tier::Sync, &refs));
    all.extend(push_frame(Tier::Sync, b"after"));
    raw.send(&all);
    for i in 0..20 {
        raw.expect_frame(&expected_ack(), &format!("push {i}"));
    }
    raw.expect_frame(
        &expected_ack_batch(100),
        "batch of 100 with an 8-record window",
    );
    raw.expect_frame(&expected_ack(), "push after the batch");

    assert_eq!(texts(&only_shard(&d)), recs);
    let mut want: Vec<String> = (0..20).map(|i| format!("before-{i}")).collect();
    want.extend(recs[..100].iter().cloned());
    want.push("after".into());
    assert_eq!(texts(&only_shard(&small)), want);
}

/// The window's last acks are answered while the socket is full and a frame
/// waits parked: only the end of that write can take the frame in. With an
/// 8-record window this happens within the first few hundred pushes.
#[test]
fn a_parked_frame_resumes_when_acks_answered_into_a_full_socket_are_written() {
    let d = Daemon::start("[server]\ninflight_records_max = 8\n");
    let raw = d.raw();
    let mut writer = raw.stream.try_clone().unwrap();
    let n = 20_000;
    let w = thread::spawn(move || {
        let mut all = Vec::new();
        for i in 0..n {
            all.extend(push_frame(Tier::Buffered, format!("p-{i:05}").as_bytes()));
        }
        writer.write_all(&all).unwrap();
    });
    // Let the daemon fill the socket with acks nobody reads yet.
    thread::sleep(Duration::from_millis(500));
    let mut raw = raw;
    for i in 0..n {
        match raw.read_frame_within(IO_TIMEOUT) {
            ReadOutcome::Frame(f) => assert_eq!(f, expected_ack(), "answer {i}"),
            other => panic!("answer {i} of {n}: {other:?}"),
        }
    }
    w.join().unwrap();
    raw.expect_health();
    assert_eq!(
        texts(&only_shard(&d)),
        (0..n).map(|i| format!("p-{i:05}")).collect::<Vec<_>>()
    );
}

#[test]
fn a_client_that_does_not_read_its_acks_only_stalls_itself() {
    let d = Daemon::start("");
    let stalled = d.raw();
    let mut writer = stalled.stream.try_clone().unwrap();
    let n = 20_000;
    let w = thread::spawn(move || {
        let mut all = Vec::new();
        for i in 0..n {
            all.extend(push_frame(
                Tier::Buffered,
                format!("unread-{i:05}").as_bytes(),
            ));
        }
        // Blocks once the daemon stops reading this connection.
        writer.write_all(&all).unwrap();
    });
    // Meanwhile another connection is served normally.
    let mut other = d.client();
    for i in 0..200 {
        other
            .push(Tier::Sync, format!("other-{i}").as_bytes())
            .unwrap_or_else(|e| panic!("push {i}: {e}"));
    }
    other.health().unwrap();
    // Now read the first connection's answers: all of them, in order.
    let mut stalled = stalled;
    for i in 0..n {
        let f = stalled.read_frame();
        assert_eq!(f, expected_ack(), "answer {i}");
    }
    w.join().unwrap();
    stalled.expect_health();
    let all = d.read_all_records();
    let unread: Vec<String> = all
        .iter()
        .map(text)
        .filter(|t| t.starts_with("unread-"))
        .collect();
    assert_eq!(
        unread,
        (0..n).map(|i| format!("unread-{i:05}")).collect::<Vec<_>>()
    );
    let others: Vec<String> = all
        .iter()
        .map(text)
        .filter(|t| t.starts_with("other-"))
        .collect();
    assert_eq!(
        others,
        (0..200).map(|i| format!("other-{i}")).collect::<Vec<_>>()
    );
}
