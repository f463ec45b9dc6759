//! Batches in flight: how many a cursor may have offered to its sink at
//! once ([`InFlight`], [`Limiter`]: fixed, or learned by AIMD), and who
//! runs them ([`Lanes`]: on the cursor's own thread when one at a time,
//! on worker threads, each with its own sink instance, when more).
//!
//! With more than one batch out, answers come back in any order; the
//! cursor confirms only over a contiguous prefix of finished batches (see
//! `pending`), so a crash redelivers what was not confirmed and never
//! skips.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sink_sdk::{Batch, Outcome, Record};
use spillway_wab::{Storage, StorageFile, StoredRecord};

use super::poison::Failures;
use super::sink_host::{SinkHost, SinkSlot};
use super::DrainStats;
use crate::shard::Doorbell;
use sink_sdk::delivery::InFlight;

/// Least time between two writes of an adaptive cursor's learned limit.
const LEARNED_WRITE_EVERY: Duration = Duration::from_secs(1);
/// Cut on pushback (a transient failure: 429, 503, a timeout, a refused
/// connection): the downstream said no, so halve, as TCP does on loss.
const PUSHBACK_CUT: f64 = 0.5;
/// Cut when a window's round trip rose well above the average: the
/// downstream is queueing, a gentler signal (Vector's default ratio).
const SLOWDOWN_CUT: f64 = 0.9;
/// A window whose mean round trip passes the average by this factor (and
/// by [`SLOWDOWN_SLACK`]) is a slowdown.
const SLOWDOWN_RATIO: f64 = 1.5;
/// Below this much extra round trip nothing counts as a slowdown: on
/// loopback a round trip of 200 µs doubles on noise alone.
const SLOWDOWN_SLACK: Duration = Duration::from_millis(2);
/// Weight of the newest window in the average round trip.
const RTT_WEIGHT: f64 = 0.3;

/// The limit on batches in flight of one cursor. Fixed, or adaptive:
/// answers are taken in windows of about one round trip (as many answers
/// as the limit); a window with pushback halves the limit at once, one
/// whose mean round trip rose well above the average cuts it by a tenth,
/// and one in which a ready batch waited for a slot, with neither, grows
/// it by one (a limit the records do not fill does not grow).
#[derive(Debug, Clone)]
pub struct Limiter {
    mode: InFlight,
    limit: u32,
    /// Mean round trip of past windows (seconds, weighted to the newest).
    rtt_avg: Option<f64>,
    window: Window,
}

#[derive(Debug, Clone, Default)]
struct Window {
    answers: u32,
    rtt_sum: f64,
    /// A batch waited for a free slot in this window.
    saturated: bool,
    /// The limit was already cut for pushback in this window.
    cut: bool,
}

impl Limiter {
    /// A limiter for `mode`; an adaptive one starts at `learned` (the
    /// limit it had reached before a restart), else at 1.
    pub fn new(mode: InFlight, learned: Option<u32>) -> Self {
        let limit = match mode {
            InFlight::Fixed(n) => n.max(1),
            InFlight::Adaptive { max } => learned.unwrap_or(1).clamp(1, max.max(1)),
        };
        Limiter {
            mode,
            limit,
            rtt_avg: None,
            window: Window::default(),
        }
    }

    pub fn mode(&self) -> InFlight {
        self.mode
    }

    /// How many batches may be out now.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether the limit learns (`"adaptive"`).
    pub fn adaptive(&self) -> bool {
        matches!(self.mode, InFlight::Adaptive { .. })
    }

    /// A new mode from a reload: an adaptive limit keeps what it learned,
    /// within the new bounds.
    pub fn reconfigure(&mut self, mode: InFlight) {
        if mode == self.mode {
            return;
        }
        let learned = self.adaptive().then_some(self.limit);
        *self = Limiter::new(mode, learned);
    }

    /// A batch was ready to go but every slot was taken: the limit, not
    /// the records, held it.
    pub fn slots_full(&mut self) {
        self.window.saturated = true;
    }

