//! Producers that push tagged records in a loop and what they were told
//! ([`produce`], [`check_producers`]), checked against what was stored.

use crate::*;

#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// One `Client::push` at a time.
    Single(Tier),
    /// `Client::push_batch` of this many records at a time.
    Batch(Tier, u64),
    /// `Pipeline` with this window.
    Pipelined(Tier, usize),
}

/// What one producer did before the daemon died.
#[derive(Debug)]
pub struct ProducerOutcome {
    pub tag: String,
    /// Records written to the socket (or at least handed to the client).
    pub sent: u64,
    /// Records acknowledged: always the prefix `0..acked` of what was sent.
    pub acked: u64,
    pub error: String,
}

pub fn is_disconnect(e: &ClientError) -> bool {
    matches!(e, ClientError::Closed | ClientError::Io(_))
}

/// Push `"{tag}:{n}"` records until the connection fails.
pub fn produce(client: &mut Client, tag: &str, mode: Mode, limit: u64) -> ProducerOutcome {
    let mut sent = 0u64;
    let mut acked = 0u64;
    let payload = |n: u64| format!("{tag}:{n}");
    let error = match mode {
        Mode::Single(tier) => loop {
            if sent >= limit {
                break String::new();
            }
            sent += 1;
            match client.push(tier, payload(sent - 1).as_bytes()) {
                Ok(()) => acked += 1,
                Err(e) => break e.to_string(),
            }
        },
        Mode::Batch(tier, size) => loop {
            if sent >= limit {
                break String::new();
            }
            let recs: Vec<String> = (sent..sent + size).map(payload).collect();
            sent += size;
            match client.push_batch(tier, &recs) {
                Ok(n) => {
                    assert_eq!(n as u64, size);
                    acked += size;
                }
                Err(e) => break e.to_string(),
            }
        },
        Mode::Pipelined(tier, window) => {
            let mut p = client.pipeline(window);
            let mut err = String::new();
            while sent < limit {
                if let Err(e) = p.push(tier, payload(sent).as_bytes()) {
                    err = e.to_string();
                    break;
                }
                sent += 1;
                if p.outstanding() >= window {
                    match p.recv() {
                        Ok(Reply::Ack) => acked += 1,
                        Ok(other) => panic!("{tag}: unexpected {other:?}"),
                        Err(e) => {
                            assert!(is_disconnect(&e), "{tag}: {e}");
                            err = e.to_string();
                            break;
                        }
                    }
                }
            }
            if err.is_empty() {
                let _ = p.flush();
            }
            // Collect whatever answers arrived before the daemon died.
            while p.outstanding() > 0 {
                match p.recv() {
                    Ok(Reply::Ack) => acked += 1,
                    Ok(other) => panic!("{tag}: unexpected {other:?}"),
                    Err(e) => {
                        assert!(is_disconnect(&e), "{tag}: {e}");
                        if err.is_empty() {
                            err = e.to_string();
                        }
                        break;
                    }
                }
            }
            err
        }
    };
    ProducerOutcome {
        tag: tag.to_string(),
        sent,
        acked,
        error,
    }
}

/// For each producer: its records are in exactly one shard (its connection
/// is pinned to one), they are `0..k` in push order with no gap, and
/// `acked <= k <= sent` (every ack kept; at most the unacknowledged tail missing).
pub fn check_producers(
    shards: &[(u32, Vec<StoredRecord>)],
    outcomes: &[ProducerOutcome],
    context: &str,
) {
    for o in outcomes {
        let mut found: Vec<(u32, Vec<u64>)> = Vec::new();
        for (shard, recs) in shards {
            let ns: Vec<u64> = recs
                .iter()
                .filter_map(|r| parse_tagged(&r.payload))
                .filter(|(t, _)| *t == o.tag)
                .map(|(_, n)| n)
                .collect();
            if !ns.is_empty() {
                found.push((*shard, ns));
            }
        }
        assert!(
            found.len() <= 1,
            "{context}: producer {} found in several shards: {found:?}",
            o.tag
        );
        let ns = found.pop().map(|(_, ns)| ns).unwrap_or_default();
        for (i, w) in ns.windows(2).enumerate() {
            assert!(
                w[0] < w[1],
                "{context}: producer {} out of order at index {i}: {} then {}",
                o.tag,
                w[0],
                w[1]
            );
        }
        let k = ns.len() as u64;
        assert_eq!(
            ns,
            (0..k).collect::<Vec<_>>(),
            "{context}: producer {} has a gap (acked {}, sent {})",
            o.tag,
            o.acked,
            o.sent
        );
        assert!(
            k >= o.acked,
            "{context}: producer {} LOST acknowledged records: {} acked, only {k} on disk (sent {}, error {:?})",
            o.tag,
            o.acked,
            o.sent,
            o.error
        );
        assert!(
            k <= o.sent,
            "{context}: producer {} has {k} records on disk but sent only {}",
            o.tag,
            o.sent
        );
    }
}

/// Within each shard sequence numbers strictly increase (no reuse).
pub fn check_seqs(shards: &[(u32, Vec<StoredRecord>)], context: &str) {
    for (shard, recs) in shards {
        for w in recs.windows(2) {
            assert!(
                w[0].seq < w[1].seq,
                "{context}: shard {shard} sequence numbers {} then {}",
                w[0].seq,
                w[1].seq
            );
        }
    }
}

/// A small seeded PRNG (xorshift64*), so "random" timings are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Splits `"{tag}:{n}"` into its parts.
pub fn parse_tagged(payload: &[u8]) -> Option<(String, u64)> {
    let s = std::str::from_utf8(payload).ok()?;
    let (tag, n) = s.rsplit_once(':')?;
    Some((tag.to_string(), n.parse().ok()?))
}
