//! The time the flusher's and the drain's decisions read: the system's
//! monotonic clock in the daemon, or a virtual one that only moves when a
//! test says so (the whole-pipeline simulation in `testing/sim/`), so a schedule
//! of linger, backoff, retry and checkpoint deadlines replays exactly.
//!
//! Only decisions go through it. Measurements that feed histograms (how
//! long an fsync or a sink request took) read the real clock: they decide
//! nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monotonic clock: the system's, or a virtual one shared by clones.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    virtual_time: Option<Arc<VirtualTime>>,
}

#[derive(Debug)]
struct VirtualTime {
    /// What virtual time zero maps to (any instant works: only differences
    /// are ever read).
    base: Instant,
    elapsed_ns: AtomicU64,
}

impl Clock {
    /// The system's monotonic clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that stands still until [`Clock::advance`] moves it.
    pub fn manual() -> Clock {
        Clock {
            virtual_time: Some(Arc::new(VirtualTime {
                base: Instant::now(),
                elapsed_ns: AtomicU64::new(0),
            })),
        }
    }

    pub fn is_manual(&self) -> bool {
        self.virtual_time.is_some()
    }

    pub fn now(&self) -> Instant {
        match &self.virtual_time {
            None => Instant::now(),
            Some(v) => v.base + Duration::from_nanos(v.elapsed_ns.load(Ordering::Acquire)),
        }
    }

    /// Time since `t` (zero if `t` is later).
    pub fn since(&self, t: Instant) -> Duration {
        self.now().saturating_duration_since(t)
    }

    /// Move a manual clock forward.
    ///
    /// # Panics
    /// On the system clock, which nobody moves.
    pub fn advance(&self, d: Duration) {
        let v = self
            .virtual_time
            .as_ref()
            .expect("only a manual clock can be advanced");
        v.elapsed_ns
            .fetch_add(d.as_nanos() as u64, Ordering::AcqRel);
    }

    /// Virtual time since the clock was made (zero for the system clock).
    pub fn elapsed(&self) -> Duration {
        self.virtual_time.as_ref().map_or(Duration::ZERO, |v| {
            Duration::from_nanos(v.elapsed_ns.load(Ordering::Acquire))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_clones_share_it() {
        let c = Clock::manual();
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(c.now(), t0);
        let c2 = c.clone();
        c2.advance(Duration::from_millis(250));
        assert_eq!(c.since(t0), Duration::from_millis(250));
        assert_eq!(c.elapsed(), Duration::from_millis(250));
    }

    #[test]
    fn the_system_clock_moves_by_itself() {
        let c = Clock::system();
        let t0 = c.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(c.since(t0) >= Duration::from_millis(2));
        assert!(!c.is_manual());
    }
}
