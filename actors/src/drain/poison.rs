//! Poison records: a record the sink fails on every time (it panics on it,
//! or asks to retry it for ever) while other records go through. Without
//! care it holds its shard for good, or, with `retry_duration_max_ms`,
//! takes the good records of its batch into the dead-letter store with it.
//!
//! The rules, per batch in flight ([`Failures`] is its history):
//!
//! - A batch of more than one record that failed [`SPLIT_AFTER`] times in a
//!   row (a transient failure of the whole batch, a retry of its first
//!   record, a panic) is halved; each half is offered on its own, in
//!   order, and halved again if it fails again, until the failing records
//!   are alone. The halves that go through are delivered.
//! - A lone record that failed [`POISON_AFTER`] times in a row while the
//!   sink committed other records since its batch first failed is poison:
//!   if it panicked the sink, it is dead-lettered (`panicked: ...`); if
//!   the sink asked to retry it, it is retried until
//!   `retry_duration_max_ms` has passed since its batch first failed, then
//!   dead-lettered (`retried for N s: ...`).
//! - When nothing was committed since its batch first failed (the record
//!   came first), something else must tell a bad record from a sink that
//!   is down. With batches in flight (order across batches is not kept),
//!   a lone record that panicked the sink [`SPLIT_AFTER`] times waits, and
//!   the batch after it may be offered meanwhile (one past
//!   `batches_in_flight`): the witness. One batch at a time keeps the push
//!   order, so no record may pass it: there the sink's health check,
//!   asked after the record panicked it [`POISON_AFTER`] times, is the
//!   witness (healthy: poison). A record the sink asks to retry is never
//!   judged so before the time limit.
//! - `retry_duration_max_ms` gives up a batch whose sink committed nothing
//!   since the batch first failed (the downstream is down) whole, with
//!   every other batch for which the same holds, as before; a batch past
//!   it while the sink takes other records is halved instead.

use std::time::{Duration, Instant};

/// Failures in a row after which a batch is halved, or a lone record is
/// a suspect.
pub(super) const SPLIT_AFTER: u32 = 2;
/// Failures in a row after which a lone record is poison, if the sink
/// committed other records since its batch first failed.
pub(super) const POISON_AFTER: u32 = 3;

/// One batch's failures since it was last answered for good.
#[derive(Debug, Clone, Default)]
pub(super) struct Failures {
    /// Failures in a row of the batch as it stands (0 after a split).
    count: u32,
    /// When its records first failed: kept across splits and partial
    /// answers, `retry_duration_max_ms` counts from here.
    since: Option<Instant>,
    /// The cursor's count of answers that finished records, at the first
    /// failure.
    commits_at_first: u64,
    /// The last failure's reason, and whether the sink panicked.
    reason: String,
    panicked: bool,
    /// A lone record retried for ever while others go through was logged.
    pub warned: bool,
    /// Past the time limit with nothing committed since its first
    /// failure, a witness was let through once before it is given up.
    witness_asked: bool,
}

/// One more failure of a batch in flight, with what the drain knows then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt<'a> {
    /// Records in the batch as it stands.
    pub len: usize,
    pub now: Instant,
    /// Why it failed (a panic's message when `panicked`).
    pub reason: &'a str,
    /// The sink panicked on it.
    pub panicked: bool,
    /// The cursor's count of answers that committed records.
    pub commits: u64,
    /// `retry_duration_max_ms` (`None`: retry for ever).
    pub limit: Option<Duration>,
    /// A later batch may be offered before this one (batches in flight):
    /// it can be the witness.
    pub witness: bool,
}

/// What a batch's failure leads to.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Offer it again after the backoff.
    Again,
    /// Halve it; each half is offered on its own.
    Split,
    /// A lone record fails while others go through, and the sink asks
    /// to retry it: retried until `retry_duration_max_ms` (off).
    Stuck,
    /// Dead-letter every record of it with this reason; `poison`: a lone
    /// record set aside while the sink takes others, `outage`: the sink
    /// took nothing since the batch first failed (every other batch in
    /// the same state goes too).
    GiveUp {
        reason: String,
        poison: bool,
        outage: bool,
    },
}

impl Failures {
    /// What the halves of a split batch, or the rest of a partly answered
    /// one, start with: its first failure, not its count.
    pub(super) fn carried(&self) -> Failures {
        Failures {
            count: 0,
            warned: false,
            ..self.clone()
        }
    }

