//! The simulated sink: what the drain delivers to. Its answers follow a
//! [`SinkMode`] the schedule sets and the seed: it commits, asks to retry
//! (with and without a retry-after), splits a batch (committed, rejected
//! and retried records), times out (virtual time passes, then a retry),
//! panics, fails its health check, and fails to be created. Everything it
//! received and everything it took for good is logged for the checks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sink_sdk::delivery::{factory_fn, SinkFactory};
use sink_sdk::exactly_once::{ExactlyOnce, Position, Transactions, Txn};
use sink_sdk::{Batch, Health, Limits, Outcome, Record, RecordOutcome, Sink};
use spillway_actors::Clock;

use crate::rng::Rng;

/// How the downstream behaves for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Commits every batch.
    Healthy,
    /// Mostly commits; sometimes retries, splits, times out or panics.
    Flaky,
    /// Down: every batch is retried, health checks fail.
    Down,
    /// Rejects some records for good (they go to the dead-letter store).
    Picky,
}

/// What the sink saw.
#[derive(Debug, Default)]
pub struct SinkLog {
    /// Every record offered, in order: (seq, payload, the start it was
    /// offered in).
    pub offered: Vec<(u64, Vec<u8>, u64)>,
    /// Records the sink took for good (committed): seq -> payload.
    pub committed: BTreeSet<(u64, Vec<u8>)>,
    /// Committed records in the order they were taken, for the order check.
    pub committed_order: Vec<(u64, Vec<u8>)>,
    pub batches: u64,
    pub panics: u64,
    pub timeouts: u64,
    pub splits: u64,
    pub retries: u64,
    pub instances: u64,
    pub failed_creations: u64,
}

/// The script shared by every instance: the mode and the chance.
pub struct SinkScript {
    pub mode: Mutex<SinkMode>,
    pub rng: Mutex<Rng>,
    pub log: Mutex<SinkLog>,
    pub clock: Clock,
    /// Starts of the daemon so far (the world counts them).
    pub starts: AtomicU64,
    /// Whether the downstream has transactions: instances are then
    /// [`ExactlyOnce`] over [`Downstream`], as the Kafka sink's are.
    transactional: AtomicBool,
    /// The transactional downstream (outlives every instance, start and
    /// crash of the daemon, as a Kafka cluster does).
    pub downstream: Mutex<Downstream>,
}

/// A downstream with transactions, modelled on Kafka's: one writer per
/// shard at a time (opening fences the last one and aborts its open
/// transaction), records and the shard's position committed together,
/// the position read back at every open.
#[derive(Debug, Default)]
pub struct Downstream {
    /// Committed records, in commit order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Seqs committed more than once: what exactly once forbids.
    pub twice: Vec<u64>,
    /// The shard's committed position.
    pub position: Option<Position>,
    /// The writer that may commit (bumped by each open).
    pub epoch: u64,
    /// The open transaction's records (its writer is the current epoch's).
    open: Option<Vec<(u64, Vec<u8>)>>,
    pub opens: u64,
    pub commits: u64,
    /// Commits whose answer was lost (an error of unknown end, or a panic
    /// after the commit).
    pub answers_lost: u64,
    /// Transactions left open by a writer that died before its commit,
    /// aborted by the next open.
    pub abandoned: u64,
    pub aborts: u64,
    pub refusals: u64,
}

impl Downstream {
    fn commit(&mut self, log: &mut SinkLog, position: &Position) {
        let records = self.open.take().expect("an open transaction");
        for (seq, payload) in records {
            if self.records.iter().any(|(s, _)| *s == seq) {
                self.twice.push(seq);
            }
            log.committed.insert((seq, payload.clone()));
            log.committed_order.push((seq, payload.clone()));
            self.records.push((seq, payload));
        }
        self.position = Some(position.clone());
        self.commits += 1;
    }
}

impl SinkScript {
    pub fn new(seed: u64, clock: Clock) -> Arc<SinkScript> {
        Arc::new(SinkScript {
            mode: Mutex::new(SinkMode::Healthy),
            rng: Mutex::new(Rng::new(seed)),
            log: Mutex::new(SinkLog::default()),
            clock,
            starts: AtomicU64::new(0),
            transactional: AtomicBool::new(false),
            downstream: Mutex::new(Downstream::default()),
        })
    }

    /// From now on the downstream has transactions (see [`Downstream`]).
    pub fn set_transactional(&self) {
        self.transactional.store(true, Ordering::Relaxed);
    }

    pub fn is_transactional(&self) -> bool {
        self.transactional.load(Ordering::Relaxed)
    }

