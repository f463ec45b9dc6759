//! A long crash loop with the real binary: one data folder, many lives,
//! each ended by SIGKILL at a seeded moment, all delivering over HTTP to
//! three sinks, each to its own loopback receiver that outlives them.
//!
//! Each cycle (`SPILLWAY_CRASH_CYCLES`, default 20) starts the daemon on
//! the same folder with three HTTP sinks (NDJSON batches), `[sinks.main]`
//! and `[sinks.mirror]` with one batch in flight per shard, and
//! `[sinks.fan]` with several (2, 4, 8 or `"adaptive"` up to 8 by sink generation: its cursor
//! reads ahead, offers batches from worker threads, and settles their
//! answers out of order), and 1 MiB segments (`wab.segment_bytes_max`'s
//! minimum), and kills it at one of four kinds of moment:
//!
//! - **recovery**: a few milliseconds after the spawn, before or while it
//!   starts serving (the delay is drawn from 0..1.3 × the median start-up
//!   time measured so far). The cycle before a recovery cycle keeps the
//!   main receiver at 503 for its whole life, so there is a real backlog on disk
//!   to recover. Whether the daemon had printed "listening" and answered a
//!   health check before the kill is logged for every such cycle, and the
//!   test fails if no recovery cycle ever killed before the first health
//!   answer.
//! - **reload**: while producers push, both `[sinks.*]` tables are changed
//!   (URL path, `batch_records_max`, `linger_ms`) and the daemon told by SIGHUP or by
//!   `spillway ctl reload`; it is killed 0–5 ms later. Whether its log
//!   shows the reload started / applied by then is logged.
//! - **rotation**: killed while 5 connections push as hard as they can into
//!   1 MiB segments (the smallest `segment_bytes_max` allows: a few KiB is
//!   refused), which makes a rotation every few milliseconds to few tens
//!   of milliseconds per shard. A rotation cannot be observed from outside
//!   exactly, so this aims rather than hits: the number of `.open` segment
//!   files each shard has just after the kill is logged (3 or more means a
//!   full segment was still being sealed beside the active one and its
//!   spare), and counted in the summary.
//! - **random**: anywhere from 5 ms to 0.9 s into pushing; in half of
//!   these cycles the producers then stop and the kill comes 50–800 ms
//!   later, while the drain works through the backlog (a kill in the
//!   middle of delivery, with no ingest to hide it).
//!
//! Each receiver answers 503 for seeded stretches of its own (the mirror's
//! drawn apart from the main one's, the fan's the same as the mirror's: a stretch in 40% of the pushing lives,
//! a whole life in 15% of all), so backlogs build, one sink falls behind
//! the other, and delivery, retries and redelivery cross the kills. When
//! producers stop before a kill all answer 200. Each producer has its
//! own connection, a unique tag and a counter in every payload (plus a
//! deterministic pad, so a record is verifiable byte for byte), and mixes
//! the three tiers, single pushes and PushBatch, pipelined or lock-step.
//! Five push over the Unix socket; a sixth POSTs NDJSON bodies of 1 to 64
//! records over the HTTP door (`[server.http]`, loopback), lock-step on a
//! keep-alive connection: a 200 acks the whole body, a 429 or 503 is its
//! nack; a seventh pushes over TLS (`[server.tcp]`, a throw-away CA),
//! pipelined 32 deep. Their records are held to every check below like
//! the others'.
//!
//! At the end a last clean start delivers everything (`ctl stats` until no
//! shard has `pending_records`, the worst over sinks), and a SIGTERM stops
//! it. Then, for each of the two receivers:
//!
//! - every record whose Sync or Batched ack the producer saw was delivered
//!   (at least once); so was every acked Buffered record (SIGKILL keeps the
//!   page cache, and the design promises Buffered survives a daemon crash;
//!   survivors and losses are also reported);
//! - per connection, the counters in arrival order, once repeats of
//!   counters already seen are dropped, strictly increase (the order
//!   promise: push order, redelivery may repeat a suffix; not checked for
//!   the fan, whose batches in flight may land in any order, as
//!   documented), and they have no hole below the highest one delivered
//!   except where a push was nacked;
//! - nothing was delivered that was never pushed (tag, counter below what
//!   was pushed, payload identical), and a record keeps its identity
//!   `(shard, seq)` across redeliveries, which no other record shares;
//! - a loss the daemon reports (`records_lost` in `ctl stats`, from the
//!   gaps recovery finds) is a real one: with every acked record
//!   delivered to every sink, a non-zero `records_lost` is a false alarm and fails;
//! - duplicates (copies of a record a receiver already had, counted in the
//!   life they arrive in) stay within what one kill can cause: a sink has
//!   at most `batches_in_flight` batches unsettled per shard and writes its
//!   cursor after every confirmed prefix of them, so a life gets at most
//!   that many batches per shard and sink: for each shard, at most
//!   `batches_in_flight` × the `batch_records_max` the batches were built under
//!   (with one out, the generations of the last life that had a request
//!   of that shard accepted: a batch refused or never offered is carried
//!   to a later life; with several out, the largest such window of the
//!   lives since the earliest one its duplicates were first sent in, as a
//!   life may have later batches accepted while its head is refused). The
//!   duplicates per life,
//!   the bound, and the median and max per kill are printed per sink.
//!
//! On a failure the message names the seed, the cycles involved and the
//! first missing records, and the daemon's logs and data folder are
//! copied to `$TMPDIR/spillway-crash-loop-<seed>/`.
//!
//! `SPILLWAY_CRASH_SEED` (decimal or 0x-hex) replays a run's plan: the same
//! kinds, delays, outages and producer mixes. What the daemon has done by a
//! given millisecond is timing, so a replay explores the same neighbourhood,
//! not the same instruction.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use spillway_test_http::{Receiver, Reply as HttpReply, Request};
use spillway_tests::*;

/// Producer connections on the Unix socket per pushing life (and one
/// more on the HTTP door).
const PRODUCERS: usize = 5;
/// Pipeline windows of the producers (1 = lock-step push, wait, push).
const WINDOWS: [usize; PRODUCERS] = [1, 1, 8, 32, 128];
/// The producer that POSTs over the HTTP door, and the one that pushes
/// over TLS (the TCP door), after the socket's.
const HTTP_PRODUCER: usize = PRODUCERS;
const TLS_PRODUCER: usize = PRODUCERS + 1;
/// Producer connections per pushing life, over every door.
const CONNECTIONS: usize = PRODUCERS + 2;
/// The TLS producer's pipeline window.
const TLS_WINDOW: usize = 32;
/// Longest the last clean start may take to deliver the backlog.
const FINAL_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- payloads

/// Deterministic pad length and letters for record `n` of connection `conn`.
fn mix(conn: u32, n: u32) -> u64 {
    let mut x = (u64::from(conn) << 32 | u64::from(n)) ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x
}

/// `k{conn}:{n}:{pad}`: 8..=407 pad letters, all derived from (conn, n).
fn payload(conn: u32, n: u32) -> Vec<u8> {
    let h = mix(conn, n);
    let pad = 8 + (h % 400) as usize;
    let mut p = format!("k{conn}:{n}:").into_bytes();
    p.extend((0..pad).map(|i| b'a' + ((h >> (i % 40)) as u8 % 26)));
    p
}

/// (conn, n) of a payload that is exactly what [`payload`] makes for them.
fn parse_payload(p: &[u8]) -> Option<(u32, u32)> {
    let s = std::str::from_utf8(p).ok()?;
    let mut parts = s.splitn(3, ':');
    let conn = parts.next()?.strip_prefix('k')?.parse().ok()?;
    let n = parts.next()?.parse().ok()?;
    (payload(conn, n) == p).then_some((conn, n))
}

