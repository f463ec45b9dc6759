//! `spillway ctl tap`: copies of records as they are acknowledged, or as
//! one sink confirms them, for the admin connections watching.
//!
//! Producers never wait for a watcher. Each shard's queue holds a [`Taps`]:
//! with nobody watching, the flusher's and the drains' hooks cost one
//! atomic load per group or batch. A watcher ([`Tap`]) takes at most
//! `rate` records a second, spread over the second and over each group
//! (the rest are counted as `skipped`), into a bounded queue
//! ([`TAP_RECORDS_MAX`] records, [`TAP_BYTES_MAX`] payload bytes); a
//! record that finds it full is not queued and counted as `dropped`, so
//! a slow terminal loses lines, never slows a push. The admin socket's
//! side (the command, the lines) is the runtime's.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use spillway_wab::{RecordMeta, StoredRecord};
use tokio::sync::mpsc;

use crate::shard::AppendBatch;

/// Records one watcher's queue holds before it drops.
pub const TAP_RECORDS_MAX: usize = 4096;
/// Payload bytes one watcher's queue holds before it drops.
pub const TAP_BYTES_MAX: u64 = 8 * 1024 * 1024;

/// One record as a watcher gets it.
#[derive(Debug, Clone)]
pub struct Tapped {
    pub shard: u32,
    pub seq: u64,
    /// 1 Sync, 2 Batched, 3 Buffered.
    pub tier: u8,
    pub arrival_unix_us: u64,
    pub payload: Bytes,
}

/// Which records a watcher wants.
#[derive(Debug, Clone, Default)]
pub struct TapFilter {
    /// Only this tier (1, 2 or 3).
    pub tier: Option<u8>,
    /// As this sink confirms them (delivered, not dead-lettered); `None`:
    /// as they are acknowledged to producers.
    pub sink: Option<String>,
    /// At most this many a second (`None`: as many as the queue takes).
    pub rate: Option<u32>,
}

/// What a watcher missed: over its rate, and with its queue full.
#[derive(Debug, Default)]
pub struct TapCounts {
    pub skipped: AtomicU64,
    pub dropped: AtomicU64,
}

/// One watcher: its filter, its rate, its bounded queue.
pub struct Tap {
    filter: TapFilter,
    allowance: Mutex<Allowance>,
    tx: mpsc::Sender<Tapped>,
    /// Payload bytes queued and not yet taken by the watcher.
    held_bytes: Arc<AtomicU64>,
    pub counts: Arc<TapCounts>,
}

/// The watcher's end of a [`Tap`].
pub struct TapReceiver {
    rx: mpsc::Receiver<Tapped>,
    held_bytes: Arc<AtomicU64>,
    pub counts: Arc<TapCounts>,
}

impl TapReceiver {
    /// The next record (`None` once every shard has let go of the tap).
    pub async fn recv(&mut self) -> Option<Tapped> {
        let t = self.rx.recv().await?;
        self.held_bytes
            .fetch_sub(t.payload.len() as u64, Ordering::Relaxed);
        Some(t)
    }

    /// The next record if one is queued now.
    pub fn try_recv(&mut self) -> Option<Tapped> {
        let t = self.rx.try_recv().ok()?;
        self.held_bytes
            .fetch_sub(t.payload.len() as u64, Ordering::Relaxed);
        Some(t)
    }
}

impl Tap {
    pub fn new(filter: TapFilter) -> (Arc<Tap>, TapReceiver) {
        let (tx, rx) = mpsc::channel(TAP_RECORDS_MAX);
        let held_bytes = Arc::new(AtomicU64::new(0));
        let counts = Arc::new(TapCounts::default());
        let tap = Arc::new(Tap {
            allowance: Mutex::new(Allowance::new(filter.rate, Instant::now())),
            filter,
            tx,
            held_bytes: held_bytes.clone(),
            counts: counts.clone(),
        });
        (
            tap,
            TapReceiver {
                rx,
                held_bytes,
                counts,
            },
        )
    }

