//! Lock-free histograms with fixed bucket bounds for the daemon's metrics:
//! one relaxed atomic increment per observation on the hot path (a group
//! commit, an fsync, a sink request), read at scrape time by the admin's
//! Prometheus collector.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most buckets a histogram may have (besides the +Inf one).
pub const BUCKETS_MAX: usize = 24;

/// The bucket bounds of one kind of histogram.
pub trait Bounds {
    /// Upper bounds, ascending, in the unit observed (at most
    /// [`BUCKETS_MAX`]).
    const UPPER: &'static [u64];
    /// Divisor from the observed unit to the exported one (1e6: µs → s).
    /// A divisor, not a factor: 25_000 / 1e6 prints as 0.025.
    const DIVISOR: f64;
}

/// A histogram of `u64` observations in the buckets of `B`.
pub struct Histogram<B> {
    counts: [AtomicU64; BUCKETS_MAX + 1],
    sum: AtomicU64,
    count: AtomicU64,
    _bounds: PhantomData<fn() -> B>,
}

impl<B> Default for Histogram<B> {
    fn default() -> Self {
        Self {
            counts: Default::default(),
            sum: AtomicU64::new(0),
            count: AtomicU64::new(0),
            _bounds: PhantomData,
        }
    }
}

impl<B> std::fmt::Debug for Histogram<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count.load(Ordering::Relaxed))
            .field("sum", &self.sum.load(Ordering::Relaxed))
            .finish()
    }
}

/// A histogram read at one moment, in the exported unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// (upper bound, observations in this bucket and not a lower one), the
    /// last bound `f64::MAX` (+Inf): what prometheus-client's encoder takes.
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl<B: Bounds> Histogram<B> {
    pub fn observe(&self, v: u64) {
        let i = B::UPPER
            .iter()
            .position(|&b| v <= b)
            .unwrap_or(B::UPPER.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(v, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Sum of the observations, in the observed unit.
    pub fn sum(&self) -> u64 {
        self.sum.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        let bounds = B::UPPER
            .iter()
            .map(|&upper| upper as f64 / B::DIVISOR)
            // prometheus-client writes f64::MAX as "+Inf".
            .chain([f64::MAX]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.counts)
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect();
        // The count is the buckets' total, so the two always agree even
        // while observations race with this read.
        let count = buckets.iter().map(|(_, n)| n).sum();
        Snapshot {
            buckets,
            sum: self.sum() as f64 / B::DIVISOR,
            count,
        }
    }
}

/// fdatasync latency, µs, exported in seconds.
#[derive(Debug)]
pub struct FsyncMicros;

impl Bounds for FsyncMicros {
    const UPPER: &'static [u64] = &[
        25, 50, 100, 150, 200, 300, 500, 1_000, 2_000, 5_000, 20_000, 100_000,
    ];
    const DIVISOR: f64 = 1e6;
}

/// Group-commit latency (write and fdatasync of one group), µs, exported in
/// seconds.
#[derive(Debug)]
pub struct CommitMicros;

impl Bounds for CommitMicros {
    const UPPER: &'static [u64] = &[
        50, 100, 200, 300, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000,
        1_000_000,
    ];
    const DIVISOR: f64 = 1e6;
}

/// Records in one group commit.
#[derive(Debug)]
pub struct GroupRecords;

impl Bounds for GroupRecords {
    const UPPER: &'static [u64] = &[
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
    ];
    const DIVISOR: f64 = 1.0;
}

/// One sink request (a batch offered to the sink), µs, exported in seconds.
#[derive(Debug)]
pub struct SinkMicros;

impl Bounds for SinkMicros {
    const UPPER: &'static [u64] = &[
        500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
        2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
    ];
    const DIVISOR: f64 = 1e6;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_their_own_observations_and_are_scaled() {
        let h = Histogram::<FsyncMicros>::default();
        for v in [10, 25, 26, 400, 1_000_000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.buckets[0], (0.000025, 2));
        assert_eq!(s.buckets[1], (0.00005, 1));
        assert_eq!(s.buckets.len(), FsyncMicros::UPPER.len() + 1);
        assert_eq!(
            *s.buckets.last().unwrap(),
            (f64::MAX, 1),
            "1 s is past the last bound"
        );
        assert!((s.sum - 1.000461).abs() < 1e-9, "{}", s.sum);
    }

    #[test]
    fn every_kind_fits() {
        for upper in [
            FsyncMicros::UPPER,
            CommitMicros::UPPER,
            GroupRecords::UPPER,
            SinkMicros::UPPER,
        ] {
            assert!(upper.len() <= BUCKETS_MAX);
            assert!(upper.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