    pub fn set_mode(&self, mode: SinkMode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn mode(&self) -> SinkMode {
        *self.mode.lock().unwrap()
    }

    fn roll(&self, n: u64) -> u64 {
        self.rng.lock().unwrap().below(n)
    }

    /// The factory the drain's sink slot holds, described as
    /// `description`; `limit` caps batches.
    pub fn factory(self: &Arc<Self>, limit: usize, description: &str) -> Arc<dyn SinkFactory> {
        let script = self.clone();
        factory_fn(description, move |_shard| {
            if script.mode() == SinkMode::Flaky && script.roll(20) == 0 {
                script.log.lock().unwrap().failed_creations += 1;
                return Err("simulated: the downstream refused the connection".into());
            }
            script.log.lock().unwrap().instances += 1;
            if script.is_transactional() {
                return Ok(Box::new(TxnSimSink {
                    script: script.clone(),
                    limit,
                    exactly: ExactlyOnce::new(SimTxn {
                        script: script.clone(),
                        epoch: None,
                    }),
                }) as Box<dyn Sink>);
            }
            Ok(Box::new(SimSink {
                script: script.clone(),
                limit,
            }) as Box<dyn Sink>)
        })
    }
}

struct SimSink {
    script: Arc<SinkScript>,
    limit: usize,
}

/// The panic message of the simulated sink (the test's panic hook keeps
/// these quiet).
pub const SIM_PANIC: &str = "simulated sink panic";

impl SinkScript {
    /// A batch offered to an instance, logged.
    fn offered(&self, batch: &Batch<'_>) {
        let mut log = self.log.lock().unwrap();
        log.batches += 1;
        for r in batch.records() {
            log.offered.push((
                r.seq,
                r.payload.to_vec(),
                self.starts.load(Ordering::Relaxed),
            ));
        }
    }

    /// What every instance's health check answers.
    fn health(&self) -> Health {
        match self.mode() {
            SinkMode::Down => Health::Unhealthy("simulated: down".into()),
            _ => Health::Healthy,
        }
    }
}

/// Every instance's batch limits: `limit` records.
fn limits(limit: usize) -> Limits {
    Limits {
        max_records: limit,
        max_bytes: 64 * 1024,
    }
}

impl Sink for SimSink {
    fn name(&self) -> &str {
        "sim"
    }

    fn limits(&self) -> Limits {
        limits(self.limit)
    }

    fn health_check(&mut self) -> Health {
        self.script.health()
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let s = &self.script;
        let records = batch.records();
        s.offered(batch);
        let mode = s.mode();
        let roll = s.roll(100);
        let commit = |upto: usize| {
            let mut log = s.log.lock().unwrap();
            for r in &records[..upto] {
                log.committed.insert((r.seq, r.payload.to_vec()));
                log.committed_order.push((r.seq, r.payload.to_vec()));
            }
        };
        match mode {
            SinkMode::Down => {
                s.log.lock().unwrap().retries += 1;
                if roll < 30 {
                    s.log.lock().unwrap().timeouts += 1;
                    s.clock.advance(Duration::from_secs(5));
                    return Outcome::Retry {
                        after: None,
                        reason: "simulated: request timed out".into(),
                    };
                }
                Outcome::Retry {
                    after: (roll < 60).then_some(Duration::from_millis(roll * 10)),
                    reason: "simulated: 503".into(),
                }
            }
            SinkMode::Flaky if roll < 5 => {
                s.log.lock().unwrap().panics += 1;
                panic!("{SIM_PANIC}");
            }
            SinkMode::Flaky if roll < 15 => {
                s.log.lock().unwrap().timeouts += 1;
                s.clock.advance(Duration::from_secs(2));
                Outcome::Retry {
                    after: None,
                    reason: "simulated: request timed out".into(),
                }
            }
            SinkMode::Flaky if roll < 30 => {
                s.log.lock().unwrap().retries += 1;
                Outcome::Retry {
                    after: Some(Duration::from_millis(50)),
                    reason: "simulated: 429".into(),
                }
            }
            SinkMode::Flaky | SinkMode::Picky if roll < 55 => {
                // Split: commit a head, maybe reject some (Picky), then
                // maybe ask to retry the rest.
                s.log.lock().unwrap().splits += 1;
                let mut out = Vec::with_capacity(records.len());
                let retry_from = if mode == SinkMode::Flaky {
                    s.roll(records.len() as u64 + 1) as usize
                } else {
                    records.len()
                };
                let mut log = s.log.lock().unwrap();
                for (i, r) in records.iter().enumerate() {
                    if i >= retry_from {
                        out.push(RecordOutcome::Retry);
                    } else if mode == SinkMode::Picky && r.payload.len() % 3 == 0 {
                        out.push(RecordOutcome::Rejected(format!(
                            "simulated: record {} rejected",
                            r.seq
                        )));
                    } else {
                        // Committed records after a Retry are offered again
                        // anyway; only those before it count here.
                        log.committed.insert((r.seq, r.payload.to_vec()));
                        log.committed_order.push((r.seq, r.payload.to_vec()));
                        out.push(RecordOutcome::Committed);
                    }
                }
                Outcome::Split(out)
            }
            _ => {
                commit(records.len());
                Outcome::Committed
            }
        }
    }
}

/// An instance over the transactional [`Downstream`]: the same
/// [`ExactlyOnce`] adapter as the Kafka sink.
struct TxnSimSink {
    script: Arc<SinkScript>,
    limit: usize,
    exactly: ExactlyOnce<SimTxn>,
}

impl Sink for TxnSimSink {
    fn name(&self) -> &str {
        "sim-transactional"
    }

