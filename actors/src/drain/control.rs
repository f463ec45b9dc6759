//! What an operator asks of one sink's cursor in one shard, through the
//! admin socket (`ctl sink pause | resume | rewind`): the admin side sets
//! it, the cursor reads it at its next step, between batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Where a rewind moves a cursor to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewindTo {
    /// The oldest record the shard still holds.
    Oldest,
    /// This sequence number (or the oldest record held, if that is later).
    Seq(u64),
}

/// One sink's cursor in one shard, as the operator steers it.
#[derive(Debug, Default)]
pub struct CursorControl {
    paused: AtomicBool,
    rewind: Mutex<Option<RewindTo>>,
}

impl CursorControl {
    /// Hold (true) or release (false) delivery: a paused cursor offers
    /// nothing and keeps its records (its backlog holds the WAB like a
    /// lagging sink's).
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
    }

    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// Ask for a rewind (a later request replaces one not yet applied).
    pub fn request_rewind(&self, to: RewindTo) {
        *self.rewind.lock().unwrap() = Some(to);
    }

    pub(super) fn take_rewind(&self) -> Option<RewindTo> {
        self.rewind.lock().unwrap().take()
    }
}
