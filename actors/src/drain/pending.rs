//! What a cursor holds between reading and confirming: the records read
//! and not yet confirmed, in order ([`Pending`]), with the batches offered
//! over their head ([`Flights`]), and what a sink's answer settles of a
//! batch ([`Settlement`]). The confirmed point moves only over a
//! contiguous prefix of finished batches, however the answers come back:
//! [`Pending::settled_head`] gives the finished batch at the head, and
//! only [`Pending::take`] lets records go.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sink_sdk::{Outcome, RecordOutcome};
use spillway_wab::deadletter::DeadLetter;
use spillway_wab::format::RECORD_HEADER_LEN;
use spillway_wab::StoredRecord;

use super::in_flight::{Flight, FlightState, Flights};
use crate::shard::Until;

/// The records one cursor has read and not yet confirmed, in order, and
/// the batches offered over their head.
pub(super) struct Pending {
    records: VecDeque<StoredRecord>,
    /// Payload bytes of `records`.
    bytes: usize,
    /// When the oldest record not offered yet was read (linger starts
    /// there).
    since: Option<Instant>,
    /// Batches offered and not yet settled, and the limit on them.
    pub flights: Flights,
}

impl Pending {
    pub(super) fn new(flights: Flights) -> Self {
        Pending {
            records: VecDeque::new(),
            bytes: 0,
            since: None,
            flights,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The first `n` records held, in order.
    pub(super) fn first(&self, n: usize) -> impl Iterator<Item = &StoredRecord> + Clone {
        self.records.iter().take(n)
    }

    /// The oldest record not yet confirmed.
    pub(super) fn front(&self) -> Option<&StoredRecord> {
        self.records.front()
    }

    /// Records and payload bytes read and not offered yet.
    pub(super) fn unsent(&self) -> (usize, usize) {
        (
            self.records.len() - self.flights.records,
            self.bytes - self.flights.bytes,
        )
    }

    /// Records and payload bytes held, less those in flight when `ahead`
    /// (reading ahead of the batches out): what a full batch is measured
    /// against.
    pub(super) fn held(&self, ahead: bool) -> (usize, usize) {
        if ahead {
            self.unsent()
        } else {
            (self.records.len(), self.bytes)
        }
    }

    /// Takes `rec`, read at `now()` (asked only when linger starts with
    /// it); every record is past the one before.
    pub(super) fn push(&mut self, rec: StoredRecord, now: impl FnOnce() -> Instant) {
        if let Some(last) = self.records.back() {
            assert!(
                rec.seq > last.seq,
                "a reader returned seq {} after seq {}",
                rec.seq,
                last.seq
            );
        }
        if self.records.len() == self.flights.records {
            self.since = Some(now());
        }
        self.bytes += rec.payload.len();
        self.records.push_back(rec);
    }

    /// Lets the oldest record go unconfirmed (skipped), with every flight.
    pub(super) fn drop_front(&mut self) -> Option<StoredRecord> {
        let r = self.records.pop_front()?;
        self.bytes -= r.payload.len();
        Some(r)
    }

    /// Forgets every record and flight (the cursor reads again from its
    /// confirmed point): answers still to come find no flight.
    pub(super) fn clear(&mut self) {
        self.flights.abandon();
        self.records.clear();
        self.bytes = 0;
        self.since = None;
    }

    /// Linger starts again for what is held now (at `now`).
    pub(super) fn restart_linger(&mut self, now: Instant) {
        self.since = (!self.records.is_empty()).then_some(now);
    }

    /// Bytes of the records held as the segments count them (frames).
    pub(super) fn frame_bytes(&self) -> u64 {
        (self.bytes + self.records.len() * RECORD_HEADER_LEN) as u64
    }

    /// The arrival time of the oldest record held, 0 with none.
    pub(super) fn oldest_arrival_us(&self) -> u64 {
        self.records.front().map_or(0, |r| r.meta.arrival_unix_us)
    }

    /// How long the records not offered yet may still linger (`linger`
    /// after the oldest was read; `elapsed` says how long ago an instant
    /// is).
    pub(super) fn linger_left(
        &self,
        linger: Duration,
        elapsed: impl Fn(Instant) -> Duration,
    ) -> Duration {
        self.since
            .map_or(Duration::ZERO, |t| linger.saturating_sub(elapsed(t)))
    }

    /// What the records read and not offered yet wait for: as many more
    /// durable records (or bytes) as fill a batch. Fewer would not change
    /// what is offered, only wake the cursor (every group commit did,
    /// thousands of times a second per sink). A full batch waits for a
    /// slot, which only an answer (the cursor's bell) frees. The cursor
    /// read up to what it saw unless the batch was full, so the counts
    /// start there.
    pub(super) fn until_fuller(&self, max_records: usize, max_bytes: usize) -> Until {
        let (unsent, unsent_bytes) = self.unsent();
        if unsent >= max_records || unsent_bytes >= max_bytes {
            return Until::Grown {
                records: u64::MAX,
                bytes: u64::MAX,
            };
        }
        Until::Grown {
            records: (max_records - unsent) as u64,
            bytes: (max_bytes - unsent_bytes) as u64,
        }
    }

    /// Makes the next batch from the records not yet offered (at `now`):
    /// the index of its flight.
    pub(super) fn new_flight(
        &mut self,
        max_records: usize,
        max_bytes: usize,
        now: Instant,
    ) -> usize {
        let mut n = 0;
        let mut bytes = 0;
        for rec in self.records.iter().skip(self.flights.records) {
            if n > 0 && (n >= max_records || bytes + rec.payload.len() > max_bytes) {
                break;
            }
            n += 1;
            bytes += rec.payload.len();
        }
        let idx = self.flights.push(n, bytes);
        let (unsent, _) = self.unsent();
        self.since = (unsent > 0).then_some(now);
        idx
    }

    /// The records of flight `idx`.
    pub(super) fn batch(&self, idx: usize) -> impl Iterator<Item = &StoredRecord> {
        let off = self.flights.offset_of(idx);
        self.records.range(off..off + self.flights.list[idx].len)
    }

    /// Flight `idx` (out, `n` records) was answered: its first `done`
    /// records are finished (`rejected` among them, by index). With all of
    /// them done the flight is finished; otherwise the rest is offered
    /// again after the backoff, as a flight of its own. Returns the index
    /// of the flight to offer again, if any.
    pub(super) fn answered(
        &mut self,
        idx: usize,
        done: usize,
        rejected: Vec<(usize, String)>,
    ) -> Option<usize> {
        let n = self.flights.list[idx].len;
        if done == n {
            self.flights.list[idx].state = FlightState::Finished(rejected);
            return None;
        }
        if done == 0 {
            self.flights.list[idx].state = FlightState::Resend;
            return Some(idx);
        }
        let rest = self.cut(idx, done);
        self.flights.list[idx].state = FlightState::Finished(rejected);
        Some(rest)
    }

    /// Cut flight `idx` after its first `at` records (see
    /// [`Flights::cut`]): the index of the rest.
    fn cut(&mut self, idx: usize, at: usize) -> usize {
        let off = self.flights.offset_of(idx);
        let head_bytes = self
            .records
            .range(off..off + at)
            .map(|r| r.payload.len())
            .sum();
        self.flights.cut(idx, at, head_bytes)
    }

    /// Halve flight `idx` (waiting to be offered again, more than one
    /// record): each half is offered on its own, the failures' history
    /// carried. The index of the second half.
    pub(super) fn split(&mut self, idx: usize) -> usize {
        debug_assert!(matches!(self.flights.list[idx].state, FlightState::Resend));
        let half = self.flights.list[idx].len / 2;
        let second = self.cut(idx, half);
        let first = &mut self.flights.list[idx].failures;
        *first = first.carried();
        second
    }

    /// The sequence number of flight `idx`'s first record.
    pub(super) fn first_seq_of(&self, idx: usize) -> u64 {
        self.records[self.flights.offset_of(idx)].seq
    }

    /// The flight at the head, once finished: its records and the
    /// rejected among them.
    pub(super) fn settled_head(&self) -> Option<(usize, Vec<(usize, String)>)> {
        match self.flights.list.front() {
            Some(Flight {
                state: FlightState::Finished(rejected),
                len,
                ..
            }) => Some((*len, rejected.clone())),
            _ => None,
        }
    }

    /// The first `done` records, settled (the head flight's), leave.
    /// Returns the sequence number past the last of them: the new
    /// confirmed point.
    pub(super) fn take(&mut self, done: usize) -> u64 {
        let end = self.records[done - 1].seq + 1;
        for _ in 0..done {
            self.drop_front();
        }
        end
    }

    /// The dead letters of the `rejected` records (indices among those
    /// held, with the sink's reason) of shard `shard`, at `now_us`.
    pub(super) fn dead_letters(
        &self,
        shard: u32,
        rejected: &[(usize, String)],
        now_us: u64,
    ) -> Vec<DeadLetter> {
        rejected
            .iter()
            .map(|(i, why)| {
                let r = &self.records[*i];
                DeadLetter {
                    shard,
                    seq: r.seq,
                    tier: r.meta.tier,
                    arrival_unix_us: r.meta.arrival_unix_us,
                    dead_lettered_unix_us: now_us,
                    reason: why.clone(),
                    payload: r.payload.clone(),
                }
            })
            .collect()
    }
}

/// What a sink's outcome means for the batch at the head of `pending`.
pub(super) struct Settlement {
    /// Records at the head that are finished (committed or rejected).
    pub done: usize,
    /// Rejected records among them (index into the batch, the sink's reason).
    pub rejected: Vec<(usize, String)>,
    /// The rest of the batch must be retried: the sink's retry-after and why.
    pub retry: Option<(Option<Duration>, String)>,
}

impl Settlement {
    fn finished(done: usize, rejected: Vec<(usize, String)>) -> Self {
        Settlement {
            done,
            rejected,
            retry: None,
        }
    }

    fn retry_from(
        done: usize,
        rejected: Vec<(usize, String)>,
        after: Option<Duration>,
        reason: String,
    ) -> Self {
        Settlement {
            done,
            rejected,
            retry: Some((after, reason)),
        }
    }

    /// What the sink's `outcome` for a batch of `n` records means; `Err`
    /// (with why) when the answer does not fit the batch: it is retried.
    pub(super) fn of(outcome: Outcome, n: usize) -> Result<Settlement, String> {
        Ok(match outcome {
            Outcome::Committed => Settlement::finished(n, Vec::new()),
            Outcome::Retry { after, reason } => {
                Settlement::retry_from(0, Vec::new(), after, reason)
            }
            Outcome::Split(v) if v.len() != n => {
                return Err(format!(
                    "sink answered {} record outcomes for a batch of {n}",
                    v.len()
                ))
            }
            Outcome::Split(v) => {
                let mut rejected = Vec::new();
                for (i, o) in v.into_iter().enumerate() {
                    match o {
                        RecordOutcome::Committed => {}
                        RecordOutcome::Rejected(why) => rejected.push((i, why)),
                        RecordOutcome::Retry => {
                            return Ok(Settlement::retry_from(
                                i,
                                rejected,
                                None,
                                "sink asked to retry part of the batch".into(),
                            ))
                        }
                    }
                }
                Settlement::finished(n, rejected)
            }
        })
    }

    /// A settlement that retries the whole batch for `reason`.
    pub(super) fn retry_all(reason: String) -> Settlement {
        Settlement::retry_from(0, Vec::new(), None, reason)
    }
}
