//! The simulated sink: what the drain delivers to. Its answers follow a
//! [`SinkMode`] the schedule sets and the seed: it commits, asks to retry
//! (with and without a retry-after), splits a batch (committed, rejected
//! and retried records), times out (virtual time passes, then a retry),
//! panics, fails its health check, and fails to be created. Everything it
//! received and everything it took for good is logged for the checks.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sink_sdk::delivery::{factory_fn, SinkFactory};
use sink_sdk::{Batch, Health, Limits, Outcome, RecordOutcome, Sink};
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
}

impl SinkScript {
    pub fn new(seed: u64, clock: Clock) -> Arc<SinkScript> {
        Arc::new(SinkScript {
            mode: Mutex::new(SinkMode::Healthy),
            rng: Mutex::new(Rng::new(seed)),
            log: Mutex::new(SinkLog::default()),
            clock,
            starts: AtomicU64::new(0),
        })
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

impl Sink for SimSink {
    fn name(&self) -> &str {
        "sim"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_records: self.limit,
            max_bytes: 64 * 1024,
        }
    }

    fn health_check(&mut self) -> Health {
        match self.script.mode() {
            SinkMode::Down => Health::Unhealthy("simulated: down".into()),
            _ => Health::Healthy,
        }
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let s = &self.script;
        let records = batch.records();
        {
            let mut log = s.log.lock().unwrap();
            log.batches += 1;
            for r in records {
                log.offered
                    .push((r.seq, r.payload.to_vec(), s.starts.load(Ordering::Relaxed)));
            }
        }
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
