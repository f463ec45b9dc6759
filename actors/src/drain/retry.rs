//! Retrying transient failures: exponential backoff with full jitter,
//! capped at `retry_max`, honouring the sink's retry-after; probing the
//! sink while backing off so delivery resumes soon after it recovers; and,
//! with `max_retry_duration`, giving up on a batch into the dead-letter
//! store.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use spillway_wab::Storage;

use super::cursor::{Cursor, DrainWait};

/// The failures in a row of the batch at the head.
#[derive(Default)]
pub(super) struct RetryState {
    attempts: u32,
    first_failure: Option<Instant>,
    last_log: Option<Instant>,
    /// The wait before the next attempt, while one runs.
    backoff: Option<Backoff>,
}

/// A wait before the next attempt: until `until`, but the sink is probed
/// from `next_probe` on, every [`PROBE_EVERY`], and the next attempt
/// comes as soon as it answers.
struct Backoff {
    started: Instant,
    until: Instant,
    next_probe: Instant,
}

impl RetryState {
    /// Whether a wait before the next attempt runs.
    pub(super) fn backing_off(&self) -> bool {
        self.backoff.is_some()
    }

    /// Stop waiting: the next step tries the sink again.
    pub(super) fn end_backoff(&mut self) {
        self.backoff = None;
    }
}

/// How often a backing-off drain checks whether the sink is back.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often a shard logs a still-failing sink at warn level.
const RETRY_LOG_EVERY: Duration = Duration::from_secs(10);

impl<S: Storage> Cursor<S> {
    /// A transient failure of a batch of `n` records: back off, or, once
    /// the sink has failed for longer than `max_retry_duration`, give the
    /// batch up: the reason to dead-letter its records with.
    pub(super) fn after_transient(
        &mut self,
        n: usize,
        after: Option<Duration>,
        reason: String,
    ) -> Option<String> {
        let now = self.clock.now();
        let first = *self.retry.first_failure.get_or_insert(now);
        self.retry.attempts += 1;
        self.stats.retries.fetch_add(1, Ordering::Relaxed);
        self.stats
            .sink
            .lock()
            .unwrap()
            .failing(super::SinkState::Retrying, &reason);
        let settings = self.host.settings().clone();
        if let Some(limit) = settings.max_retry_duration {
            if now.duration_since(first) >= limit && n > 0 {
                self.retry = RetryState::default();
                return Some(format!(
                    "gave up after {} s of transient failures: {reason}",
                    limit.as_secs()
                ));
            }
        }
        let cap = settings
            .retry_initial
            .saturating_mul(1u32 << self.retry.attempts.min(20))
            .min(settings.retry_max);
        let jittered = Duration::from_micros(self.random() % (cap.as_micros() as u64 + 1));
        // The sink's retry-after is honoured, up to retry_max like any delay.
        let delay = after
            .map_or(jittered, |a| a.max(jittered))
            .min(settings.retry_max);
        let loud = self
            .retry
            .last_log
            .is_none_or(|t| now.duration_since(t) >= RETRY_LOG_EVERY);
        if loud {
            self.retry.last_log = Some(now);
            tracing::warn!(shard = self.shard, sink = %self.sink, target = %self.host.description(), attempts = self.retry.attempts, records = n, retry_in_ms = delay.as_millis() as u64, reason = %reason, "delivery failed (transient); retrying");
        } else {
            tracing::debug!(shard = self.shard, sink = %self.sink, attempts = self.retry.attempts, reason = %reason, "delivery retry");
        }
        self.back_off(delay, after.unwrap_or(Duration::ZERO));
        None
    }

    /// Wait `delay` before the next attempt, but probe the sink every
    /// [`PROBE_EVERY`] meanwhile and retry as soon as it answers: the
    /// backoff grows while the sink is down (up to `retry_max`), and without
    /// probes delivery resumed up to 5 s after a 5 s outage ended, 19.5 s
    /// after a 12 s one. A probe is one health check per second, which
    /// does not hammer a sink that is still down. A retry-after the sink
    /// asked for (`honour`) is waited out before any probe. The wait itself
    /// is [`Self::backing_off`]'s, one step at a time.
    fn back_off(&mut self, delay: Duration, honour: Duration) {
        let now = self.clock.now();
        self.retry.backoff = Some(Backoff {
            started: now,
            until: now + delay,
            next_probe: now + honour.min(delay) + PROBE_EVERY,
        });
    }

    /// While a backoff runs: how long to pause before looking again, after
    /// probing the sink if a probe is due. `None` once the next attempt may
    /// go (the wait is over, or the sink answered its probe).
    pub(super) fn backing_off(&mut self) -> Option<DrainWait> {
        let b = self.retry.backoff.as_ref()?;
        let now = self.clock.now();
        if now >= b.until {
            self.retry.backoff = None;
            return None;
        }
        if now >= b.next_probe {
            let call = self.stats.sink_call();
            let answers = self.host.probe();
            drop(call);
            if answers {
                let waited = now.saturating_duration_since(b.started);
                tracing::info!(
                    shard = self.shard,
                    sink = %self.sink,
                    waited_ms = waited.as_millis() as u64,
                    "the sink answers its health check again; retrying now"
                );
                self.retry.backoff = None;
                return None;
            }
            let b = self.retry.backoff.as_mut().expect("checked above");
            b.next_probe = now + PROBE_EVERY;
        }
        let b = self.retry.backoff.as_ref().expect("checked above");
        Some(DrainWait::Pause(
            b.next_probe.min(b.until).saturating_duration_since(now),
        ))
    }

    /// xorshift64: jitter needs spread, not cryptographic quality.
    pub(super) fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}
