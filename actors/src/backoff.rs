//! One exponential backoff for every place that waits after a failure
//! (the drain's retries, a sink instance re-created, a shard's next
//! segment, a supervised child restarted): `initial` doubled per failure
//! in a row, up to `max`; and when the next try may go, read on the
//! [`Clock`](crate::Clock) so the simulation drives it.

use std::time::{Duration, Instant};

/// The wait after the failures in a row: `initial` × 2^step, at most
/// `max` (step 0: the first failure's, where a caller starts there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max }
    }

    /// `initial` × 2^`step` (the doubling stops at 2^20, past any `max`
    /// a config allows), at most `max`.
    pub fn delay(&self, step: u32) -> Duration {
        self.initial
            .saturating_mul(1u32 << step.min(20))
            .min(self.max)
    }
}

/// When the next try may go, set by a failure: the decision a caller
/// reads at each turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotBefore(Option<Instant>);

impl NotBefore {
    /// Wait `delay` from `now`.
    pub fn set(&mut self, now: Instant, delay: Duration) {
        self.0 = Some(now + delay);
    }

    /// Go at once from now on.
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// How long to wait yet at `now`; `None`: go.
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        self.0.filter(|t| now < *t).map(|t| t - now)
    }

    /// The instant itself, if one was set (passed or not).
    pub fn at(&self) -> Option<Instant> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_step_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let steps: Vec<u128> = (0..8).map(|s| b.delay(s).as_millis()).collect();
        assert_eq!(steps, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
        let huge = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
        assert_eq!(
            huge.delay(30),
            Duration::MAX,
            "saturates instead of overflowing"
        );
    }

    #[test]
    fn not_before_says_how_long_to_wait_then_go() {
        let t0 = Instant::now();
        let mut nb = NotBefore::default();
        assert_eq!(nb.wait(t0), None);
        nb.set(t0, Duration::from_millis(300));
        assert_eq!(nb.wait(t0), Some(Duration::from_millis(300)));
        assert_eq!(
            nb.wait(t0 + Duration::from_millis(100)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(nb.wait(t0 + Duration::from_millis(300)), None);
        nb.clear();
        assert_eq!(nb.at(), None);
    }
}