    /// With batches in flight, a suspect that waits for a witness (a
    /// commit since it first failed): a lone record that panicked the sink
    /// [`SPLIT_AFTER`] times in a row, or is past the time limit with
    /// nothing committed since it first failed. A record the sink asks to
    /// retry waits for nothing before the limit.
    pub(super) fn waiting(&self, len: usize, commits: u64) -> bool {
        len == 1
            && self.commits_at_first == commits
            && ((self.count >= SPLIT_AFTER && self.panicked) || self.witness_asked)
    }

    /// Whether the sink committed nothing since this batch first failed.
    pub(super) fn no_commit_since_first(&self, commits: u64) -> bool {
        self.since.is_some() && self.commits_at_first == commits
    }

    /// Whether `limit` has passed at `now` since the first failure.
    pub(super) fn expired(&self, now: Instant, limit: Option<Duration>) -> bool {
        match (self.since, limit) {
            (Some(since), Some(limit)) => now.saturating_duration_since(since) >= limit,
            _ => false,
        }
    }

    /// The dead-letter reason after the time limit.
    pub(super) fn expired_reason(&self, limit: Duration) -> String {
        if self.panicked {
            format!(
                "panicked: {} (failing for {} s)",
                self.reason,
                limit.as_secs()
            )
        } else {
            format!("retried for {} s: {}", limit.as_secs(), self.reason)
        }
    }