// ---------------------------------------------------------------- receiver

/// Largest counter a connection can reach in a test run (a sanity bound
/// before a counter sizes a vector).
const COUNTER_MAX: u32 = 1 << 26;
/// No sequence number (in [`ConnRx::seqs`]).
const NO_SEQ: u64 = u64::MAX;

/// What one connection's records did at the receiver.
#[derive(Default)]
struct ConnRx {
    /// Counters in arrival order, repeats included.
    arrivals: Vec<u32>,
    /// The shard all of them came from (a connection is pinned to one).
    shard: Option<u32>,
    /// Sequence number of each counter's first arrival, by counter.
    seqs: Vec<u64>,
    /// The life of each counter's first arrival, by counter.
    first_life: Vec<u16>,
}

impl ConnRx {
    fn has(&self, n: u32) -> bool {
        self.seqs.get(n as usize).is_some_and(|&s| s != NO_SEQ)
    }

    fn max_delivered(&self) -> Option<u32> {
        self.seqs
            .iter()
            .rposition(|&s| s != NO_SEQ)
            .map(|i| i as u32)
    }
}

#[derive(Default)]
struct RxState {
    status: u16,
    /// The life (daemon start) current when a request arrives.
    life: usize,
    conns: HashMap<u32, ConnRx>,
    /// Per shard, a bit per sequence number some record arrived under.
    seqs_used: HashMap<u32, Vec<u64>>,
    /// Copies of already-delivered records, by the life they arrived in.
    dups_per_life: Vec<u64>,
    /// Per life, the duplicates by the life their first copy arrived in.
    dup_origins: Vec<BTreeMap<usize, u64>>,
    /// Per life, the duplicates by shard.
    dups_by_shard: Vec<BTreeMap<u32, u64>>,
    /// Per shard, the lives in which records of it were accepted.
    lives_by_shard: BTreeMap<u32, BTreeSet<usize>>,
    /// Records first delivered in each life.
    firsts_per_life: Vec<u64>,
    /// The most records one accepted request carried, per life.
    max_request_per_life: Vec<usize>,
    distinct: u64,
    copies: u64,
    accepted_requests: u64,
    refused_requests: u64,
    /// Problems found in accepted bodies (first few) and how many.
    bad: Vec<String>,
    bad_count: u64,
    last_accept: Option<Instant>,
}

impl RxState {
    fn bad(&mut self, what: String) {
        self.bad_count += 1;
        if self.bad.len() < 20 {
            self.bad.push(what);
        }
    }

    /// Mark `(shard, seq)` used; false if it already was.
    fn use_seq(&mut self, shard: u32, seq: u64) -> bool {
        let bits = self.seqs_used.entry(shard).or_default();
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        let fresh = bits[word] & (1 << bit) == 0;
        bits[word] |= 1 << bit;
        fresh
    }

    fn take(&mut self, req: &Request) {
        let recs = match spillway_tests::receiver::decode_request(req, 0) {
            Ok(r) => r,
            Err(e) => {
                self.bad(format!("malformed request {}: {e}", req.path));
                return;
            }
        };
        self.accepted_requests += 1;
        self.last_accept = Some(Instant::now());
        let life = self.life;
        if self.dups_per_life.len() <= life {
            self.dups_per_life.resize(life + 1, 0);
            self.dup_origins.resize(life + 1, BTreeMap::new());
            self.dups_by_shard.resize(life + 1, BTreeMap::new());
            self.firsts_per_life.resize(life + 1, 0);
            self.max_request_per_life.resize(life + 1, 0);
        }
        let most = &mut self.max_request_per_life[life];
        *most = (*most).max(recs.len());
        for r in recs {
            let parsed = parse_payload(&r.payload).filter(|&(_, n)| n < COUNTER_MAX);
            let Some((conn, n)) = parsed else {
                let text = r.text();
                self.bad(format!(
                    "life {life}: a record nobody pushed (shard {} seq {}): {:?}",
                    r.shard,
                    r.seq,
                    &text[..text.len().min(60)]
                ));
                continue;
            };
            if r.seq > 1 << 40 {
                self.bad(format!("life {life}: k{conn}:{n} came with seq {}", r.seq));
                continue;
            }
            self.copies += 1;
            self.lives_by_shard.entry(r.shard).or_default().insert(life);
            let c = self.conns.entry(conn).or_default();
            c.arrivals.push(n);
            let shard = *c.shard.get_or_insert(r.shard);
            if c.seqs.len() <= n as usize {
                c.seqs.resize(n as usize + 1, NO_SEQ);
                c.first_life.resize(n as usize + 1, 0);
            }
            let first = c.seqs[n as usize];
            if first == NO_SEQ {
                c.seqs[n as usize] = r.seq;
                c.first_life[n as usize] = life as u16;
                self.distinct += 1;
                self.firsts_per_life[life] += 1;
                if shard != r.shard {
                    self.bad(format!(
                        "life {life}: connection k{conn} delivered from shard {shard} and from shard {} (k{conn}:{n})",
                        r.shard
                    ));
                }
                if !self.use_seq(r.shard, r.seq) {
                    self.bad(format!(
                        "life {life}: k{conn}:{n} came as (shard {}, seq {}), an identity another record already had",
                        r.shard, r.seq
                    ));
                }
            } else {
                self.dups_per_life[life] += 1;
                *self.dup_origins[life]
                    .entry(usize::from(c.first_life[n as usize]))
                    .or_default() += 1;
                *self.dups_by_shard[life].entry(r.shard).or_default() += 1;
                if (shard, first) != (r.shard, r.seq) {
                    self.bad(format!(
                        "life {life}: k{conn}:{n} first came as (shard {shard}, seq {first}), again as (shard {}, seq {})",
                        r.shard, r.seq
                    ));
                }
            }
        }
    }
}

/// A loopback receiver (one per sink): keeps no request bodies, only what
/// the checks need.
struct Rx {
    /// The sink delivering to it (`[sinks.NAME]`).
    name: &'static str,
    receiver: Receiver,
    state: Arc<Mutex<RxState>>,
}

impl Rx {
    fn start(name: &'static str) -> Rx {
        let state = Arc::new(Mutex::new(RxState {
            status: 200,
            ..RxState::default()
        }));
        let st = state.clone();
        let receiver = Receiver::builder()
            .keep_requests(false)
            .start(move |req: &Request| {
                let mut s = st.lock().unwrap();
                let status = s.status;
                if (200..300).contains(&status) {
                    s.take(req);
                } else {
                    s.refused_requests += 1;
                }
                HttpReply::status(status)
            })
            .expect("starting the loopback HTTP receiver");
        Rx {
            name,
            receiver,
            state,
        }
    }

    fn url(&self, path: &str) -> String {
        self.receiver.url(path)
    }

    fn set_status(&self, status: u16) {
        self.state.lock().unwrap().status = status;
    }

    fn set_life(&self, life: usize) {
        self.state.lock().unwrap().life = life;
    }

    /// Acked records (any tier) not received yet: the backlog, roughly.
    fn undelivered_acked(&self, logs: &[ConnLog]) -> u64 {
        let s = self.state.lock().unwrap();
        logs.iter()
            .map(|l| {
                let have = s.conns.get(&l.id);
                l.acked_counters()
                    .filter(|&n| !have.is_some_and(|c| c.has(n)))
                    .count() as u64
            })
            .sum()
    }
}

// ---------------------------------------------------------------- producers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpState {
    /// Sent (or buffered), no answer yet.
    Pending,
    Acked,
    Nacked,
}

