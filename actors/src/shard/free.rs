//! Delivered segments set aside to be written over as later ones.
//!
//! Retention renames a segment every sink has confirmed to `<id>.free`
//! rather than unlinking it, while none waits; the sealer takes it when it
//! prepares the next segment and writes the new one over it, its old
//! records left in place ([`spillway_wab::recycle`]), instead of creating
//! and zero-filling a file. In steady state
//! a shard then neither allocates nor frees disk blocks: on a
//! file system mounted with `discard`, freeing a 64 MiB segment made the
//! next fdatasync wait for its TRIM, and allocating one costs journal
//! commits of its own. When none is waiting (a backlog is being built, or
//! delivery frees many at once) the sealer creates a file and retention
//! unlinks, as before.
//!
//! It also remembers preallocations that failed (by the sealer or inline
//! by the flusher), whose partial file its own cleanup may have left, and
//! removes those files before the next preallocation: on a disk with room
//! for one segment a leftover was that room.

use std::path::{Path, PathBuf};

use spillway_wab::storage::Storage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// One shard's delivered segment waiting to be written over (see the
/// module documentation): at most one, since one rotation needs one and a
/// segment is freed about once per rotation, and each waiting one costs a
/// segment's disk space. Retention puts, the sealer takes.
#[derive(Debug, Default)]
pub struct FreeSegments {
    waiting: Mutex<Option<PathBuf>>,
    /// Segments the sealer made out of a free one (metrics, `ctl stats`).
    pub recycled: AtomicU64,
    /// Ids whose preallocation failed and whose files may be left over.
    failed: Mutex<Vec<u64>>,
}

impl FreeSegments {
    /// Whether retention may set one aside. Only retention puts, so the
    /// answer holds until its [`Self::put`].
    pub fn has_room(&self) -> bool {
        self.waiting.lock().unwrap().is_none()
    }

    /// `path` (a `.free` file) waits to be written over.
    pub fn put(&self, path: PathBuf) {
        let before = self.waiting.lock().unwrap().replace(path);
        assert!(
            before.is_none(),
            "a second free segment set aside while {before:?} waits"
        );
    }

    /// The waiting free segment, if any.
    pub fn take(&self) -> Option<PathBuf> {
        self.waiting.lock().unwrap().take()
    }

    /// Forget the waiting one: a start's recovery removed its file.
    pub fn forget(&self) {
        self.take();
    }

    /// The preallocation of segment `id` failed: its file may be left.
    pub fn note_failed(&self, id: u64) {
        self.failed.lock().unwrap().push(id);
    }

    /// Remove what failed preallocations left in `dir`; those that cannot
    /// be removed yet stay noted for the next call.
    pub fn remove_failed<S: Storage>(&self, storage: &S, dir: &Path) {
        self.failed.lock().unwrap().retain(|&id| {
            match spillway_wab::segment::remove_failed_preallocation(storage, dir, id) {
                Ok(()) => false,
                Err(e) => {
                    tracing::debug!(segment = id, error = %e, "a failed preallocation's file is not removed yet; will retry");
                    true
                }
            }
        });
    }

    /// Count one segment made out of a free one.
    pub fn count_recycled(&self) {
        self.recycled.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_one_and_hands_it_out() {
        let free = FreeSegments::default();
        assert!(free.has_room());
        free.put(PathBuf::from("a.free"));
        assert!(!free.has_room());
        assert_eq!(free.take(), Some(PathBuf::from("a.free")));
        assert_eq!(free.take(), None);
        free.put(PathBuf::from("b.free"));
        free.forget();
        assert_eq!(free.take(), None);
    }
}