    /// A batch was answered after `rtt`; `pushback` when the sink failed
    /// it transiently (or part of it). True when the limit changed.
    pub fn answered(&mut self, rtt: Duration, pushback: bool) -> bool {
        let InFlight::Adaptive { max } = self.mode else {
            return false;
        };
        let before = self.limit;
        let w = &mut self.window;
        w.answers += 1;
        w.rtt_sum += rtt.as_secs_f64();
        if pushback && !w.cut {
            w.cut = true;
            self.limit = ((self.limit as f64 * PUSHBACK_CUT) as u32).max(1);
        }
        if w.answers >= self.limit.max(before) {
            let mean = w.rtt_sum / w.answers as f64;
            let slow = self.rtt_avg.is_some_and(|avg| {
                mean > avg * SLOWDOWN_RATIO && mean - avg > SLOWDOWN_SLACK.as_secs_f64()
            });
            if !w.cut {
                if slow {
                    self.limit = ((self.limit as f64 * SLOWDOWN_CUT) as u32).max(1);
                } else if w.saturated {
                    self.limit = (self.limit + 1).min(max.max(1));
                }
            }
            // A window cut for pushback says nothing about the round trip
            // of a healthy downstream: it does not move the average.
            if !w.cut {
                self.rtt_avg = Some(match self.rtt_avg {
                    Some(avg) => avg + RTT_WEIGHT * (mean - avg),
                    None => mean,
                });
            }
            self.window = Window::default();
        }
        self.limit != before
    }
}

/// The learned limit of an adaptive cursor, kept between runs in a small
/// file (`sinks/NAME/in-flight-NNN`): a hint, written without fsync; a
/// missing or unreadable file starts the limit at 1.
pub(super) fn read_learned<S: Storage>(storage: &S, path: &Path) -> Option<u32> {
    let file = storage.open_read(path).ok()?;
    let mut buf = [0u8; 16];
    let n = file.read_at(0, &mut buf).ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&n| n >= 1)
}

/// Write the learned limit: to a temporary file renamed over the old one,
/// so a reader sees the old value or the new one.
fn write_learned<S: Storage>(storage: &S, path: &Path, limit: u32) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = storage.create(&tmp)?;
    f.write_all_at(0, &[io::IoSlice::new(format!("{limit}\n").as_bytes())])?;
    drop(f);
    storage.rename(&tmp, path)
}

/// What a sink gets of a record read from the segments (borrowed).
pub(super) fn sink_record(shard: u32, r: &StoredRecord) -> Record<'_> {
    Record {
        shard,
        seq: r.seq,
        tier: r.meta.tier,
        arrival_unix_us: r.meta.arrival_unix_us,
        payload: &r.payload,
    }
}

/// A sink's answer to one batch in flight.
pub(super) struct Answer {
    pub id: u64,
    pub outcome: Outcome,
    pub rtt: Duration,
    /// The sink panicked on the batch (the outcome is then a retry): the
    /// panic's message.
    pub panicked: Option<String>,
}

/// A batch for a worker: its own handles on the records (the payloads are
/// shared, not copied).
struct Job {
    id: u64,
    records: Vec<StoredRecord>,
}

/// Who runs the batches of one cursor.
pub(super) enum Lanes {
    /// One at a time, on the cursor's thread, with the cursor's own sink
    /// instance: the answer is there when the call returns.
    Inline,
    /// On the cursor's thread too, but the answers are held and handed
    /// back in an order the cursor's random stream picks: the simulation
    /// drives out-of-order completion this way, one step at a time.
    Held(Vec<Answer>),
    /// On worker threads, each with its own sink instance.
    Pool(Pool),
}

/// Worker threads of one cursor. Each has its own [`SinkHost`] (its own
/// instance, panics caught, switched at a reload like the cursor's); they
/// take jobs from one channel and put answers in one list, then wake the
/// cursor. Dropping the pool closes the channel: each worker finishes the
/// batch it holds, if any (its answer is dropped), and exits.
pub(super) struct Pool {
    jobs: mpsc::Sender<Job>,
    shared: Arc<PoolShared>,
    workers: usize,
    ceiling: usize,
    shard: u32,
    sink: String,
    slot: Arc<SinkSlot>,
    stats: Arc<DrainStats>,
}

struct PoolShared {
    jobs: Mutex<mpsc::Receiver<Job>>,
    answers: Mutex<Vec<Answer>>,
    /// Jobs sent and not yet answered (a worker is started when every
    /// worker is busy and the ceiling allows).
    outstanding: AtomicUsize,
    /// Rung with every answer: the cursor's wait ends on it.
    bell: Arc<Doorbell>,
}

