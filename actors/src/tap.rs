//! `spillway ctl tap`: copies of records as they are acknowledged, or as
//! one sink confirms them, for the admin connections watching.
//!
//! Producers never wait for a watcher. Each shard's queue holds a [`Taps`]:
//! with nobody watching, the flusher's and the drains' hooks cost one
//! atomic load per group or batch. A watcher ([`Tap`]) takes at most
//! `rate` records a second (the rest are counted as `skipped`) into a
//! bounded queue ([`TAP_RECORDS_MAX`] records, [`TAP_BYTES_MAX`] payload
//! bytes); a record that finds it full is not queued and counted as
//! `dropped`, so a slow terminal loses lines, never slows a push. The
//! admin socket's side (the command, the lines) is the runtime's.

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

/// One watcher: its filter, its rate window, its bounded queue.
pub struct Tap {
    filter: TapFilter,
    /// (start of the current second, records taken in it).
    window: Mutex<(Instant, u32)>,
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
            filter,
            window: Mutex::new((Instant::now(), 0)),
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

    /// How many of `wanted` matching records the rate lets through now;
    /// the rest are counted as skipped.
    fn allow(&self, wanted: u64) -> u64 {
        let Some(rate) = self.filter.rate else {
            return wanted;
        };
        let mut w = self.window.lock().unwrap();
        let now = Instant::now();
        if now.duration_since(w.0).as_secs() >= 1 {
            *w = (now, 0);
        }
        let taken = wanted.min(u64::from(rate.saturating_sub(w.1)));
        w.1 += taken as u32;
        taken
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

    /// Take the first of `records` (those of the wanted tier) the rate
    /// allows now, counting the rest as skipped.
    fn take<'a, I>(&self, shard: u32, records: impl Fn() -> I)
    where
        I: Iterator<Item = (u64, RecordMeta, &'a [u8])>,
    {
        let wanted = |meta: &RecordMeta| self.filter.tier.is_none_or(|t| t == meta.tier);
        let matching = records().filter(|(_, meta, _)| wanted(meta)).count() as u64;
        if matching == 0 {
            return;
        }
        let allowed = self.allow(matching);
        self.counts
            .skipped
            .fetch_add(matching - allowed, Ordering::Relaxed);
        for (seq, meta, payload) in records()
            .filter(|(_, meta, _)| wanted(meta))
            .take(allowed as usize)
        {
            self.offer(shard, seq, meta, payload);
        }
    }
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
