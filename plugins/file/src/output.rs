//! The output file, shared by every instance that names the same path.
//!
//! The file is a [`RollingFile`] from `sink_sdk::output` (which documents
//! rotation, fsync and what happens after an I/O error). What this plugin
//! adds is the sharing: a plugin instance is created on its own from its
//! options, with no factory to hand it a file, so one `RollingFile` per
//! path in the process is found through a process-wide map of weak
//! references. A batch is then appended whole (batches of different shards
//! never interleave inside each other) and rotation happens once, not once
//! per instance; the file lives as long as some instance uses it.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use sink_sdk::output::RollingFile;

/// Counters of one output file, across its instances.
pub use sink_sdk::output::FileStats as OutputStats;

/// Every output file some instance uses, by absolute path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<RollingFile>>> {
    static FILES: OnceLock<Mutex<HashMap<PathBuf, Weak<RollingFile>>>> = OnceLock::new();
    FILES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The output at `path` (made absolute), shared with every instance that
/// names it; opened (created if needed) so a bad path fails the plugin's
/// creation rather than every delivery.
pub fn open_shared(path: &Path) -> io::Result<Arc<RollingFile>> {
    let key = std::path::absolute(path)?;
    let mut files = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(shared) = files.get(&key).and_then(Weak::upgrade) {
        return Ok(shared);
    }
    let shared = Arc::new(RollingFile::open(&key)?);
    files.retain(|_, weak| weak.strong_count() > 0);
    files.insert(key, Arc::downgrade(&shared));
    Ok(shared)
}

/// The `on_rotate` of every append: an info line in the daemon's log, from
/// this module.
pub fn log_rotation(path: &Path, rotated_to: &Path) {
    sink_sdk::plugin_info!("rotated {} to {}", path.display(), rotated_to.display());
}
