//! The shard's durable watermark and the readers waiting for it to move.
//!
//! The flusher publishes a watermark after every group commit, thousands
//! of times a second under load, while each sink's cursor needs only some
//! of them: one lingering for a fuller batch needs enough new records to
//! fill it (or its linger to end), not each commit's few. A reader
//! therefore says what it waits for ([`Until`]) and sleeps on a
//! [`Doorbell`] of its own; the publisher rings only the readers whose wait
//! the new watermark ends. Before, every commit woke every cursor of the
//! shard (about 7,000 wake-ups a second per cursor at 20,000 records/s),
//! and each sink added its cursors' wake-ups to the cores the producers'
//! acks wait for.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Watermark;

/// What wakes one reader: the watermark passing what it waits for, an
/// answer from one of its delivery workers, or a request to stop. A ring
/// while the reader is awake is kept for its next wait, so none is lost.
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Doorbell {
    pub fn ring(&self) {
        *self.rung.lock().unwrap() = true;
        self.cv.notify_one();
    }

    /// Sleep until rung or `timeout` has passed; takes the ring.
    fn wait(&self, timeout: Duration) {
        let rung = self.rung.lock().unwrap();
        let (mut rung, _) = self
            .cv
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap();
        *rung = false;
    }
}

/// Which watermark, after `seen`, ends a reader's wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// Any change.
    Changed,
    /// At least `records` more records or `bytes` more record bytes
    /// (headers and payloads: at least as many as the payload bytes, so a
    /// reader counting payloads is woken no later than it needs), or a
    /// change of segment or of the checker's gate.
    Grown { records: u64, bytes: u64 },
}

impl Until {
    fn reached(self, seen: &Watermark, now: &Watermark) -> bool {
        match self {
            Until::Changed => now != seen,
            Until::Grown { records, bytes } => {
                now.segment_id != seen.segment_id
                    || now.unchecked_from != seen.unchecked_from
                    || now.next_seq >= seen.next_seq.saturating_add(records)
                    || now.bytes >= seen.bytes.saturating_add(bytes)
            }
        }
    }
}

/// A reader asleep until the watermark passes what it waits for.
struct Sleeper {
    bell: Arc<Doorbell>,
    seen: Watermark,
    until: Until,
}

#[derive(Default)]
struct State {
    watermark: Watermark,
    sleepers: Vec<Sleeper>,
}

/// The watermark and its sleepers, under one lock: a reader checks the
/// watermark and lies down in the same hold, so a publish between the two
/// cannot pass it by.
#[derive(Default)]
pub struct DurableWatch {
    state: Mutex<State>,
}

impl DurableWatch {
    pub(super) fn get(&self) -> Watermark {
        self.state.lock().unwrap().watermark
    }

    /// Change the watermark with `f` and ring every sleeper whose wait it
    /// ends. Returns what `f` returned.
    pub(super) fn update<R>(&self, f: impl FnOnce(&mut Watermark) -> R) -> R {
        let mut state = self.state.lock().unwrap();
        let out = f(&mut state.watermark);
        let now = state.watermark;
        state.sleepers.retain(|s| {
            let due = s.until.reached(&s.seen, &now);
            if due {
                s.bell.ring();
            }
            !due
        });
        out
    }

    /// Wait until the watermark passes `until` after `seen`, `bell` rings
    /// (a delivery worker's answer, a stop) or `timeout` passes; returns
    /// the watermark then. Only a publish that ends the wait wakes the
    /// caller.
    pub fn wait(
        &self,
        seen: Watermark,
        until: Until,
        timeout: Duration,
        bell: &Arc<Doorbell>,
    ) -> Watermark {
        let mut state = self.state.lock().unwrap();
        if until.reached(&seen, &state.watermark) {
            return state.watermark;
        }
        state.sleepers.push(Sleeper {
            bell: bell.clone(),
            seen,
            until,
        });
        drop(state);
        bell.wait(timeout);
        let mut state = self.state.lock().unwrap();
        state.sleepers.retain(|s| !Arc::ptr_eq(&s.bell, bell));
        state.watermark
    }
}

#[cfg(test)]
mod tests {
    use std::thread;
    use std::time::Instant;

    use super::*;

    fn at(next_seq: u64, bytes: u64) -> Watermark {
        Watermark {
            segment_id: 1,
            offset: bytes,
            next_seq,
            bytes,
            ..Watermark::default()
        }
    }

    #[test]
    fn a_grown_wait_ends_at_either_count_or_a_new_segment_not_before() {
        let seen = at(10, 1000);
        let until = Until::Grown {
            records: 5,
            bytes: 500,
        };
        assert!(!until.reached(&seen, &seen));
        assert!(!until.reached(&seen, &at(14, 1499)));
        assert!(until.reached(&seen, &at(15, 1001)));
        assert!(until.reached(&seen, &at(11, 1500)));
        let next_segment = Watermark {
            segment_id: 2,
            ..at(11, 1001)
        };
        assert!(until.reached(&seen, &next_segment));
        let gate_opened = Watermark {
            unchecked_from: 7,
            ..at(10, 1000)
        };
        assert!(until.reached(&seen, &gate_opened));
        assert!(Until::Changed.reached(&seen, &at(10, 1001)));
    }

    #[test]
    fn a_publish_rings_only_the_sleepers_it_is_enough_for() {
        let watch = Arc::new(DurableWatch::default());
        watch.update(|w| *w = at(10, 1000));
        let bell = Arc::new(Doorbell::default());
        let waiter = {
            let (watch, bell) = (watch.clone(), bell.clone());
            thread::spawn(move || {
                let until = Until::Grown {
                    records: 100,
                    bytes: u64::MAX,
                };
                let started = Instant::now();
                let wm = watch.wait(at(10, 1000), until, Duration::from_secs(30), &bell);
                (wm, started.elapsed())
            })
        };
        // Commits too small to fill the batch leave the sleeper asleep
        // (it is still on the list after each), the one that fills it
        // rings it.
        while watch.state.lock().unwrap().sleepers.is_empty() {
            thread::sleep(Duration::from_millis(1));
        }
        for n in 1..=9 {
            watch.update(|w| *w = at(10 + n * 10, 1000 + n));
            assert_eq!(
                watch.state.lock().unwrap().sleepers.len(),
                1,
                "after commit {n}"
            );
        }
        watch.update(|w| *w = at(110, 1010));
        let (wm, waited) = waiter.join().unwrap();
        assert_eq!(wm.next_seq, 110);
        assert!(
            waited < Duration::from_secs(30),
            "woken by the ring, not the timeout"
        );
        assert!(watch.state.lock().unwrap().sleepers.is_empty());
    }

    #[test]
    fn a_ring_while_awake_ends_the_next_wait_at_once() {
        let watch = DurableWatch::default();
        let bell = Arc::new(Doorbell::default());
        // How long a wait for a change that never comes lasted.
        let waited = |timeout| {
            let started = Instant::now();
            watch.wait(Watermark::default(), Until::Changed, timeout, &bell);
            started.elapsed()
        };
        bell.ring();
        assert!(waited(Duration::from_secs(30)) < Duration::from_secs(30));
        assert!(watch.state.lock().unwrap().sleepers.is_empty());
        // The ring was taken: the next wait sleeps until its timeout.
        assert!(waited(Duration::from_millis(50)) >= Duration::from_millis(50));
    }
}
