//! Scratch shard folders for the storage targets, and a snapshot of a
//! folder to compare two recoveries by.
//!
//! Every execution gets a fresh folder, in `/dev/shm` when the machine has
//! a writable one: a RAM file system makes the recovery's fsyncs free, so
//! an execution costs microseconds rather than a disk's latency.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tempfile::TempDir;

/// A fresh, empty folder, removed when dropped.
pub(crate) fn scratch_dir() -> TempDir {
    static RAM: OnceLock<Option<PathBuf>> = OnceLock::new();
    let ram = RAM.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        tempfile::tempdir_in(shm).ok().map(|_| shm.to_path_buf())
    });
    let dir = match ram {
        Some(base) => tempfile::Builder::new()
            .prefix("spillway-fuzz-")
            .tempdir_in(base),
        None => tempfile::Builder::new().prefix("spillway-fuzz-").tempdir(),
    };
    dir.expect("a scratch folder")
}

/// Every file under `dir` (recursively) by relative path, with its bytes;
/// folders appear with `None`.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Option<Vec<u8>>>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        let rel = path.strip_prefix(root).expect("under root").to_path_buf();
        if path.is_dir() {
            out.insert(rel, None);
            walk(root, &path, out);
        } else {
            out.insert(rel, Some(fs::read(&path).expect("a readable file")));
        }
    }
}

/// Writes `bytes` to `dir/name`.
pub(crate) fn put(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, bytes).expect("writing a scratch file");
    path
}
