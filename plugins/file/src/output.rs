//! The output file, shared by every instance that names the same path.
//!
//! One [`SharedFile`] per path in the process, behind a mutex: a batch is
//! appended whole (batches of different shards never interleave inside
//! each other) and rotation happens once, not once per instance. It is
//! found through a process-wide map of weak references, so it lives as
//! long as some instance uses it.
//!
//! Durability: with `fsync` a batch counts as written only after
//! `fdatasync` returned success for it. After any I/O error the part of the
//! batch that reached the file is cut off (truncated back to the last
//! good length) and the handle dropped, to be reopened by the next batch: a
//! failed fsync is never retried on the same bytes (the kernel may have
//! dropped the dirty pages), the batch is written again from scratch.

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many `<path>.<unix_ms>` names to try before a rotation gives up (a
/// name is taken only if two rotations fall in the same millisecond).
const ROTATE_NAME_TRIES_MAX: u64 = 1000;

/// Counters of one output file, across its instances.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputStats {
    /// Batches appended (and synced, with fsync).
    pub batches: u64,
    /// Bytes appended.
    pub bytes: u64,
    /// Successful fdatasync calls.
    pub fsyncs: u64,
    /// Files renamed aside by rotation.
    pub rotations: u64,
}

/// How one append is done (from the instance's options).
#[derive(Debug, Clone, Copy)]
pub struct AppendRules {
    pub fsync: bool,
    pub rotate_bytes: u64,
}

/// The file and what is known about it.
struct FileState {
    /// `None` before the first append and after an I/O error.
    file: Option<File>,
    /// Length of the file at `path` as of the last good append.
    len: u64,
    stats: OutputStats,
}

/// One output file.
pub struct SharedFile {
    path: PathBuf,
    state: Mutex<FileState>,
}

/// Every output file some instance uses, by absolute path.
fn registry() -> &'static Mutex<HashMap<PathBuf, Weak<SharedFile>>> {
    static FILES: OnceLock<Mutex<HashMap<PathBuf, Weak<SharedFile>>>> = OnceLock::new();
    FILES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl SharedFile {
    /// The output at `path`, opened (created if needed) so a bad path fails
    /// the plugin's creation rather than every delivery.
    pub fn open(path: &Path) -> io::Result<Arc<SharedFile>> {
        let key = std::path::absolute(path)?;
        let mut files = registry().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shared) = files.get(&key).and_then(Weak::upgrade) {
            return Ok(shared);
        }
        let mut state = FileState {
            file: None,
            len: 0,
            stats: OutputStats::default(),
        };
        state.open(&key)?;
        let shared = Arc::new(SharedFile {
            path: key.clone(),
            state: Mutex::new(state),
        });
        files.retain(|_, weak| weak.strong_count() > 0);
        files.insert(key, Arc::downgrade(&shared));
        Ok(shared)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> OutputStats {
        self.lock().stats
    }

    /// Appends `bytes` as one batch: rotate if needed, write, fdatasync.
    pub fn append(&self, bytes: &[u8], rules: AppendRules) -> io::Result<()> {
        let mut state = self.lock();
        let result = state.try_append(&self.path, bytes, rules);
        if result.is_err() {
            state.file = None;
        }
        result
    }

    /// Whether the file can be opened for appending.
    pub fn check(&self) -> io::Result<()> {
        let mut state = self.lock();
        match state.file {
            Some(_) => Ok(()),
            None => state.open(&self.path),
        }
    }

    /// The state, even after a panic while it was held (the handle is then
    /// dropped so the next append reopens and rereads the length).
    fn lock(&self) -> MutexGuard<'_, FileState> {
        self.state.lock().unwrap_or_else(|poisoned| {
            self.state.clear_poison();
            let mut state = poisoned.into_inner();
            state.file = None;
            state
        })
    }
}

impl FileState {
    /// Opens (creating folder 0700 and file 0600 if needed) for appending.
    fn open(&mut self, path: &Path) -> io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        self.len = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn try_append(&mut self, path: &Path, bytes: &[u8], rules: AppendRules) -> io::Result<()> {
        if self.file.is_none() {
            self.open(path)?;
        }
        let grown = self.len.saturating_add(bytes.len() as u64);
        if self.len > 0 && grown > rules.rotate_bytes {
            self.rotate(path, rules.fsync)?;
        }
        let file = self.file.as_mut().expect("opened above");
        let written = file.write_all(bytes).and_then(|()| match rules.fsync {
            true => file.sync_data(),
            false => Ok(()),
        });
        if let Err(error) = written {
            // Cut off what reached the file; the batch is written again whole.
            let _ = file.set_len(self.len);
            return Err(error);
        }
        self.len += bytes.len() as u64;
        self.stats.batches += 1;
        self.stats.bytes += bytes.len() as u64;
        if rules.fsync {
            self.stats.fsyncs += 1;
        }
        Ok(())
    }

    /// Renames the full file to `<path>.<unix_ms>` and starts a new one.
    fn rotate(&mut self, path: &Path, fsync: bool) -> io::Result<()> {
        let aside = free_rotation_name(path)?;
        std::fs::rename(path, &aside)?;
        self.file = None;
        self.open(path)?;
        if fsync {
            sync_dir(path)?;
        }
        self.stats.rotations += 1;
        sink_sdk::plugin_info!("rotated {} to {}", path.display(), aside.display());
        Ok(())
    }
}

/// `<path>.<unix_ms>`, moving to the next millisecond while a name is taken.
fn free_rotation_name(path: &Path) -> io::Result<PathBuf> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for ms in now_ms..now_ms + ROTATE_NAME_TRIES_MAX {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{ms}"));
        let candidate = PathBuf::from(name);
        if !candidate.exists() {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free <path>.<unix_ms> name to rotate to",
    ))
}

/// Makes a rename in `path`'s folder durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}