    fn limits(&self) -> Limits {
        limits(self.limit)
    }

    fn health_check(&mut self) -> Health {
        self.script.health()
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        self.script.offered(batch);
        self.exactly.deliver(batch)
    }
}

/// One writer of the [`Downstream`]; its answers follow the script's mode.
struct SimTxn {
    script: Arc<SinkScript>,
    /// Its epoch once opened.
    epoch: Option<u64>,
}

impl Transactions for SimTxn {
    fn open(&mut self) -> Result<Option<Position>, String> {
        let s = &self.script;
        if s.mode() == SinkMode::Down || (s.mode() == SinkMode::Flaky && s.roll(10) == 0) {
            return Err("simulated: the cluster did not answer the open".into());
        }
        let mut d = s.downstream.lock().unwrap();
        d.epoch += 1;
        d.opens += 1;
        if d.open.take().is_some() {
            d.abandoned += 1;
        }
        self.epoch = Some(d.epoch);
        Ok(d.position.clone())
    }

    fn transact(&mut self, records: &[&Record<'_>], position: &Position) -> Txn {
        let s = &self.script;
        let mode = s.mode();
        let roll = s.roll(100);
        let mut d = s.downstream.lock().unwrap();
        if self.epoch != Some(d.epoch) {
            return Txn::Unknown("simulated: fenced by a newer writer".into());
        }
        if mode == SinkMode::Down {
            d.aborts += 1;
            return Txn::Aborted("simulated: no broker answers".into());
        }
        if mode == SinkMode::Picky {
            let refused: Vec<(usize, String)> = records
                .iter()
                .enumerate()
                .filter(|(_, r)| r.payload.len() % 3 == 0)
                .map(|(i, r)| (i, format!("simulated: record {} refused for good", r.seq)))
                .collect();
            if !refused.is_empty() {
                d.refusals += 1;
                return Txn::Refused(refused);
            }
        }
        d.open = Some(
            records
                .iter()
                .map(|r| (r.seq, r.payload.to_vec()))
                .collect(),
        );
        if mode == SinkMode::Flaky {
            match roll {
                // The writer dies with its transaction open (the
                // process, as far as the downstream can tell).
                0..=4 => {
                    drop(d);
                    s.log.lock().unwrap().panics += 1;
                    panic!("{SIM_PANIC}");
                }
                // Committed, then the writer dies before it hears so.
                5..=9 => {
                    d.commit(&mut s.log.lock().unwrap(), position);
                    d.answers_lost += 1;
                    drop(d);
                    s.log.lock().unwrap().panics += 1;
                    panic!("{SIM_PANIC}");
                }
                // Committed, and the answer lost (a commit that timed out
                // after it took effect).
                10..=14 => {
                    d.commit(&mut s.log.lock().unwrap(), position);
                    d.answers_lost += 1;
                    return Txn::Unknown("simulated: the commit timed out".into());
                }
                // Not committed, and its end unknown.
                15..=19 => {
                    return Txn::Unknown("simulated: the coordinator went away".into());
                }
                20..=29 => {
                    d.open = None;
                    d.aborts += 1;
                    return Txn::Aborted("simulated: a broker went down mid-transaction".into());
                }
                _ => {}
            }
        }
        d.commit(&mut s.log.lock().unwrap(), position);
        Txn::Committed
    }

    fn close(&mut self) {
        self.epoch = None;
    }
}
