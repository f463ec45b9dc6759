//! The daemon's budget of read-buffer bytes, shared by every door: how a
//! frame reserves its bytes, gives them back, and how a connection waits
//! for some to be released. The bytes are counted in
//! `DaemonStats::read_buffer_bytes`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::ingest::frame_buffers::FrameBuffers;

/// Tells connections waiting for read-buffer budget that some was released
/// (the bytes themselves are counted in `DaemonStats::read_buffer_bytes`).
/// Waking on release rather than polling: measured with 385 connections
/// waiting, a 10 ms poll cost ~34,000 wake-ups a second.
#[derive(Debug, Default)]
pub struct ReadBudget {
    /// Bumped on every release, so a waiter that checked before a release
    /// and starts waiting after it does not miss it.
    epoch: AtomicU64,
    freed: tokio::sync::Notify,
    /// The buffers of finished large frames, for the next ones.
    pub frame_buffers: FrameBuffers,
}

impl ReadBudget {
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Reserve `bytes` of the budget `held` (the daemon's
    /// `read_buffer_bytes`) under `cap`; false when it does not fit. The
    /// first reservation always fits, so the largest frame can arrive.
    pub(crate) fn reserve(held: &AtomicU64, bytes: u64, cap: u64) -> bool {
        let before = held.fetch_add(bytes, Ordering::AcqRel);
        if before > 0 && before + bytes > cap {
            held.fetch_sub(bytes, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Give back `bytes` reserved of `held`, and wake whoever waits for it
    /// (a socket connection's frame, whichever door released).
    pub(crate) fn release(&self, held: &AtomicU64, bytes: u64) {
        held.fetch_sub(bytes, Ordering::AcqRel);
        self.released();
    }

    fn released(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.freed.notify_waiters();
    }

    /// Wait until a release after `seen` (or `max` passes).
    pub(crate) async fn wait_for_release(&self, seen: u64, max: Duration) {
        let notified = self.freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.epoch() != seen {
            return;
        }
        let _ = tokio::time::timeout(max, notified).await;
    }
}