    /// The batch failed once more (`attempt`); `sink_up` (the sink's
    /// health check, asked only when needed) is the witness when no later
    /// batch can be (`attempt.witness` false).
    pub(super) fn failed(
        &mut self,
        attempt: Attempt<'_>,
        sink_up: impl FnOnce() -> bool,
    ) -> Verdict {
        let Attempt {
            len,
            now,
            reason,
            panicked,
            commits,
            limit,
            witness,
        } = attempt;
        if self.since.is_none() {
            self.since = Some(now);
            self.commits_at_first = commits;
        }
        // Other records went through since this batch first failed: the
        // sink is up, this batch is what fails.
        let others_went_through = commits > self.commits_at_first;
        self.count += 1;
        self.reason = reason.to_string();
        self.panicked = panicked;
        if let Some(limit) = limit.filter(|_| self.expired(now, limit)) {
            let mut outage = self.no_commit_since_first(commits);
            if len > 1 {
                return Verdict::Split;
            }
            if outage && witness && !self.witness_asked {
                self.witness_asked = true;
                return Verdict::Again;
            }
            if outage && !witness && sink_up() {
                outage = false;
            }
            return Verdict::GiveUp {
                reason: self.expired_reason(limit),
                poison: !outage,
                outage,
            };
        }
        if self.count < SPLIT_AFTER {
            return Verdict::Again;
        }
        if len > 1 {
            return Verdict::Split;
        }
        if self.count < POISON_AFTER {
            return Verdict::Again;
        }
        match (others_went_through, panicked) {
            (true, true) => Verdict::GiveUp {
                reason: format!(
                    "panicked: {reason}; the record failed alone {} times while others were delivered",
                    self.count
                ),
                poison: true,
                outage: false,
            },
            (true, false) => Verdict::Stuck,
            (false, true) if !witness && sink_up() => Verdict::GiveUp {
                reason: format!(
                    "panicked: {reason}; the record failed alone {} times, and the sink's health check says it is up",
                    self.count
                ),
                poison: true,
                outage: false,
            },
            (false, _) => Verdict::Again,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// An attempt of `len` records failing at `now`.
    #[allow(clippy::too_many_arguments)] // the test's shorthand for one Attempt
    fn at(
        len: usize,
        now: Instant,
        reason: &str,
        panicked: bool,
        commits: u64,
        limit: Option<Duration>,
        witness: bool,
    ) -> Attempt<'_> {
        Attempt {
            len,
            now,
            reason,
            panicked,
            commits,
            limit,
            witness,
        }
    }

    #[test]
    fn a_batch_is_halved_after_two_failures_in_a_row() {
        let t = Instant::now();
        let mut f = Failures::default();
        assert_eq!(
            f.failed(at(10, t, "503", false, 0, None, true), || false),
            Verdict::Again
        );
        assert_eq!(
            f.failed(at(10, t, "503", false, 0, None, true), || false),
            Verdict::Split
        );
        let half = f.carried();
        assert_eq!(half.count, 0);
        assert_eq!(half.since, Some(t), "the halves keep the first failure");
    }

    #[test]
    fn a_lone_record_that_panics_while_others_go_through_is_poison() {
        let t = Instant::now();
        let mut f = Failures::default();
        assert_eq!(
            f.failed(at(1, t, "boom", true, 5, None, true), || false),
            Verdict::Again
        );
        // Nothing committed since: the sink may be what is broken.
        assert_eq!(
            f.failed(at(1, t, "boom", true, 5, None, true), || false),
            Verdict::Again
        );
        assert!(f.waiting(1, 5), "a suspect waits for a witness");
        assert!(!f.waiting(1, 6), "a commit since is the witness");
        assert!(!f.waiting(2, 5), "a batch is halved, not a suspect");
        match f.failed(at(1, t, "boom", true, 6, None, true), || false) {
            Verdict::GiveUp {
                reason,
                poison: true,
                outage: false,
            } => assert!(reason.starts_with("panicked: boom"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    /// One batch at a time: no later record may pass the suspect, so the
    /// sink's health check is the witness, asked only then.
    #[test]
    fn one_at_a_time_the_health_check_is_the_witness() {
        let t = Instant::now();
        for (up, want_poison) in [(true, true), (false, false)] {
            let mut f = Failures::default();
            let asked = std::cell::Cell::new(0);
            let probe = || {
                asked.set(asked.get() + 1);
                up
            };
            f.failed(at(1, t, "boom", true, 5, None, false), probe);
            f.failed(at(1, t, "boom", true, 5, None, false), probe);
            assert_eq!(asked.get(), 0, "not asked before the third failure");
            let v = f.failed(at(1, t, "boom", true, 5, None, false), probe);
            assert_eq!(asked.get(), 1);
            assert_eq!(
                matches!(v, Verdict::GiveUp { poison: true, .. }),
                want_poison,
                "{v:?}"
            );
        }
    }

    #[test]
    fn a_lone_record_retried_while_others_go_through_waits_for_the_time_limit() {
        let t = Instant::now();
        let mut f = Failures::default();
        f.failed(at(1, t, "500", false, 1, Some(60 * S), true), || false);
        f.failed(at(1, t, "500", false, 2, Some(60 * S), true), || false);
        assert_eq!(
            f.failed(at(1, t + S, "500", false, 3, Some(60 * S), true), || false),
            Verdict::Stuck
        );
        match f.failed(
            at(1, t + 61 * S, "500", false, 4, Some(60 * S), true),
            || false,
        ) {
            Verdict::GiveUp {
                reason,
                poison: true,
                outage: false,
            } => assert_eq!(reason, "retried for 60 s: 500"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_time_limit_gives_up_a_whole_batch_only_when_nothing_went_through() {
        let t = Instant::now();
        let mut outage = Failures::default();
        outage.failed(at(100, t, "refused", false, 7, Some(10 * S), true), || {
            false
        });
        assert_eq!(
            outage.failed(
                at(100, t + 11 * S, "refused", false, 7, Some(10 * S), true),
                || false
            ),
            Verdict::Split,
            "past the limit a batch is halved down to lone records"
        );
        let mut outage = outage.carried();
        assert_eq!(
            outage.failed(
                at(1, t + 12 * S, "refused", false, 7, Some(10 * S), true),
                || false
            ),
            Verdict::Again,
            "a lone record lets a witness through first"
        );
        assert!(outage.waiting(1, 7));
        match outage.failed(
            at(1, t + 13 * S, "refused", false, 7, Some(10 * S), true),
            || false,
        ) {
            Verdict::GiveUp {
                outage: true,
                poison: false,
                reason,
            } => assert_eq!(reason, "retried for 10 s: refused"),
            other => panic!("{other:?}"),
        }
        let mut poisoned = Failures::default();
        poisoned.failed(at(100, t, "500", false, 7, Some(10 * S), true), || false);
        assert_eq!(
            poisoned.failed(
                at(100, t + 11 * S, "500", false, 8, Some(10 * S), true),
                || { false }
            ),
            Verdict::Split,
            "the sink took other records: halve rather than give up good ones"
        );
    }
}