impl Pool {
    pub(super) fn new(
        shard: u32,
        sink: &str,
        slot: Arc<SinkSlot>,
        stats: Arc<DrainStats>,
        bell: Arc<Doorbell>,
        ceiling: u32,
    ) -> Pool {
        let (tx, rx) = mpsc::channel();
        Pool {
            jobs: tx,
            shared: Arc::new(PoolShared {
                jobs: Mutex::new(rx),
                answers: Mutex::new(Vec::new()),
                outstanding: AtomicUsize::new(0),
                bell,
            }),
            workers: 0,
            ceiling: ceiling.max(1) as usize,
            shard,
            sink: sink.to_string(),
            slot,
            stats,
        }
    }

    /// The most batches this pool runs at once.
    pub(super) fn ceiling(&self) -> usize {
        self.ceiling
    }

    /// Hand a batch to a worker, starting one if every worker is busy.
    pub(super) fn submit(&mut self, id: u64, records: Vec<StoredRecord>) -> io::Result<()> {
        let busy = self.shared.outstanding.load(Ordering::Acquire);
        if busy >= self.workers && self.workers < self.ceiling {
            self.spawn_worker()?;
        }
        // Counted before a worker can answer it (and count it down).
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        self.jobs.send(Job { id, records }).map_err(|_| {
            self.shared.outstanding.fetch_sub(1, Ordering::AcqRel);
            io::Error::other("every delivery worker has stopped")
        })
    }

    /// The answers that came back since the last look.
    pub(super) fn take(&self, into: &mut VecDeque<Answer>) {
        into.extend(self.shared.answers.lock().unwrap().drain(..));
    }

    fn spawn_worker(&mut self) -> io::Result<()> {
        let shared = self.shared.clone();
        let shard = self.shard;
        let mut host =
            SinkHost::new(shard, self.slot.clone(), self.stats.clone()).named(&self.sink);
        thread::Builder::new()
            .name(format!("deliver-{shard}-{}-{}", self.sink, self.workers))
            .spawn(move || worker(shard, &mut host, &shared))?;
        self.workers += 1;
        Ok(())
    }
}