    /// Queue a copy of one record, or count it dropped (never waits; a
    /// record with no room is not even copied).
    fn offer(&self, shard: u32, seq: u64, meta: RecordMeta, payload: &[u8]) {
        let len = payload.len() as u64;
        if self.tx.capacity() == 0 || self.held_bytes.load(Ordering::Relaxed) + len > TAP_BYTES_MAX
        {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.held_bytes.fetch_add(len, Ordering::Relaxed);
        let t = Tapped {
            shard,
            seq,
            tier: meta.tier,
            arrival_unix_us: meta.arrival_unix_us,
            payload: Bytes::copy_from_slice(payload),
        };
        if self.tx.try_send(t).is_err() {
            self.held_bytes.fetch_sub(len, Ordering::Relaxed);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Take as many of `records` (those of the wanted tier) as the rate
    /// allows now, spread evenly over them, counting the rest as skipped.
    fn take<'a, I>(&self, shard: u32, records: impl Fn() -> I)
    where
        I: Iterator<Item = (u64, RecordMeta, &'a [u8])>,
    {
        let wanted = |meta: &RecordMeta| self.filter.tier.is_none_or(|t| t == meta.tier);
        let matching = records().filter(|(_, meta, _)| wanted(meta)).count() as u64;
        if matching == 0 {
            return;
        }
        let allowed = self
            .allowance
            .lock()
            .unwrap()
            .take(Instant::now(), matching);
        self.counts
            .skipped
            .fetch_add(matching - allowed, Ordering::Relaxed);
        if allowed == 0 {
            return;
        }
        let picked = records()
            .filter(|(_, meta, _)| wanted(meta))
            .enumerate()
            .filter(|(i, _)| spread(*i as u64, allowed, matching));
        for (_, (seq, meta, payload)) in picked {
            self.offer(shard, seq, meta, payload);
        }
    }
}

/// A tap's rate: a bucket that fills at `rate` records a second, up to
/// one second's worth, so a busy stream is sampled evenly over time (not
/// the first records of each second) and a quiet one under the rate is
/// shown whole.
#[derive(Debug)]
struct Allowance {
    /// Records a second; `None`: no limit.
    rate: Option<f64>,
    tokens: f64,
    at: Instant,
}

impl Allowance {
    fn new(rate: Option<u32>, now: Instant) -> Allowance {
        let rate = rate.map(f64::from);
        Allowance {
            rate,
            tokens: rate.unwrap_or(0.0),
            at: now,
        }
    }

    /// How many of `wanted` records may be taken at `now`.
    fn take(&mut self, now: Instant, wanted: u64) -> u64 {
        let Some(rate) = self.rate else {
            return wanted;
        };
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.at = now;
        let taken = wanted.min(self.tokens as u64);
        self.tokens -= taken as f64;
        taken
    }
}

/// Whether record `i` of `n` is one of `k` picked evenly spaced, the
/// first included: `i` is picked when `i * k / n` moves on.
fn spread(i: u64, k: u64, n: u64) -> bool {
    k > 0 && (i == 0 || i * k / n != (i - 1) * k / n)
}

/// The watchers of one shard.
#[derive(Default)]
pub struct Taps {
    watching: AtomicUsize,
    list: Mutex<Vec<Arc<Tap>>>,
}

impl Taps {
    pub fn watch(&self, tap: Arc<Tap>) {
        let mut list = self.list.lock().unwrap();
        list.push(tap);
        self.watching.store(list.len(), Ordering::Release);
    }

    pub fn unwatch(&self, tap: &Arc<Tap>) {
        let mut list = self.list.lock().unwrap();
        list.retain(|t| !Arc::ptr_eq(t, tap));
        self.watching.store(list.len(), Ordering::Release);
    }

    /// Whether anyone watches (one atomic load: the hooks' whole cost
    /// while nobody does).
    #[inline]
    pub fn watched(&self) -> bool {
        self.watching.load(Ordering::Acquire) > 0
    }

    /// Under the lock, without copying the list: what `f` does never
    /// waits (a full tap drops).
    fn each(&self, sink: Option<&str>, mut f: impl FnMut(&Tap)) {
        let list = self.list.lock().unwrap();
        for tap in list.iter() {
            if tap.filter.sink.as_deref() == sink {
                f(tap);
            }
        }
    }

    /// A group is durable at its tiers: its records, numbered from
    /// `first_seq`, are about to be acknowledged (the flusher's hook).
    pub fn acknowledged(&self, shard: u32, first_seq: u64, group: &[AppendBatch]) {
        if !self.watched() {
            return;
        }
        self.each(None, |tap| {
            tap.take(shard, || {
                group.iter().flat_map(|b| b.records.iter()).enumerate().map(
                    |(i, (payload, meta, _))| {
                        (first_seq + i as u64, RecordMeta::unpack(meta), payload)
                    },
                )
            });
        });
    }

    /// Sink `sink` confirmed `records` (delivered; the drain's hook).
    pub fn confirmed<'a>(
        &self,
        shard: u32,
        sink: &str,
        records: impl Iterator<Item = &'a StoredRecord> + Clone,
    ) {
        if !self.watched() {
            return;
        }
        self.each(Some(sink), |tap| {
            tap.take(shard, || {
                records.clone().map(|r| (r.seq, r.meta, r.payload.as_ref()))
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_busy_stream_is_sampled_evenly_over_the_second() {
        let start = Instant::now();
        let mut a = Allowance::new(Some(100), start);
        // The first second's worth goes at once (a quiet spell before).
        assert_eq!(a.take(start, 1000), 100);
        // Then groups of 64 every millisecond: one record every 10 ms,
        // not the first hundred of each second.
        let mut taken = Vec::new();
        for ms in 1..=1000u64 {
            if a.take(start + Duration::from_millis(ms), 64) > 0 {
                taken.push(ms);
            }
        }
        assert!((99..=101).contains(&taken.len()), "{}", taken.len());
        assert!(
            taken.windows(2).all(|w| (9..=11).contains(&(w[1] - w[0]))),
            "{taken:?}"
        );
    }

    #[test]
    fn a_quiet_stream_under_the_rate_is_shown_whole() {
        let start = Instant::now();
        let mut a = Allowance::new(Some(100), start);
        for s in 0..5u64 {
            assert_eq!(a.take(start + Duration::from_secs(s), 60), 60);
        }
        let mut all = Allowance::new(None, start);
        assert_eq!(all.take(start, 1_000_000), 1_000_000);
    }

    #[test]
    fn picks_are_spread_over_the_group() {
        let picked = |k, n| (0..n).filter(|i| spread(*i, k, n)).collect::<Vec<u64>>();
        assert_eq!(picked(4, 16), [0, 4, 8, 12]);
        assert_eq!(picked(3, 10), [0, 4, 7]);
        assert_eq!(picked(5, 5), [0, 1, 2, 3, 4]);
        assert_eq!(picked(1, 7), [0]);
        assert!(picked(0, 7).is_empty());
    }
}
