//! Retrying transient failures: exponential backoff with full jitter,
//! capped at `retry_max`, honouring the sink's retry-after; probing the
//! sink while backing off so delivery resumes soon after it recovers.
//! [`RetryState`] holds the cursor's failures in a row and decides how
//! long to wait; the cursor counts, logs and probes. Whether a batch is
//! halved or given up is `poison`'s.

use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use sink_sdk::delivery::DeliveryConfig;

/// How often a backing-off drain checks whether the sink is back.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often a shard logs a still-failing sink at warn level.
const RETRY_LOG_EVERY: Duration = Duration::from_secs(10);

/// The failures in a row of the batch at the head.
#[derive(Default)]
pub(super) struct RetryState {
    attempts: u32,
    last_log: Option<Instant>,
    /// The wait before the next attempt, while one runs.
    wait: Option<Wait>,
}

/// A wait before the next attempt: until `until`, but the sink is probed
/// from `next_probe` on, every [`PROBE_EVERY`], and the next attempt
/// comes as soon as it answers.
struct Wait {
    started: Instant,
    until: Instant,
    next_probe: Instant,
}

/// The wait a transient failure leads to: the next attempt waits
/// `delay` (the wait runs); `loud`: the first failure, or the first for
/// [`RETRY_LOG_EVERY`], to log at warn level.
pub(super) struct AfterFailure {
    pub delay: Duration,
    pub attempts: u32,
    pub loud: bool,
}

/// What a running wait says at a turn of the loop.
pub(super) enum Waiting {
    /// Look again after this long.
    Pause(Duration),
    /// The wait is over: the next attempt may go.
    Over,
    /// The sink answered its probe after this long: the next attempt
    /// goes now.
    Answered(Duration),
}

impl RetryState {
    /// Whether a wait before the next attempt runs.
    pub(super) fn backing_off(&self) -> bool {
        self.wait.is_some()
    }

    /// Stop waiting: the next step tries the sink again.
    pub(super) fn end_backoff(&mut self) {
        self.wait = None;
    }

    /// A transient failure at `now`: wait `initial` × 2^attempts up to
    /// `retry_max`, fully jittered by `random` (asked only then), at least
    /// the sink's retry-after (`after`, itself at most `retry_max`). While
    /// the wait runs, the sink is probed every [`PROBE_EVERY`] after the
    /// retry-after (see [`Self::step`]): without probes, delivery resumed
    /// up to 5 s after a 5 s outage ended, 19.5 s after a 12 s one.
    pub(super) fn failed(
        &mut self,
        now: Instant,
        settings: &DeliveryConfig,
        after: Option<Duration>,
        random: impl FnOnce() -> u64,
    ) -> AfterFailure {
        self.attempts += 1;
        let cap = Backoff::new(settings.retry_initial(), settings.retry_max()).delay(self.attempts);
        let jittered = Duration::from_micros(random() % (cap.as_micros() as u64 + 1));
        let delay = after
            .map_or(jittered, |a| a.max(jittered))
            .min(settings.retry_max());
        let loud = self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= RETRY_LOG_EVERY);
        if loud {
            self.last_log = Some(now);
        }
        let honour = after.unwrap_or(Duration::ZERO);
        self.wait = Some(Wait {
            started: now,
            until: now + delay,
            next_probe: now + honour.min(delay) + PROBE_EVERY,
        });
        AfterFailure {
            delay,
            attempts: self.attempts,
            loud,
        }
    }

    /// At a turn of the loop while a wait runs (`None` when none does):
    /// probe the sink with `probe` if a probe is due; say whether to go.
    pub(super) fn step(&mut self, now: Instant, probe: impl FnOnce() -> bool) -> Option<Waiting> {
        let w = self.wait.as_mut()?;
        if now >= w.until {
            self.wait = None;
            return Some(Waiting::Over);
        }
        if now >= w.next_probe {
            if probe() {
                let waited = now.saturating_duration_since(w.started);
                self.wait = None;
                return Some(Waiting::Answered(waited));
            }
            w.next_probe = now + PROBE_EVERY;
        }
        Some(Waiting::Pause(
            w.next_probe.min(w.until).saturating_duration_since(now),
        ))
    }
}

/// xorshift64: jitter needs spread, not cryptographic quality.
pub(super) fn random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}