fn worker(shard: u32, host: &mut SinkHost, shared: &PoolShared) {
    loop {
        let job = {
            let jobs = shared.jobs.lock().unwrap();
            match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        host.check_reload();
        let records: Vec<Record<'_>> = job.records.iter().map(|r| sink_record(shard, r)).collect();
        let started = Instant::now();
        let outcome = host.deliver(&Batch::new(shard, &records));
        let rtt = started.elapsed();
        drop(records);
        shared.answers.lock().unwrap().push(Answer {
            id: job.id,
            outcome,
            rtt,
            panicked: host.panicked().map(str::to_string),
        });
        shared.outstanding.fetch_sub(1, Ordering::AcqRel);
        shared.bell.ring();
    }
}

/// Where a batch in flight stands.
#[derive(Debug)]
pub(super) enum FlightState {
    /// Offered; no answer yet.
    Out,
    /// Answered for good: every record committed or rejected (the
    /// rejected ones, by index in the batch, with the sink's reason).
    Finished(Vec<(usize, String)>),
    /// Failed transiently: offered again after the backoff.
    Resend,
}

/// A batch offered to the sink and not yet confirmed: the `len` records
/// of `pending` after those of the flights before it.
#[derive(Debug)]
pub(super) struct Flight {
    /// Changes at every offer, so an answer to an earlier offer (one the
    /// cursor gave up on) finds no flight.
    pub id: u64,
    pub len: usize,
    pub bytes: usize,
    pub state: FlightState,
    /// When it was offered (ms since the epoch), for `GET /ready`.
    pub sent_unix_ms: u64,
    /// Its failures since it was last answered for good (see `poison`).
    pub failures: Failures,
}

/// One cursor's batches in flight, oldest first, covering the head of its
/// `pending` records; the limit on how many may be out; who runs them.
pub(super) struct Flights {
    pub list: VecDeque<Flight>,
    /// Records and payload bytes the flights cover.
    pub records: usize,
    pub bytes: usize,
    next_id: u64,
    pub limiter: Limiter,
    pub lanes: Lanes,
    /// The simulation's: more than one batch out runs as [`Lanes::Held`].
    pub simulated: bool,
    /// Answers taken from the lanes, not applied yet.
    pub answers: VecDeque<Answer>,
    /// Rung by a worker with every answer, and by a stop: ends the
    /// cursor's wait.
    pub bell: Arc<Doorbell>,
    /// Where the learned limit is kept (adaptive only), and what was
    /// written there last, when.
    pub learned_file: Option<PathBuf>,
    pub learned_written: Option<(u32, Instant)>,
}

impl Flights {
    pub(super) fn new(limiter: Limiter, learned_file: Option<PathBuf>) -> Self {
        Flights {
            list: VecDeque::new(),
            records: 0,
            bytes: 0,
            next_id: 1,
            limiter,
            lanes: Lanes::Inline,
            simulated: false,
            answers: VecDeque::new(),
            bell: Arc::default(),
            learned_file,
            learned_written: None,
        }
    }

    /// Batches offered and not answered.
    pub(super) fn out(&self) -> usize {
        self.list
            .iter()
            .filter(|f| matches!(f.state, FlightState::Out))
            .count()
    }

    /// Batches not yet settled: out, waiting to be offered again, or
    /// answered behind one that is not. A crash redelivers all of them, so
    /// the limit holds them, not only those out: with only those out
    /// counted, batches answered behind a head being retried piled up
    /// without bound (in memory, and in what a crash redelivers).
    pub(super) fn unsettled(&self) -> usize {
        self.list.len()
    }

    /// The oldest flight waiting to be offered again, but, with a
    /// `witness` (batches in flight), not a suspect (a lone record that
    /// keeps failing) that waits for one: a commit since it first failed
    /// (`commits`: the cursor's count). When there is none, also the
    /// oldest such suspect (`None` beside a flight to offer: it is not
    /// needed then). One pass over the flights.
    pub(super) fn resends(&self, commits: u64, witness: bool) -> (Option<usize>, Option<usize>) {
        let mut waiting = None;
        for (idx, f) in self.list.iter().enumerate() {
            if !matches!(f.state, FlightState::Resend) {
                continue;
            }
            if witness && f.failures.waiting(f.len, commits) {
                waiting.get_or_insert(idx);
            } else {
                return (Some(idx), None);
            }
        }
        (None, waiting)
    }

    /// Whether a flight (a batch offered again after a reload shrank the
    /// limits) is larger than a batch may now be.
    pub(super) fn resend_over(&self, max_records: usize, max_bytes: usize) -> bool {
        self.list.iter().any(|f| {
            matches!(f.state, FlightState::Resend)
                && (f.len > max_records || (f.len > 1 && f.bytes > max_bytes))
        })
    }

    /// Cut flight `idx` after its first `at` records (`head_bytes` of
    /// payload): the rest becomes a flight of its own right after it, to
    /// offer again, with the failures' history carried. Returns its index.
    pub(super) fn cut(&mut self, idx: usize, at: usize, head_bytes: usize) -> usize {
        let f = &mut self.list[idx];
        debug_assert!(0 < at && at < f.len);
        let rest = Flight {
            id: 0,
            len: f.len - at,
            bytes: f.bytes - head_bytes,
            state: FlightState::Resend,
            sent_unix_ms: 0,
            failures: f.failures.carried(),
        };
        f.len = at;
        f.bytes = head_bytes;
        self.list.insert(idx + 1, rest);
        idx + 1
    }

    /// Where flight `idx`'s records start in `pending`.
    pub(super) fn offset_of(&self, idx: usize) -> usize {
        self.list.iter().take(idx).map(|f| f.len).sum()
    }

    /// A fresh id for the next offer.
    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(super) fn push(&mut self, len: usize, bytes: usize) -> usize {
        self.records += len;
        self.bytes += bytes;
        self.list.push_back(Flight {
            id: 0,
            len,
            bytes,
            state: FlightState::Resend,
            sent_unix_ms: 0,
            failures: Failures::default(),
        });
        self.list.len() - 1
    }

    /// The oldest flight, once settled.
    pub(super) fn pop_front(&mut self) {
        if let Some(f) = self.list.pop_front() {
            self.records -= f.len;
            self.bytes -= f.bytes;
        }
    }

    /// Forget every flight (the cursor reads again from its confirmed
    /// point, or skipped past them): answers still to come find none.
    pub(super) fn abandon(&mut self) {
        self.list.clear();
        self.records = 0;
        self.bytes = 0;
        self.answers.clear();
        if let Lanes::Held(held) = &mut self.lanes {
            held.clear();
        }
    }

    /// Flight `idx` was offered under `id` at `sent_unix_ms`.
    pub(super) fn offered(&mut self, idx: usize, id: u64, sent_unix_ms: u64) {
        let f = &mut self.list[idx];
        f.id = id;
        f.state = FlightState::Out;
        f.sent_unix_ms = sent_unix_ms;
    }

    /// The answer of a batch run on the cursor's thread: taken at the next
    /// look (held, in the simulation, until its random stream lets it go).
    pub(super) fn answered_here(&mut self, answer: Answer) {
        match &mut self.lanes {
            Lanes::Held(held) => held.push(answer),
            _ => self.answers.push_back(answer),
        }
    }

    /// The flight out under offer `id` (none: the cursor gave it up).
    pub(super) fn answered_out(&self, id: u64) -> Option<usize> {
        self.list
            .iter()
            .position(|f| f.id == id && matches!(f.state, FlightState::Out))
    }

    /// The simulation's out-of-order completion: each held answer comes
    /// back now or later, at random (`random`), but at least one per look
    /// once every slot is taken.
    pub(super) fn release_held(&mut self, mut random: impl FnMut() -> u64) {
        let limit = self.limiter.limit() as usize;
        let Lanes::Held(held) = &mut self.lanes else {
            return;
        };
        let mut i = 0;
        let mut released = 0;
        while i < held.len() {
            if random().is_multiple_of(2) {
                self.answers.push_back(held.swap_remove(i));
                released += 1;
            } else {
                i += 1;
            }
        }
        if released == 0 && held.len() >= limit {
            let pick = (random() % held.len() as u64) as usize;
            self.answers.push_back(held.swap_remove(pick));
        }
    }

    /// Whether the learned limit is due to be written (at most once a
    /// second; the last one at the stop).
    pub(super) fn learned_due(&self) -> bool {
        self.learned_written
            .is_none_or(|(_, at)| at.elapsed() >= LEARNED_WRITE_EVERY)
    }

    /// Writes the learned limit to its file, if it is adaptive and changed.
    pub(super) fn keep_learned<S: Storage>(&mut self, storage: &S) -> io::Result<()> {
        let limit = self.limiter.limit();
        let Some(path) = self.learned_file.as_ref() else {
            return Ok(());
        };
        if !self.limiter.adaptive() || self.learned_written.is_some_and(|(l, _)| l == limit) {
            return Ok(());
        }
        write_learned(storage, path, limit)?;
        self.learned_written = Some((limit, Instant::now()));
        Ok(())
    }

    /// Publishes the limit, the batches out and, with workers, when the
    /// oldest of them was offered (`GET /ready`'s hung-sink check).
    pub(super) fn publish(&self, stats: &DrainStats) {
        stats.in_flight.store(self.out() as u64, Ordering::Relaxed);
        stats
            .in_flight_limit
            .store(self.limiter.limit() as u64, Ordering::Relaxed);
        if matches!(self.lanes, Lanes::Pool(_)) {
            let oldest = self
                .list
                .iter()
                .filter(|f| matches!(f.state, FlightState::Out))
                .map(|f| f.sent_unix_ms)
                .min()
                .unwrap_or(0);
            stats
                .sink_call_since_unix_ms
                .store(oldest, Ordering::Relaxed);
        }
    }

    /// The lanes this limit wants: one at a time inline; more on workers
    /// (held, in the simulation).
    fn wanted(&self) -> (bool, usize) {
        let ceiling = self.limiter.mode().ceiling() as usize;
        (ceiling > 1 && !self.simulated, ceiling)
    }

    /// Whether the lanes fit the limit's mode (a reload may change it).
    pub(super) fn lanes_fit(&self) -> bool {
        let (pool, ceiling) = self.wanted();
        match &self.lanes {
            Lanes::Inline => !pool && ceiling == 1,
            Lanes::Held(_) => self.simulated && ceiling > 1,
            Lanes::Pool(p) => pool && p.ceiling() == ceiling,
        }
    }

    /// Make lanes that fit (call with nothing out).
    pub(super) fn refit(&mut self, make_pool: impl FnOnce(u32) -> Pool) {
        let (pool, ceiling) = self.wanted();
        self.lanes = if pool {
            Lanes::Pool(make_pool(ceiling as u32))
        } else if ceiling > 1 {
            Lanes::Held(Vec::new())
        } else {
            Lanes::Inline
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Answer a whole window at the limit, a batch waiting for a slot.
    fn window(l: &mut Limiter, rtt: Duration, pushback_at: Option<u32>) {
        let n = l.limit();
        l.slots_full();
        for i in 0..n {
            l.answered(rtt, pushback_at == Some(i));
        }
    }

    #[test]
    fn fixed_never_moves() {
        let mut l = Limiter::new(InFlight::Fixed(4), Some(9));
        assert_eq!(l.limit(), 4);
        for _ in 0..20 {
            window(&mut l, 50 * MS, Some(0));
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn adaptive_grows_by_one_per_saturated_window_up_to_max() {
        let mut l = Limiter::new(InFlight::Adaptive { max: 6 }, None);
        assert_eq!(l.limit(), 1);
        for want in 2..=6 {
            window(&mut l, 50 * MS, None);
            assert_eq!(l.limit(), want);
        }
        window(&mut l, 50 * MS, None);
        assert_eq!(l.limit(), 6, "bounded by max");
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut l = Limiter::new(InFlight::Adaptive { max: 16 }, Some(4));
        for _ in 0..10 {
            for _ in 0..4 {
                l.answered(50 * MS, false);
            }
        }
        assert_eq!(l.limit(), 4);
    }

    #[test]
    fn pushback_halves_once_per_window() {
        let mut l = Limiter::new(InFlight::Adaptive { max: 16 }, Some(8));
        l.slots_full();
        assert!(l.answered(50 * MS, true));
        assert_eq!(l.limit(), 4);
        // More pushback in the same window (answers of batches sent at 8)
        // does not cut again.
        for _ in 0..3 {
            assert!(!l.answered(50 * MS, true));
        }
        assert_eq!(l.limit(), 4);
        for _ in 0..4 {
            l.answered(50 * MS, false);
        }
        window(&mut l, 50 * MS, Some(2));
        assert_eq!(l.limit(), 2);
        window(&mut l, 50 * MS, Some(0));
        window(&mut l, 50 * MS, Some(0));
        assert_eq!(l.limit(), 1, "never below 1");
    }

    #[test]
    fn a_round_trip_well_above_the_average_cuts_a_tenth() {
        let mut l = Limiter::new(InFlight::Adaptive { max: 64 }, Some(20));
        window(&mut l, 50 * MS, None);
        assert_eq!(l.limit(), 21);
        window(&mut l, 200 * MS, None);
        assert_eq!(l.limit(), 18, "21 * 0.9, rounded down");
        // Noise within the slack is no slowdown.
        let mut l = Limiter::new(InFlight::Adaptive { max: 64 }, Some(4));
        window(&mut l, Duration::from_micros(200), None);
        window(&mut l, Duration::from_micros(900), None);
        assert_eq!(l.limit(), 6);
    }

    #[test]
    fn learned_limit_is_kept_within_bounds() {
        assert_eq!(
            Limiter::new(InFlight::Adaptive { max: 8 }, Some(30)).limit(),
            8
        );
        assert_eq!(
            Limiter::new(InFlight::Adaptive { max: 8 }, Some(5)).limit(),
            5
        );
        let mut l = Limiter::new(InFlight::Adaptive { max: 8 }, Some(5));
        l.reconfigure(InFlight::Adaptive { max: 3 });
        assert_eq!(l.limit(), 3);
        l.reconfigure(InFlight::Fixed(2));
        assert_eq!(l.limit(), 2);
    }

    /// A downstream that refuses (pushback) whatever passes `cap` batches
    /// at once: the limit spends most windows at or below it.
    #[test]
    fn settles_at_or_below_a_hard_cap() {
        let cap = 4;
        let mut l = Limiter::new(InFlight::Adaptive { max: 16 }, None);
        let mut seen = Vec::new();
        for _ in 0..400 {
            let n = l.limit();
            l.slots_full();
            for i in 0..n {
                l.answered(50 * MS, i >= cap);
            }
            seen.push(l.limit());
        }
        seen.sort_unstable();
        assert!(
            seen[seen.len() / 2] <= cap,
            "median limit {}",
            seen[seen.len() / 2]
        );
        assert!(*seen.last().unwrap() <= cap + 1);
    }
}
