//! Which producer connections sit idle, so that at `connections_max` the
//! listener can close the one idle longest to let a new one in
//! (`server.evict_idle_connections`): idle holders can no longer lock
//! producers out until their idle timeout (5 minutes by default).
//!
//! Each connection registers once when it starts and leaves when it goes
//! (one lock each). While it waits for a read with no frame started, its own
//! [`IdleMark`] holds when that wait began; when the read ends it is swapped
//! back to busy: one atomic store and one swap per read, none per record,
//! and no shared lock on the hot path.
//!
//! At the cap the listener ([`IdleConnections::evict_one`]) picks, among
//! the connections idle for at least `server.evict_idle_after_ms` (so a
//! burst of fresh connections cannot evict each other), the longest-idle one
//! whose responder has nothing in flight (no frame waiting for its answer, no
//! answer unwritten), and claims it by a compare-exchange of its mark. A
//! claimed connection closes (on [`Evict`], or when its read ends, whichever
//! comes first) without taking in anything more. The claim cannot race with
//! a frame: a frame is taken in only after the read that brought it ended,
//! which swaps the mark and makes a later claim fail. The producer sees its
//! socket closed (EOF), which clients treat as a reason to reconnect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;

use crate::ingest::responder::Responder;

/// The mark of a connection that is not waiting idle.
const BUSY: u64 = 0;
/// The mark of a connection the listener chose to close.
const CLAIMED: u64 = u64::MAX;
/// Candidates the listener tries, longest-idle first, before it refuses the
/// new connection instead (each may have turned busy meanwhile).
pub(crate) const EVICT_TRIES: usize = 8;

/// Sent by the listener to a connection it claimed: close now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Evict;

/// One connection's idle state: [`BUSY`], [`CLAIMED`], or the time its idle
/// wait began (nanoseconds since the registry's epoch, plus one).
#[derive(Debug, Default)]
pub struct IdleMark(AtomicU64);

impl IdleMark {
    /// The connection starts waiting for a read with nothing started.
    pub fn set_idle(&self, since: u64) {
        // A claim is final: the connection closes.
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                (m != CLAIMED).then_some(since)
            });
    }

    /// The read ended: busy again. True when the listener claimed the
    /// connection meanwhile: it must close without taking in what it read.
    pub fn set_busy(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                (m != CLAIMED).then_some(BUSY)
            })
            .is_err()
    }

    /// Whether the listener claimed this connection.
    pub fn claimed(&self) -> bool {
        self.0.load(Ordering::Acquire) == CLAIMED
    }

    /// When the idle wait began, if the connection waits idle (neither busy
    /// nor claimed).
    pub(crate) fn idle_since(&self) -> Option<u64> {
        let since = self.0.load(Ordering::Acquire);
        (since != BUSY && since != CLAIMED).then_some(since)
    }

    /// Claim the connection if it still waits idle since `since`: it turned
    /// busy (or was claimed) meanwhile when this returns false.
    pub(crate) fn claim(&self, since: u64) -> bool {
        self.0
            .compare_exchange(since, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

struct Entry {
    mark: Arc<IdleMark>,
    responder: Arc<Responder>,
    evict: Recipient<Evict>,
}

/// Every open producer connection's [`IdleMark`], shared by the connection
/// arbiters and the listener.
pub struct IdleConnections {
    epoch: Instant,
    entries: Mutex<HashMap<u64, Entry>>,
}

impl Default for IdleConnections {
    fn default() -> Self {
        IdleConnections {
            epoch: Instant::now(),
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl IdleConnections {
    /// Now, as an idle mark.
    pub fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).saturating_add(1)
    }

    /// A connection started (on its arbiter).
    pub fn register(
        &self,
        id: u64,
        mark: Arc<IdleMark>,
        responder: Arc<Responder>,
        evict: Recipient<Evict>,
    ) {
        self.entries.lock().unwrap().insert(
            id,
            Entry {
                mark,
                responder,
                evict,
            },
        );
    }

    /// A connection went away.
    pub fn remove(&self, id: u64) {
        self.entries.lock().unwrap().remove(&id);
    }

    /// Claim the connection idle longest (at least `min_idle`) with nothing
    /// in flight and tell it to close; its id, or `None` when there is none.
    pub fn evict_one(&self, min_idle: Duration) -> Option<u64> {
        let now = self.now();
        let min_idle = min_idle.as_nanos() as u64;
        let entries = self.entries.lock().unwrap();
        let mut candidates: Vec<(u64, u64)> = entries
            .iter()
            .filter_map(|(id, e)| {
                let since = e.mark.idle_since()?;
                (now.saturating_sub(since) >= min_idle).then_some((since, *id))
            })
            .collect();
        candidates.sort_unstable();
        for (since, id) in candidates.into_iter().take(EVICT_TRIES) {
            let e = &entries[&id];
            // Checked before the claim: once the claim holds, no frame can
            // come in (see the module documentation), so nothing waits.
            if !e.responder.nothing_in_flight() {
                continue;
            }
            if e.mark.claim(since) {
                e.evict.do_send(Evict);
                return Some(id);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_final_and_a_busy_connection_cannot_be_claimed() {
        let m = IdleMark::default();
        assert!(!m.set_busy(), "not claimed");
        m.set_idle(5);
        assert!(m
            .0
            .compare_exchange(5, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok());
        m.set_idle(9);
        assert!(m.claimed(), "an idle wait after the claim does not undo it");
        assert!(m.set_busy(), "the read that ends after a claim closes");
        let busy = IdleMark::default();
        busy.set_idle(7);
        assert!(!busy.set_busy());
        assert!(busy
            .0
            .compare_exchange(7, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_err());
    }
}
