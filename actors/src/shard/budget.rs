//! The WAB byte budget, and its one owner per shard.
//!
//! `wab.wab_bytes_max` caps the bytes of every shard's segment files
//! together. Each shard's share is counted in one place, its
//! [`ShardBudget`] (on the [`crate::ShardQueue`]), through three verbs:
//!
//! - **admit** (the connection, and `ctl dead-letter requeue`): may a push
//!   of this size be queued, or does it get Overloaded;
//! - **charge** (the flusher): bytes written to a segment, and at start the
//!   bytes recovery found;
//! - **release** (the drain, when it removes a confirmed segment; the
//!   supervisor, when a restarted shard is about to be recovered and
//!   charged again).
//!
//! Releasing more than was charged is a bug; debug builds assert it, and
//! release builds clamp at zero and log it once rather than wrap around.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes each record takes in a segment besides its payload (its header,
/// as the WAB format lays it out), counted at admission.
pub const RECORD_OVERHEAD: u64 = spillway_wab::format::RECORD_HEADER_LEN as u64;

/// The daemon-wide cap and the bytes every shard holds together.
#[derive(Debug)]
pub struct WabBudget {
    used: AtomicU64,
    max: u64,
    /// A release below zero was seen (logged once).
    underflow_logged: AtomicBool,
    /// A push was refused at the cap since bytes were last released: each
    /// shard's drain then asks its flusher to seal an active segment whose
    /// records are all delivered, so deleting it frees its bytes.
    refused: AtomicBool,
}

impl WabBudget {
    pub fn new(max: u64) -> Arc<Self> {
        Arc::new(WabBudget {
            used: AtomicU64::new(0),
            max,
            underflow_logged: AtomicBool::new(false),
            refused: AtomicBool::new(false),
        })
    }

    /// Bytes held by every shard together.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// `wab.wab_bytes_max`.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Whether a push was refused at the cap since bytes were last
    /// released.
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    fn release(&self, bytes: u64, what: &str) {
        subtract(&self.used, bytes, what, &self.underflow_logged);
        if bytes > 0 && self.refused() {
            self.refused.store(false, Ordering::Relaxed);
        }
    }
}

/// One shard's bytes in the WAB (its segment files on disk), and its way
/// to the daemon-wide cap.
#[derive(Debug)]
pub struct ShardBudget {
    global: Arc<WabBudget>,
    held: AtomicU64,
}

impl ShardBudget {
    pub fn new(global: &Arc<WabBudget>) -> Self {
        ShardBudget {
            global: global.clone(),
            held: AtomicU64::new(0),
        }
    }

    /// The disk bytes a push of `records` records with `payload_bytes` in
    /// all takes.
    pub fn disk_bytes(payload_bytes: u64, records: usize) -> u64 {
        payload_bytes + RECORD_OVERHEAD * records as u64
    }

    /// Whether `disk_bytes` more fit under the cap now. Admission does not
    /// reserve: the bytes count once the flusher writes them ([`Self::charge`]).
    pub fn admit(&self, disk_bytes: u64) -> bool {
        let fits = self.global.used().saturating_add(disk_bytes) <= self.global.max;
        // Checked first: refusals come in storms, and a store on every one
        // would bounce the cache line between cores.
        if !fits && !self.global.refused() {
            self.global.refused.store(true, Ordering::Relaxed);
        }
        fits
    }

    /// Whether the daemon-wide cap refused a push since bytes were last
    /// released (see [`WabBudget::refused`]).
    pub fn refused(&self) -> bool {
        self.global.refused()
    }

    /// Count `bytes` written to (or recovered in) this shard's segments.
    pub fn charge(&self, bytes: u64) {
        self.held.fetch_add(bytes, Ordering::Relaxed);
        self.global.used.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `bytes` of this shard's segments are gone from disk.
    pub fn release(&self, bytes: u64) {
        subtract(
            &self.held,
            bytes,
            "a shard's WAB bytes",
            &self.global.underflow_logged,
        );
        self.global.release(bytes, "the WAB's bytes");
    }

    /// Release everything this shard holds (before it is recovered again);
    /// returns how much that was.
    pub fn release_all(&self) -> u64 {
        let held = self.held.swap(0, Ordering::Relaxed);
        self.global.release(held, "the WAB's bytes");
        held
    }

    /// Bytes this shard's segments hold.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }
}

/// `counter -= bytes`; below zero is a bug: asserted in debug builds,
/// clamped (and logged once) otherwise.
fn subtract(counter: &AtomicU64, bytes: u64, what: &str, logged: &AtomicBool) {
    let before = counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_sub(bytes))
        })
        .unwrap_or_default();
    if before < bytes {
        debug_assert!(
            false,
            "released {bytes} bytes from {what}, which held {before}"
        );
        if !logged.swap(true, Ordering::Relaxed) {
            tracing::error!(
                released = bytes,
                held = before,
                "bug: released more WAB bytes than were charged ({what}); clamped at zero"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_charge_and_release_their_own_share_of_one_cap() {
        let wab = WabBudget::new(1000);
        let (a, b) = (ShardBudget::new(&wab), ShardBudget::new(&wab));
        a.charge(600);
        b.charge(300);
        assert_eq!((wab.used(), a.held(), b.held()), (900, 600, 300));
        assert!(a.admit(100) && b.admit(100));
        assert!(!b.admit(101), "the cap is daemon-wide");
        a.release(200);
        assert_eq!((wab.used(), a.held()), (700, 400));
        assert_eq!(b.release_all(), 300);
        assert_eq!((wab.used(), b.held()), (400, 0));
        assert!(a.admit(600) && !a.admit(601));
    }

    #[test]
    fn a_refusal_is_remembered_until_bytes_are_released() {
        let wab = WabBudget::new(1000);
        let (a, b) = (ShardBudget::new(&wab), ShardBudget::new(&wab));
        a.charge(900);
        assert!(b.admit(100) && !wab.refused());
        assert!(!b.admit(101));
        assert!(wab.refused() && a.refused(), "seen by every shard");
        b.release(0);
        assert!(wab.refused(), "releasing nothing frees nothing");
        a.release(1);
        assert!(!wab.refused());
    }

    #[test]
    fn disk_bytes_count_each_record_header() {
        assert_eq!(ShardBudget::disk_bytes(0, 0), 0);
        assert_eq!(ShardBudget::disk_bytes(5, 1), 5 + RECORD_OVERHEAD);
        assert_eq!(ShardBudget::disk_bytes(100, 10), 100 + 10 * RECORD_OVERHEAD);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "released 10 bytes")]
    fn releasing_more_than_was_charged_is_a_bug() {
        let wab = WabBudget::new(1000);
        let a = ShardBudget::new(&wab);
        a.charge(5);
        a.release(10);
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn releasing_more_than_was_charged_clamps_at_zero_in_release_builds() {
        let wab = WabBudget::new(1000);
        let a = ShardBudget::new(&wab);
        a.charge(5);
        a.release(10);
        assert_eq!((wab.used(), a.held()), (0, 0));
    }
}