/// One push or PushBatch: counters `start..start + len` at `tier`.
#[derive(Debug, Clone, Copy)]
struct Op {
    start: u32,
    len: u32,
    tier: Tier,
    state: OpState,
}

/// What one producer connection did in its life.
#[derive(Debug)]
struct ConnLog {
    id: u32,
    cycle: usize,
    window: usize,
    ops: Vec<Op>,
    /// Counters `0..pushed` were handed to the client (some maybe unsent).
    pushed: u32,
    error: String,
}

impl ConnLog {
    fn acked_counters(&self) -> impl Iterator<Item = u32> + '_ {
        self.ops
            .iter()
            .filter(|o| o.state == OpState::Acked)
            .flat_map(|o| o.start..o.start + o.len)
    }

    fn op_of(&self, n: u32) -> Option<&Op> {
        let i = self.ops.partition_point(|o| o.start + o.len <= n);
        self.ops.get(i).filter(|o| o.start <= n)
    }
}

fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Sync => 0,
        Tier::Batched => 1,
        Tier::Buffered => 2,
    }
}

const TIERS: [Tier; 3] = [Tier::Sync, Tier::Batched, Tier::Buffered];

/// Push until the connection fails (the kill) or `stop` is set. Ops are
/// mixed at random: every tier, single pushes and PushBatch of 2..=64,
/// through a pipeline of `window` (1 = lock-step).
fn produce_until_killed(
    connect: impl FnOnce() -> Result<Client, ClientError>,
    id: u32,
    cycle: usize,
    window: usize,
    seed: u64,
    stop: &AtomicBool,
) -> ConnLog {
    let mut log = ConnLog {
        id,
        cycle,
        window,
        ops: Vec::new(),
        pushed: 0,
        error: String::new(),
    };
    let mut client = match connect() {
        Ok(c) => c,
        Err(e) => {
            log.error = format!("connect: {e}");
            return log;
        }
    };
    client.set_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut rng = Rng::new(seed);
    let mut p = client.pipeline(window);
    // Indices into log.ops still waiting for their answer, oldest first.
    let mut waiting = VecDeque::new();
    let answer = |log: &mut ConnLog, r: Result<Reply, ClientError>, idx: usize| match r {
        Ok(Reply::Ack) | Ok(Reply::AckBatch(_)) => {
            log.ops[idx].state = OpState::Acked;
            Ok(())
        }
        Ok(other) => panic!("k{id}: unexpected reply {other:?}"),
        Err(ClientError::Nack(reason)) => {
            log.ops[idx].state = OpState::Nacked;
            if log.error.is_empty() {
                log.error = format!("nack {reason:?}");
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    let end = loop {
        if stop.load(Ordering::Relaxed) {
            break None;
        }
        let tier = TIERS[rng.below(3) as usize];
        let len = if rng.below(10) < 3 {
            2 + rng.below(63) as u32
        } else {
            1
        };
        let start = log.pushed;
        let res = if len == 1 {
            p.push(tier, &payload(id, start))
        } else {
            let recs: Vec<Vec<u8>> = (start..start + len).map(|n| payload(id, n)).collect();
            p.push_batch(tier, &recs)
        };
        log.ops.push(Op {
            start,
            len,
            tier,
            state: OpState::Pending,
        });
        log.pushed += len;
        waiting.push_back(log.ops.len() - 1);
        if let Err(e) = res {
            break Some(e);
        }
        let mut failed = None;
        while p.outstanding() >= window {
            let idx = waiting.pop_front().expect("an op per outstanding answer");
            let r = p.recv();
            if let Err(e) = answer(&mut log, r, idx) {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            break Some(e);
        }
    };
    // Answers that reached us before the daemon died are still handed out.
    while let Some(idx) = waiting.pop_front() {
        if p.outstanding() == 0 {
            break;
        }
        let r = p.recv();
        if answer(&mut log, r, idx).is_err() {
            break;
        }
    }
    let end = end.map_or("stopped".to_string(), |e| e.to_string());
    log.error = if log.error.is_empty() {
        end
    } else {
        format!("{}; then {end}", log.error)
    };
    log
}

/// POST lock-step over one keep-alive connection to the HTTP door until
/// it fails (the kill) or `stop` is set: NDJSON bodies of 1..=64 records,
/// every tier. A 200 acks every record of the body; a 429 or 503 writes
/// none of them (a nack); a connection lost before the answer leaves the
/// body pending (unknown, as a lost ack).
fn post_until_killed(port: u16, id: u32, cycle: usize, seed: u64, stop: &AtomicBool) -> ConnLog {
    let mut log = ConnLog {
        id,
        cycle,
        window: 1,
        ops: Vec::new(),
        pushed: 0,
        error: String::new(),
    };
    let mut conn = match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(c) => c,
        Err(e) => {
            log.error = format!("HTTP connect: {e}");
            return log;
        }
    };
    conn.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let mut rng = Rng::new(seed);
    let end = loop {
        if stop.load(Ordering::Relaxed) {
            break "stopped".to_string();
        }
        let tier = TIERS[rng.below(3) as usize];
        let len = 1 + rng.below(64) as u32;
        let start = log.pushed;
        let mut body = Vec::new();
        for n in start..start + len {
            body.extend(payload(id, n));
            body.push(b'\n');
        }
        let name = match tier {
            Tier::Sync => "sync",
            Tier::Batched => "batched",
            Tier::Buffered => "buffered",
        };
        log.ops.push(Op {
            start,
            len,
            tier,
            state: OpState::Pending,
        });
        log.pushed += len;
        let head = http::post_head(&format!("/v1/records?tier={name}"), "", body.len());
        match http::exchange(&mut conn, &head, &body) {
            Ok(a) if a.status == 200 => log.ops.last_mut().unwrap().state = OpState::Acked,
            Ok(a) if a.status == 429 || a.status == 503 => {
                log.ops.last_mut().unwrap().state = OpState::Nacked;
                if log.error.is_empty() {
                    log.error = format!("HTTP {}", a.status);
                }
            }
            Ok(a) => panic!("k{id}: the HTTP door answered {}: {}", a.status, a.body),
            Err(e) => break e.to_string(),
        }
    };
    log.error = if log.error.is_empty() {
        end
    } else {
        format!("{}; then {end}", log.error)
    };
    log
}

// ---------------------------------------------------------------- plan

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Recovery,
    Reload,
    Rotation,
    Random,
}

#[derive(Debug, Clone, Copy)]
enum Outage {
    None,
    /// 503 for the whole life.
    Whole,
    /// 503 from `from` to `to` ms after pushing starts.
    Stretch(u64, u64),
}

#[derive(Debug, Clone)]
struct Plan {
    kind: Kind,
    /// The main receiver's 503s.
    outage: Outage,
    /// The mirror receiver's 503s, drawn apart from the main one's.
    mirror_outage: Outage,
    /// Pushing lives: ms of pushing before the kill (or the reload).
    push_ms: u64,
    /// Random: producers stop after `push_ms` and the kill comes this many
    /// ms later, while the drain catches up on the backlog (0: no pause).
    quiet_ms: u64,
    /// Recovery: the kill delay as a fraction (per mille) of the median start-up.
    recovery_permille: u64,
    /// Reload: through `ctl reload` (else SIGHUP), and the kill that many µs after.
    reload_via_ctl: bool,
    reload_kill_us: u64,
    /// Seed of the producers' op mixes.
    producer_seed: u64,
}

fn make_plans(seed: u64, cycles: usize) -> Vec<Plan> {
    let mut rng = Rng::new(seed ^ 0x5EED_0FC0_FFEE);
    // Every block of four cycles holds each kind once, in a seeded order.
    let mut kinds = Vec::with_capacity(cycles);
    while kinds.len() < cycles {
        let mut block = [Kind::Recovery, Kind::Reload, Kind::Rotation, Kind::Random];
        for i in (1..block.len()).rev() {
            block.swap(i, rng.below(i as u64 + 1) as usize);
        }
        kinds.extend(block);
    }
    kinds.truncate(cycles);
    // The first life has nothing to recover.
    if kinds[0] == Kind::Recovery && cycles > 1 {
        kinds.swap(0, 1);
    }
    let mut plans: Vec<Plan> = kinds
        .iter()
        .map(|&kind| {
            let push_ms = match kind {
                Kind::Recovery => 0,
                Kind::Reload => 50 + rng.below(450),
                Kind::Rotation => 150 + rng.below(450),
                Kind::Random => 5 + rng.below(895),
            };
            let outage = match kind {
                Kind::Recovery if rng.below(2) == 0 => Outage::Whole,
                Kind::Recovery => Outage::None,
                _ if rng.below(100) < 35 => {
                    let from = rng.below(push_ms.max(1));
                    Outage::Stretch(from, from + 50 + rng.below(450))
                }
                _ => Outage::None,
            };
            Plan {
                kind,
                outage,
                mirror_outage: Outage::None,
                push_ms,
                quiet_ms: if kind == Kind::Random && rng.below(2) == 0 {
                    50 + rng.below(750)
                } else {
                    0
                },
                recovery_permille: rng.below(1300),
                reload_via_ctl: rng.below(10) < 4,
                reload_kill_us: rng.below(5000),
                producer_seed: rng.next_u64(),
            }
        })
        .collect();
    // A recovery cycle recovers a backlog: the life before keeps the
    // receiver at 503 throughout.
    for i in 1..cycles {
        if plans[i].kind == Kind::Recovery && plans[i - 1].kind != Kind::Recovery {
            plans[i - 1].outage = Outage::Whole;
        }
    }
    // The mirror's outages come from a generator of their own (the main
    // plan is what it was with one sink): 503 for a stretch in 40% of the
    // pushing lives, for the whole life in 15% of all lives.
    let mut mrng = Rng::new(seed ^ 0x0317_3A1E_D0C5);
    for p in &mut plans {
        let r = mrng.below(100);
        p.mirror_outage = if r < 15 {
            Outage::Whole
        } else if r < 55 && p.kind != Kind::Recovery {
            let from = mrng.below(p.push_ms.max(1));
            Outage::Stretch(from, from + 50 + mrng.below(450))
        } else {
            Outage::None
        };
    }
    plans
}

// ---------------------------------------------------------------- daemon lives

/// `server.shards` of every life.
const SHARDS: u64 = 2;

/// The sinks, one receiver each: index 0 is `main`, 1 `mirror`, 2 `fan`.
const SINKS: [&str; 3] = ["main", "mirror", "fan"];

/// `batch_records_max` of sink `sink` (index into the receivers) in sink
/// generation `gen`; each sink's cycle is offset so they differ.
fn max_records(sink: usize, gen: u64) -> u64 {
    200 + ((gen + 2 * sink as u64) % 5) * 200
}

/// The most batches sink `sink` may have in flight in sink generation
/// `gen`: the fan has several (a fixed 2, 4 or 8, or the adaptive limit up
/// to 8), the others one.
fn in_flight(sink: usize, gen: u64) -> u64 {
    if SINKS[sink] == "fan" {
        [2, 4, 8, ADAPTIVE_MAX][(gen % 4) as usize]
    } else {
        1
    }
}

/// `batches_in_flight_max` of the fan's adaptive generations.
const ADAPTIVE_MAX: u64 = 8;

/// The `batches_in_flight` keys of sink `sink` in generation `gen`.
fn in_flight_keys(sink: usize, gen: u64) -> String {
    if SINKS[sink] == "fan" && gen % 4 == 3 {
        format!("batches_in_flight = \"adaptive\"\nbatches_in_flight_max = {ADAPTIVE_MAX}\n")
    } else {
        format!("batches_in_flight = {}\n", in_flight(sink, gen))
    }
}

/// The `[sinks.NAME]` tables, one per receiver, of sink generation `gen`
/// (a reload moves to the next: URL path, `batch_records_max`, `linger_ms`).
fn sink_config(rxs: &[Rx], gen: u64, doors: &Doors) -> String {
    let mut out = format!(
        "[server]\nshards = {SHARDS}\n[server.http]\nlisten = \"127.0.0.1:{}\"\ntls = false\n\
         [server.tcp]\nlisten = \"127.0.0.1:{}\"\ncert_file = {:?}\nkey_file = {:?}\n\
         [wab]\nsegment_bytes_max = 1048576\n",
        doors.http_port, doors.tls_port, doors.cert, doors.key
    );
    for (i, rx) in rxs.iter().enumerate() {
        out.push_str(&format!(
            "[sinks.{}]\ntype = \"http\"\nurl = \"{}\"\nbatch_records_max = {}\nlinger_ms = {}\n\
             {}retry_initial_ms = 10\nretry_max_ms = 200\ntimeout_ms = 5000\n",
            rx.name,
            rx.url(&format!("/ingest-{gen}")),
            max_records(i, gen),
            (gen + i as u64) % 4,
            in_flight_keys(i, gen),
        ));
    }
    out
}

/// The network doors every life serves beside the socket: HTTP in the
/// clear on loopback, and the wire protocol over TLS (a throw-away CA).
struct Doors {
    http_port: u16,
    tls_port: u16,
    cert: PathBuf,
    key: PathBuf,
    client: Arc<spillway_tests::tls::ClientConfig>,
    _dir: tempfile::TempDir,
}

impl Doors {
    fn new() -> Doors {
        let dir = tempfile::tempdir().unwrap();
        let ca = spillway_tests::tls::Ca::new("crash loop CA");
        let (cert, key) = ca
            .leaf("spillway", &["localhost"], false)
            .write(dir.path(), "server");
        Doors {
            http_port: free_port(),
            tls_port: free_port(),
            cert,
            key,
            client: spillway_tests::tls::client_config(&ca, None),
            _dir: dir,
        }
    }
}

/// One start of the daemon, spawned without waiting for anything.
struct Life {
    child: Child,
    spawned: Instant,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Life {
    fn spawn(d: &Daemon, n: usize) -> Life {
        let stdout = d.dir().join(format!("life-{n:04}.stdout"));
        let stderr = d.dir().join(format!("life-{n:04}.stderr"));
        let mut cmd = run_command(d.dir());
        cmd.arg("--config")
            .arg(d.config_path())
            .stdout(fs::File::create(&stdout).unwrap())
            .stderr(fs::File::create(&stderr).unwrap());
        let spawned = Instant::now();
        let child = cmd.spawn().expect("spawning spillway");
        Life {
            child,
            spawned,
            stdout,
            stderr,
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child, not reaped yet (we own `child`).
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    fn kill9(mut self) -> (PathBuf, PathBuf) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        (self.stdout, self.stderr)
    }

    fn log(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(
            &fs::read(&self.stderr).unwrap_or_default(),
        ))
    }

    fn listening(&self) -> bool {
        fs::read_to_string(&self.stdout).is_ok_and(|s| s.contains("spillway listening on"))
    }

    /// Wait until the socket answers a health check; the time since spawn.
    fn wait_health(&mut self, socket: &Path, context: &str) -> Duration {
        let deadline = self.spawned + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{context}: spillway exited during start-up with {status}; log:\n{}",
                    self.log()
                );
            }
            if answers_health(socket) {
                return self.spawned.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "{context}: no health answer within {START_TIMEOUT:?}; log:\n{}",
                self.log()
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
}

/// `.open` segment files per shard folder.
fn open_segments(data: &Path) -> Vec<usize> {
    segment_files_per_shard(data)
        .iter()
        .map(|names| names.iter().filter(|n| n.ends_with(".open")).count())
        .collect()
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or_default()
}

/// What happened in one cycle, for the report and for failure messages.
struct CycleNote {
    line: String,
}

// ---------------------------------------------------------------- the test

#[test]
fn crash_loop_keeps_every_acked_record_in_order() {
    let wall = Instant::now();
    let cycles = env_u64("SPILLWAY_CRASH_CYCLES").unwrap_or(20) as usize;
    assert!(cycles >= 1, "SPILLWAY_CRASH_CYCLES must be at least 1");
    let seed = env_u64("SPILLWAY_CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    eprintln!(
        "crash loop: seed {seed:#x} (replay with SPILLWAY_CRASH_SEED={seed:#x}), {cycles} cycles"
    );
    let _ = spillway_bin();
    eprintln!(
        "daemon binary ready after {:.1} s",
        wall.elapsed().as_secs_f64()
    );
    let wall = Instant::now();
    let plans = make_plans(seed, cycles);

    // A receiver per sink: the main one's 503s, the mirror's drawn apart,
    // the fan's the mirror's (a healthy sink beside failing ones).
    let rxs = SINKS.map(Rx::start);
    let outages = |p: &Plan| [p.outage, p.mirror_outage, p.mirror_outage];
    let mut gen = 0u64;
    // Sink generation at the start of each life (index = rx life).
    let mut gens: Vec<u64> = Vec::new();
    let doors = Doors::new();
    let http_port = doors.http_port;
    let mut d = Daemon::configure(&sink_config(&rxs, gen, &doors));
    let socket = d.socket_path().to_path_buf();
    let data = d.data_dir().to_path_buf();
    let mut logs: Vec<ConnLog> = Vec::new();
    let mut notes: Vec<CycleNote> = Vec::new();
    let mut restarts: Vec<Duration> = Vec::new();
    let mut recovery_before_listening = 0usize;
    let mut recovery_before_health = 0usize;
    let mut recovery_with_backlog = 0usize;
    let mut reloads_started = 0usize;
    let mut reloads_applied = 0usize;
    let mut rotation_seal_seen = 0usize;
    let mut error_lines: Vec<String> = Vec::new();

    for (cycle, plan) in plans.iter().enumerate() {
        let life_no = cycle + 1;
        gens.push(gen);
        for rx in &rxs {
            rx.set_life(cycle);
        }
        let backlogs: Vec<u64> = rxs.iter().map(|rx| rx.undelivered_acked(&logs)).collect();
        let backlog = backlogs.iter().copied().max().unwrap_or(0);
        let statuses: Vec<u16> = outages(plan)
            .iter()
            .map(|o| match o {
                Outage::Whole => 503,
                _ => 200,
            })
            .collect();
        for (rx, &status) in rxs.iter().zip(&statuses) {
            rx.set_status(status);
        }
        let context = format!("seed {seed:#x}, cycle {cycle}");
        let mut life = Life::spawn(&d, life_no);
        let line = if plan.kind == Kind::Recovery {
            let est = if restarts.is_empty() {
                Duration::from_millis(40)
            } else {
                median(&restarts)
            };
            let delay = est * plan.recovery_permille as u32 / 1000;
            // A side thread notes when the socket first answers.
            let stop = Arc::new(AtomicBool::new(false));
            let answered_at = Arc::new(Mutex::new(None::<Instant>));
            let poller = {
                let (stop, answered_at, socket) =
                    (stop.clone(), answered_at.clone(), socket.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if answers_health(&socket) {
                            *answered_at.lock().unwrap() = Some(Instant::now());
                            return;
                        }
                        thread::sleep(Duration::from_micros(500));
                    }
                })
            };
            sleep_until(life.spawned + delay);
            let listening = life.listening();
            let killed_at = Instant::now();
            let spawned = life.spawned;
            let (_, stderr) = life.kill9();
            stop.store(true, Ordering::Relaxed);
            poller.join().unwrap();
            let health = answered_at.lock().unwrap().is_some_and(|t| t < killed_at);
            recovery_before_listening += usize::from(!listening);
            recovery_before_health += usize::from(!health);
            recovery_with_backlog += usize::from(backlog > 0 && !health);
            collect_errors(&stderr, life_no, &mut error_lines);
            format!(
                "cycle {cycle:3} recovery: kill {:.1} ms after spawn (median start-up {:.1} ms), \
                 listening {}, health answered {}, backlog ≈{backlogs:?} acked records undelivered \
                 (main, mirror, fan), receivers {statuses:?}",
                killed_at.duration_since(spawned).as_secs_f64() * 1e3,
                est.as_secs_f64() * 1e3,
                yes(listening),
                yes(health),
            )
        } else {
            let restart = life.wait_health(&socket, &context);
            restarts.push(restart);
            let stop = Arc::new(AtomicBool::new(false));
            // The socket's producers, then one over the HTTP door and one
            // over TLS.
            let handles: Vec<_> = (0..CONNECTIONS)
                .map(|p| {
                    let id = (cycle * CONNECTIONS + p) as u32;
                    let socket = socket.clone();
                    let seed = plan.producer_seed ^ (p as u64 + 1).wrapping_mul(0x9E37_79B9);
                    let stop = stop.clone();
                    let (tls_port, tls) = (doors.tls_port, doors.client.clone());
                    thread::spawn(move || match p {
                        HTTP_PRODUCER => post_until_killed(http_port, id, cycle, seed, &stop),
                        TLS_PRODUCER => produce_until_killed(
                            || {
                                let addr = ("127.0.0.1", tls_port);
                                Client::connect_tls(addr, "localhost", tls, Default::default())
                            },
                            id,
                            cycle,
                            TLS_WINDOW,
                            seed,
                            &stop,
                        ),
                        _ => produce_until_killed(
                            || Client::connect(&socket),
                            id,
                            cycle,
                            WINDOWS[p],
                            seed,
                            &stop,
                        ),
                    })
                })
                .collect();
            let t0 = Instant::now();
            // (ms, receiver, status): each receiver's own stretch of 503s.
            let mut events: Vec<(u64, usize, u16)> = Vec::new();
            for (i, outage) in outages(plan).into_iter().enumerate() {
                if let Outage::Stretch(from, to) = outage {
                    events.push((from, i, 503));
                    events.push((to, i, 200));
                }
            }
            events.sort_unstable();
            let kill_ms = plan.push_ms;
            for &(at, i, status) in events.iter().filter(|e| e.0 < kill_ms) {
                sleep_until(t0 + Duration::from_millis(at));
                rxs[i].set_status(status);
            }
            sleep_until(t0 + Duration::from_millis(kill_ms));
            let mut extra = String::new();
            if plan.quiet_ms > 0 {
                stop.store(true, Ordering::Relaxed);
                for rx in &rxs {
                    rx.set_status(200);
                }
                sleep_until(t0 + Duration::from_millis(kill_ms + plan.quiet_ms));
                extra = format!(
                    ", producers stopped and the kill came {} ms later (delivery catching up)",
                    plan.quiet_ms
                );
            }
            let mut ctl_child = None;
            if plan.kind == Kind::Reload {
                gen += 1;
                d.reconfigure(&sink_config(&rxs, gen, &doors));
                let sent = Instant::now();
                if plan.reload_via_ctl {
                    ctl_child = Some(
                        std::process::Command::new(spillway_bin())
                            .args(["ctl", "--config"])
                            .arg(d.config_path())
                            .arg("reload")
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .spawn()
                            .expect("spawning spillway ctl reload"),
                    );
                } else {
                    life.signal(libc::SIGHUP);
                }
                sleep_until(sent + Duration::from_micros(plan.reload_kill_us));
                let log = life.log();
                // Only SIGHUP logs the start of a reload; `ctl reload` logs its end.
                let started = log.contains("SIGHUP: reloading") || log.contains("config reload");
                let applied = log.contains("config reloaded");
                reloads_started += usize::from(started);
                reloads_applied += usize::from(applied);
                extra = format!(
                    ", reload by {} to sink generation {gen}, kill {:.2} ms after it: started in log {}, applied {}",
                    if plan.reload_via_ctl { "ctl reload" } else { "SIGHUP" },
                    sent.elapsed().as_secs_f64() * 1e3,
                    yes(started),
                    yes(applied)
                );
            }
            let (_, stderr) = life.kill9();
            let open = open_segments(&data);
            if open.iter().any(|&n| n >= 3) {
                rotation_seal_seen += 1;
            }
            if let Some(mut c) = ctl_child {
                let answered = match wait_timeout(&mut c, Duration::from_secs(10)) {
                    Some(status) => status.success(),
                    None => {
                        let _ = c.kill();
                        let _ = c.wait();
                        false
                    }
                };
                extra.push_str(&format!(", ctl reload got its answer {}", yes(answered)));
            }
            let born: Vec<ConnLog> = handles
                .into_iter()
                .map(|h| h.join().expect("producer thread"))
                .collect();
            let pushed: u64 = born.iter().map(|l| u64::from(l.pushed)).sum();
            let acked: usize = born.iter().map(|l| l.acked_counters().count()).sum();
            logs.extend(born);
            collect_errors(&stderr, life_no, &mut error_lines);
            format!(
                "cycle {cycle:3} {:<8}: restart {:.1} ms, kill after {kill_ms} ms of pushing, \
                 {pushed} pushed / {acked} acked, outage main {:?} mirror and fan {:?}, \
                 .open segments per shard after the kill {open:?}{extra}",
                format!("{:?}", plan.kind).to_lowercase(),
                restart.as_secs_f64() * 1e3,
                plan.outage,
                plan.mirror_outage,
            )
        };
        eprintln!("{line}");
        notes.push(CycleNote { line });
    }

    // ------------------------------------------------ the last clean start
    gens.push(gen);
    for rx in &rxs {
        rx.set_life(cycles);
        rx.set_status(200);
    }
    let final_life_no = cycles + 1;
    let backlog: Vec<u64> = rxs.iter().map(|rx| rx.undelivered_acked(&logs)).collect();
    let mut life = Life::spawn(&d, final_life_no);
    let restart = life.wait_health(&socket, &format!("seed {seed:#x}, final start"));
    restarts.push(restart);
    let drain_started = Instant::now();
    let mut last_stats = String::new();
    let delivered = wait_until(FINAL_DELIVERY_TIMEOUT, || {
        last_stats = d.ctl(&["stats", "--flat"]);
        shard_stat_sum(&last_stats, "pending_records") == 0
    });
    assert!(
        delivered,
        "seed {seed:#x}: the last start did not deliver its backlog within {FINAL_DELIVERY_TIMEOUT:?}; stats:\n{last_stats}\nlog:\n{}",
        life.log()
    );
    // Quiet: nothing more arrives for a moment.
    wait_until(Duration::from_secs(10), || {
        rxs.iter().all(|rx| {
            rx.state
                .lock()
                .unwrap()
                .last_accept
                .is_none_or(|t| t.elapsed() > Duration::from_millis(300))
        })
    });
    let drain_took = drain_started.elapsed();
    let records_lost = shard_stat_sum(&last_stats, "records_lost");
    let wab_bytes_used = stat(&last_stats, "wab_bytes_used");
    let files_left = segment_files_per_shard(&data);
    let gap_files = gap_reason_files(&data);
    let dead_lettered = shard_stat_sum(&last_stats, "dead_lettered");
    life.signal(libc::SIGTERM);
    let status = wait_timeout(&mut life.child, STOP_TIMEOUT);
    collect_errors(&life.stderr, final_life_no, &mut error_lines);
    assert!(
        status.is_some_and(|s| s.success()),
        "seed {seed:#x}: the last start did not exit 0 after SIGTERM ({status:?}); log:\n{}",
        life.log()
    );
    eprintln!(
        "final start: restart {:.1} ms, backlog ≈{backlog:?} acked records (main, mirror, fan), delivered in {:.2} s; \
         records_lost {records_lost}, dead_lettered {dead_lettered}; with nothing pending: \
         segment files per shard {files_left:?}, wab_bytes_used {wab_bytes_used}, gap reason files {}",
        restart.as_secs_f64() * 1e3,
        drain_took.as_secs_f64(),
        gap_files.len()
    );

    // ------------------------------------------------ checks
    let sts: Vec<_> = rxs.iter().map(|rx| rx.state.lock().unwrap()).collect();
    let mut failures: Vec<String> = Vec::new();
    let mut acked_per_tier = [0u64; 3];
    for l in &logs {
        for op in l.ops.iter().filter(|o| o.state == OpState::Acked) {
            acked_per_tier[tier_index(op.tier)] += u64::from(op.len);
        }
    }
    let findings: Vec<Findings> = sts
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let ordered = gens.iter().all(|&g| in_flight(i, g) == 1);
            check_receiver(st, &logs, ordered)
        })
        .collect();
    for ((rx, st), f) in rxs.iter().zip(&sts).zip(&findings) {
        for (what, list, count) in [
            (
                "acked Sync/Batched records never delivered",
                &f.lost,
                f.lost.len(),
            ),
            (
                "acked Buffered records never delivered (Buffered survives a daemon crash)",
                &f.buffered_lost,
                f.buffered_lost.len(),
            ),
            (
                "records missing below a later delivered record of the same connection (no nack)",
                &f.holes,
                f.holes.len(),
            ),
            (
                "connections whose first arrivals are out of push order",
                &f.order,
                f.order.len(),
            ),
            (
                "delivered records beyond what was pushed",
                &f.phantom,
                f.phantom.len(),
            ),
            ("bad bodies at the receiver", &st.bad, st.bad_count as usize),
        ] {
            if !list.is_empty() {
                failures.push(format!(
                    "sink {}: {count} {what}; first: {:#?}",
                    rx.name,
                    &list[..list.len().min(8)]
                ));
            }
        }
    }
    // The daemon's own account: a loss it reports must be a real one.
    let any_loss = findings
        .iter()
        .any(|f| !f.lost.is_empty() || !f.buffered_lost.is_empty() || !f.holes.is_empty());
    if records_lost > 0 && !any_loss {
        failures.push(format!(
            "the daemon reports records_lost = {records_lost} (an ERROR \"acknowledged records are missing\" \
             at start-up, {} quarantine/gap-*.reason files: {:?}), yet every record it acked was delivered \
             to every sink: a false loss report; segment files left per shard once everything was delivered: {files_left:?}",
            gap_files.len(),
            &gap_files[..gap_files.len().min(4)]
        ));
    }

    // ------------------------------------------------ duplicates per kill
    // Life `l` (index = cycle, `cycles` = the final start) begins after the
    // kill that ended life `l - 1`. A sink has at most `batches_in_flight`
    // batches unsettled per shard (one for main and mirror) and writes its
    // cursor after every confirmed prefix of them, so what a kill makes it
    // offer again is at most the batches each shard had out: shards ×
    // batches_in_flight × max_records, as issue 18 puts it.
    // Duplicates are counted in the life they arrive in, and a 503 is not
    // taken, so a refused re-offer adds nothing there: the in-flight batch
    // of a shard is carried to the next life in which that shard's request
    // is accepted. The bound is therefore per shard: the batch was built in
    // the last life `k` < `l` in which the receiver accepted a request of
    // that shard, under the generation life `k` started with or the one a
    // reload in it moved to (`batch_records_max` differs between generations),
    // not necessarily under life `l - 1`'s. Seen with seed
    // 0x18edbd2727ad8923: the mirror got 1800 duplicates in life 11 whose
    // own generation had max_records 200 (2 × 200 = 400), 800 of them first
    // delivered in life 5 (max_records 800) and 1000 in life 8 (1000):
    // lives 6 to 10 accepted nothing of those shards from the mirror (two
    // recovery kills at 15 and 62 ms, a 503 stretch over the first offer,
    // a 99 ms life, a life of 503), so each shard's one in-flight batch
    // arrived again only in life 11: 800 + 1000, within the per-shard bound.
    let mut dup_lines: Vec<String> = Vec::new();
    let mut dup_summary: Vec<String> = Vec::new();
    for (i, (rx, st)) in rxs.iter().zip(&sts).enumerate() {
        let dups: Vec<u64> = st
            .dups_per_life
            .iter()
            .copied()
            .chain(std::iter::repeat(0))
            .take(cycles + 1)
            .collect();
        // What life k's batches unsettled at its kill could hold: batches of
        // either of its generations, as many as either allows.
        let life_bound = |k: usize| {
            let (a, b) = (gens[k], gens[(k + 1).min(cycles)]);
            in_flight(i, a).max(in_flight(i, b)) * max_records(i, a).max(max_records(i, b))
        };
        // (life k the in-flight batches were built in, bound) per life and shard.
        let shard_bound = |l: usize, shard: u32| -> (Option<usize>, u64) {
            let last_accepted = st
                .lives_by_shard
                .get(&shard)
                .and_then(|lives| lives.range(..l).next_back().copied());
            // What life `l` gets again may have been first sent in any life
            // since the earliest its duplicates came from. With several
            // batches out, a life can have later batches of a shard
            // accepted while its head batch is not (seen with seed
            // 0x18edce07d97fe764: 1200 records of life 0's 2 × 1000 sent
            // again in life 3, life 1 having had batches of 200 accepted
            // behind a head answered 503). One batch at a time, a batch a
            // kill left unconfirmed is sent again in smaller ones after a
            // reload lowered max_records, over several lives (seed
            // 0x18ee07383de96d4a: life 7's batch of 1000, 200 of it
            // accepted again in life 9, the other 800 in life 10). Each of
            // those lives cut its batches from the same checkpoint, so the
            // largest of their windows bounds them all.
            let earliest = st.dup_origins.get(l).and_then(|o| o.keys().next().copied());
            let k = match (earliest, last_accepted) {
                (Some(e), Some(a)) => Some(e.min(a)),
                (e, a) => e.or(a),
            };
            let bound = k.map_or(0, |k| (k..l).map(life_bound).max().unwrap_or(0));
            (k, bound)
        };
        let bounds: Vec<u64> = (0..=cycles)
            .map(|l| (0..SHARDS as u32).map(|s| shard_bound(l, s).1).sum())
            .collect();
        for l in 0..=cycles {
            let Some(by_shard) = st.dups_by_shard.get(l) else {
                continue;
            };
            for (&shard, &n) in by_shard {
                let (k, bound) = shard_bound(l, shard);
                if n > bound {
                    let built = match k.and_then(|k| notes.get(k)) {
                        Some(note) => note.line.as_str(),
                        None => "(no earlier life)",
                    };
                    failures.push(format!(
                        "sink {}: {n} duplicates of shard {shard} in life {l}, more than its batches in flight \
                         (batches_in_flight × max_records {bound}, of the generations of life {k:?}, the last before it in which \
                         a request of that shard was accepted); first copies arrived in lives (life: count) {:?}; \
                         records first delivered per life up to it: {:?}; the most records in one request per life: {:?}; \
                         life {k:?} was: {built}",
                        rx.name,
                        st.dup_origins.get(l),
                        &st.firsts_per_life[..(l + 1).min(st.firsts_per_life.len())],
                        &st.max_request_per_life[..(l + 1).min(st.max_request_per_life.len())],
                    ));
                }
            }
        }
        // Per kill: lives 1..=cycles, each started after a SIGKILL.
        let mut per_kill: Vec<u64> = dups[1..].to_vec();
        per_kill.sort_unstable();
        let median = per_kill.get(per_kill.len() / 2).copied().unwrap_or(0);
        let max = per_kill.last().copied().unwrap_or(0);
        let total: u64 = dups.iter().sum();
        let with_dups = per_kill.iter().filter(|&&n| n > 0).count();
        dup_lines.push(format!(
            "sink {}: duplicates delivered per life (index = cycle, last = final start): {dups:?}; \
             bound per life (the sum over shards of batches_in_flight × max_records): {bounds:?}; \
             by the life of the first copy: {:?}",
            rx.name,
            st.dup_origins
                .iter()
                .enumerate()
                .filter(|(_, o)| !o.is_empty())
                .collect::<Vec<_>>()
        ));
        dup_summary.push(format!(
            "{} total {total}, per kill median {median}, max {max} ({with_dups} of {} kills gave some)",
            rx.name,
            per_kill.len()
        ));
    }

    // ------------------------------------------------ report
    let restart_median = median(&restarts);
    let restart_max = restarts.iter().max().copied().unwrap_or_default();
    let kinds = |k: Kind| plans.iter().filter(|p| p.kind == k).count();
    for line in &dup_lines {
        eprintln!("{line}");
    }
    if !error_lines.is_empty() {
        eprintln!(
            "{} ERROR lines in the daemon logs; first: {:#?}",
            error_lines.len(),
            &error_lines[..error_lines.len().min(8)]
        );
    }
    eprintln!(
        "kill windows: {} recovery cycles ({recovery_before_listening} killed before \"listening\", \
         {recovery_before_health} before the first health answer, {recovery_with_backlog} of those with a backlog), \
         {} reload cycles ({reloads_started} with the reload started in the log by the kill, {reloads_applied} applied), \
         {} rotation + {} random cycles ({rotation_seal_seen} kills left a shard with ≥3 .open segments: a seal in progress)",
        kinds(Kind::Recovery),
        kinds(Kind::Reload),
        kinds(Kind::Rotation),
        kinds(Kind::Random),
    );
    let per_sink: Vec<String> = rxs
        .iter()
        .zip(&sts)
        .zip(&findings)
        .map(|((rx, st), f)| {
            format!(
                "{}: buffered acked survived {}, lost {}; {} distinct records in {} copies \
                 ({} requests accepted, {} answered 503)",
                rx.name,
                f.buffered_survived,
                f.buffered_lost.len(),
                st.distinct,
                st.copies,
                st.accepted_requests,
                st.refused_requests,
            )
        })
        .collect();
    // The HTTP producers' share: a run where none got a 200 checked nothing of the door.
    let acked_by = |which: usize| -> usize {
        logs.iter()
            .filter(|l| l.id as usize % CONNECTIONS == which)
            .map(|l| l.acked_counters().count())
            .sum()
    };
    let (http_acked, tls_acked) = (acked_by(HTTP_PRODUCER), acked_by(TLS_PRODUCER));
    if http_acked == 0 {
        failures.push("no record posted over the HTTP door was acknowledged in any life".into());
    }
    if tls_acked == 0 {
        failures.push("no record pushed over TLS was acknowledged in any life".into());
    }
    eprintln!(
        "SUMMARY crash loop: seed {seed:#x}, {cycles} cycles; acked records sync {} batched {} buffered {} \
         ({http_acked} of them over HTTP, {tls_acked} over TLS); \
         {}; duplicates {}; restart (spawn to health) median {:.1} ms, max {:.1} ms over {} starts; wall time {:.1} s",
        acked_per_tier[0],
        acked_per_tier[1],
        acked_per_tier[2],
        per_sink.join("; "),
        dup_summary.join("; "),
        restart_median.as_secs_f64() * 1e3,
        restart_max.as_secs_f64() * 1e3,
        restarts.len(),
        wall.elapsed().as_secs_f64()
    );

    if !failures.is_empty() {
        let kept = keep_logs(&d, seed);
        let cycles_involved: BTreeSet<usize> = findings
            .iter()
            .flat_map(|f| [&f.lost, &f.buffered_lost, &f.holes, &f.order])
            .flat_map(|l| l.iter())
            .filter_map(|s| {
                s.split("(cycle ")
                    .nth(1)?
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        let involved: Vec<&str> = cycles_involved
            .iter()
            .filter_map(|c| notes.get(*c).map(|n| n.line.as_str()))
            .collect();
        panic!(
            "crash loop FAILED: seed {seed:#x} (replay with SPILLWAY_CRASH_SEED={seed:#x} SPILLWAY_CRASH_CYCLES={cycles}); \
             daemon logs kept in {}\n{}\ncycles involved:\n{}\nERROR lines in the daemon logs: {:#?}",
            kept.display(),
            failures.join("\n"),
            involved.join("\n"),
            &error_lines[..error_lines.len().min(10)]
        );
    }
    assert!(
        kinds(Kind::Recovery) < 2 || recovery_before_health > 0,
        "seed {seed:#x}: no recovery cycle killed the daemon before it answered a health check: the kill moments miss the recovery window"
    );
    drop(sts);
    drop(d);
}

/// What one receiver got, held against what the producers pushed.
#[derive(Default)]
struct Findings {
    buffered_survived: u64,
    buffered_lost: Vec<String>,
    lost: Vec<String>,
    holes: Vec<String>,
    order: Vec<String>,
    phantom: Vec<String>,
}

/// The per-receiver checks: every acked record delivered, no hole below a
/// delivered record except where a push was nacked, first arrivals in push
/// order, nothing delivered beyond what was pushed.
fn check_receiver(st: &RxState, logs: &[ConnLog], ordered: bool) -> Findings {
    let mut f = Findings::default();
    let empty = ConnRx::default();
    for l in logs {
        let c = st.conns.get(&l.id).unwrap_or(&empty);
        let where_ = |n: u32| {
            let op = l.op_of(n).expect("an op per pushed counter");
            format!(
                "k{}:{n} (cycle {}, window {}, {:?} {}, op {}..{} {:?})",
                l.id,
                l.cycle,
                l.window,
                op.tier,
                if op.len > 1 { "batch" } else { "push" },
                op.start,
                op.start + op.len,
                op.state
            )
        };
        for op in l.ops.iter().filter(|o| o.state == OpState::Acked) {
            for n in op.start..op.start + op.len {
                match (op.tier, c.has(n)) {
                    (Tier::Buffered, true) => f.buffered_survived += 1,
                    (Tier::Buffered, false) => f.buffered_lost.push(where_(n)),
                    (_, false) => f.lost.push(where_(n)),
                    (_, true) => {}
                }
            }
        }
        if let Some(max) = c.max_delivered() {
            if max >= l.pushed {
                f.phantom.push(format!(
                    "k{}: counter {max} delivered, only 0..{} were pushed",
                    l.id, l.pushed
                ));
            }
            for n in 0..max.min(l.pushed) {
                if !c.has(n) && l.op_of(n).is_some_and(|o| o.state != OpState::Nacked) {
                    f.holes.push(format!(
                        "{} missing below delivered k{}:{max}",
                        where_(n),
                        l.id
                    ));
                }
            }
        }
        // First arrivals in push order (a redelivered suffix may repeat).
        if !ordered {
            continue;
        }
        let mut last: Option<u32> = None;
        let mut seen = HashSet::new();
        for (i, &n) in c.arrivals.iter().enumerate() {
            if !seen.insert(n) {
                continue;
            }
            if let Some(prev) = last {
                if n <= prev {
                    f.order.push(format!(
                        "k{} (cycle {}): arrival #{i} is counter {n}, first seen after {prev}; arrivals around it: {:?}",
                        l.id,
                        l.cycle,
                        &c.arrivals[i.saturating_sub(5)..(i + 5).min(c.arrivals.len())]
                    ));
                    break;
                }
            }
            last = Some(n);
        }
    }
    f
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// A daemon-wide `key value` line of `ctl stats`.
fn stat(stats: &str, key: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in ctl stats:\n{stats}"))
}

/// Shard folders of the data folder, sorted.
fn shard_folders(data: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(data)
        .map(|es| es.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("shard-"))
    });
    out.sort();
    out
}

