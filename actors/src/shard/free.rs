//! Delivered segments set aside to be written over as later ones.
//!
//! Retention renames a segment every sink has confirmed to `<id>.free`
//! rather than unlinking it, while fewer than [`FREE_SEGMENTS_MAX`] wait;
//! the sealer takes it when it prepares the next segment and writes zeros
//! over it ([`spillway_wab::recycle`]) instead of creating a file. In
//! steady state a shard then neither allocates nor frees disk blocks: on a
//! file system mounted with `discard`, freeing a 64 MiB segment made the
//! next fdatasync wait for its TRIM, and allocating one costs journal
//! commits of its own. When none is waiting (a backlog is being built, or
//! delivery frees many at once) the sealer creates a file and retention
//! unlinks, as before.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// At most this many delivered segments per shard wait to be written over:
/// one rotation needs one, and a segment is freed about once per rotation.
/// Each costs a segment's disk space while it waits.
pub const FREE_SEGMENTS_MAX: usize = 1;

/// One shard's delivered segments waiting to be written over (see the
/// module documentation). Retention puts, the sealer takes.
#[derive(Debug, Default)]
pub struct FreeSegments {
    paths: Mutex<Vec<PathBuf>>,
    /// Segments the sealer made out of a free one (metrics, `ctl stats`).
    pub recycled: AtomicU64,
}

impl FreeSegments {
    /// Whether retention may set one more aside. Only retention adds, so
    /// the answer holds until its [`Self::put`].
    pub fn has_room(&self) -> bool {
        self.paths.lock().unwrap().len() < FREE_SEGMENTS_MAX
    }

    /// `path` (a `.free` file) waits to be written over.
    pub fn put(&self, path: PathBuf) {
        let mut paths = self.paths.lock().unwrap();
        paths.push(path);
        assert!(
            paths.len() <= FREE_SEGMENTS_MAX,
            "{} free segments set aside, more than {FREE_SEGMENTS_MAX}",
            paths.len()
        );
    }

    /// The oldest free segment, if one waits.
    pub fn take(&self) -> Option<PathBuf> {
        let mut paths = self.paths.lock().unwrap();
        (!paths.is_empty()).then(|| paths.remove(0))
    }

    /// Forget every waiting one: a start's recovery removed their files.
    pub fn forget(&self) {
        self.paths.lock().unwrap().clear();
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
    fn holds_at_most_its_bound_and_hands_out_the_oldest_first() {
        let free = FreeSegments::default();
        assert!(free.has_room());
        free.put(PathBuf::from("a.free"));
        assert_eq!(free.has_room(), FREE_SEGMENTS_MAX > 1);
        assert_eq!(free.take(), Some(PathBuf::from("a.free")));
        assert_eq!(free.take(), None);
        free.put(PathBuf::from("b.free"));
        free.forget();
        assert_eq!(free.take(), None);
    }
}