/// Names of the segment files (`.open` or `.sealed`) of each shard.
fn segment_files_per_shard(data: &Path) -> Vec<Vec<String>> {
    shard_folders(data)
        .iter()
        .map(|s| {
            let mut names: Vec<String> = fs::read_dir(s)
                .map(|es| {
                    es.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.ends_with(".open") || n.ends_with(".sealed"))
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            names
        })
        .collect()
}

/// `shard-NNN/quarantine/gap-*.reason` files: losses recovery reported.
fn gap_reason_files(data: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for s in shard_folders(data) {
        if let Ok(es) = fs::read_dir(s.join("quarantine")) {
            for e in es.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("gap-") {
                    out.push(format!(
                        "{}/{name}",
                        s.file_name().unwrap().to_string_lossy()
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

/// ERROR lines of a life's log, prefixed with the life.
fn collect_errors(stderr: &Path, life: usize, out: &mut Vec<String>) {
    let text = strip_ansi(&String::from_utf8_lossy(
        &fs::read(stderr).unwrap_or_default(),
    ));
    for l in text.lines().filter(|l| l.contains("ERROR")) {
        out.push(format!("life {life}: {l}"));
    }
}

/// Copy the daemon's logs out of the temporary folder (which goes away).
fn keep_logs(d: &Daemon, seed: u64) -> PathBuf {
    let dest = std::env::temp_dir().join(format!("spillway-crash-loop-{seed:x}"));
    let _ = fs::create_dir_all(&dest);
    if let Ok(entries) = fs::read_dir(d.dir()) {
        for e in entries.flatten() {
            let name = e.file_name();
            if name.to_string_lossy().starts_with("life-") || name == "spillway.toml" {
                let _ = fs::copy(e.path(), dest.join(&name));
            }
        }
    }
    // The data folder too (segments, checkpoints, quarantine), for `spillway inspect`.
    copy_tree(d.data_dir(), &dest.join("data"));
    dest
}

fn copy_tree(from: &Path, to: &Path) {
    let _ = fs::create_dir_all(to);
    if let Ok(entries) = fs::read_dir(from) {
        for e in entries.flatten() {
            let target = to.join(e.file_name());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                copy_tree(&e.path(), &target);
            } else {
                let _ = fs::copy(e.path(), target);
            }
        }
    }
}
