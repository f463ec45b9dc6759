//! [`RollingFile`]: a file that whole batches are appended to, rotated by
//! size.
//!
//! Durability: with [`AppendRules::fsync`] a batch counts as written only
//! after `fdatasync` returned success for it. When an append would grow
//! the file past [`AppendRules::rotate_bytes`], the file is renamed to
//! `<path>.<unix_ms>` and a new one started (with `fsync`, the folder is
//! synced too, so the rename survives a power cut).
//!
//! Failure: after any I/O error the part of the batch that reached the
//! file is cut off (truncated back to the last good length) and the handle
//! dropped, to be reopened by the next append. A failed fsync is never
//! retried on the same bytes (after it the kernel may have dropped the
//! dirty pages): the caller answers `Retry` and the batch is written again
//! whole.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many `<path>.<unix_ms>` names a rotation tries before it gives up
/// (a name is taken only if two rotations fall in the same millisecond).
pub const ROTATE_NAME_TRIES_MAX: u64 = 1000;

/// How one append is done; passed with each append, so instances that
/// share a file may each keep their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendRules {
    /// fdatasync the file after the batch, before the append returns `Ok`.
    pub fsync: bool,
    /// Rotate first when the append would make a non-empty file larger
    /// than this many bytes. A batch larger than this goes alone into a
    /// fresh file.
    pub rotate_bytes: u64,
}

/// Counters of one [`RollingFile`], across everything that appends to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStats {
    /// Batches appended (and synced, with fsync).
    pub batches: u64,
    /// Bytes appended, framing included.
    pub bytes: u64,
    /// Successful `fdatasync` calls on the file.
    pub fsyncs: u64,
    /// Files renamed aside by rotation.
    pub rotations: u64,
}

/// A file batches are appended to, whole, one at a time. Its folder is
/// created (mode 0700) and the file (mode 0600) if missing. Share it
/// (e.g. in an `Arc`) between the instances of a sink that write to one
/// file: a mutex inside keeps each batch contiguous and rotations single.
#[derive(Debug)]
pub struct RollingFile {
    path: PathBuf,
    state: Mutex<FileState>,
}

/// The open file and what is known about it.
#[derive(Debug)]
struct FileState {
    /// `None` after an I/O error, until the next append or check reopens.
    file: Option<File>,
    /// Length of the file at `path` as of the last good append: where a
    /// failed append is cut back to, and what rotation is decided on.
    len: u64,
    stats: FileStats,
}

impl RollingFile {
    /// Opens (creating the folder and the file if needed) `path` for
    /// appending, so a bad path fails when the sink is built rather than
    /// at every delivery.
    pub fn open(path: impl Into<PathBuf>) -> io::Result<RollingFile> {
        let path = path.into();
        let mut state = FileState {
            file: None,
            len: 0,
            stats: FileStats::default(),
        };
        state.open(&path)?;
        Ok(RollingFile {
            path,
            state: Mutex::new(state),
        })
    }

    /// The path appended to (as given to [`RollingFile::open`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> FileStats {
        self.lock().stats
    }

    /// Appends `bytes` as one batch: rotate if needed, write, fdatasync
    /// (with `rules.fsync`). Empty `bytes` do nothing and count nothing.
    /// `on_rotate(path, rotated_to)` is called after a rotation, so the
    /// caller can log it under its own name (the file is locked meanwhile:
    /// it must not append to this file). After an error nothing of the
    /// batch is left in the file (best effort) and the next append reopens
    /// it.
    pub fn append(
        &self,
        bytes: &[u8],
        rules: AppendRules,
        on_rotate: impl FnOnce(&Path, &Path),
    ) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut state = self.lock();
        let result = state.try_append(&self.path, bytes, rules, on_rotate);
        if result.is_err() {
            state.file = None;
        }
        result
    }

    /// Whether the file can be opened for appending (it is reopened if an
    /// error closed it).
    pub fn check(&self) -> io::Result<()> {
        let mut state = self.lock();
        match state.file {
            Some(_) => Ok(()),
            None => state.open(&self.path),
        }
    }

    /// The state, even after a panic while it was held: the handle is then
    /// dropped, so the next append reopens the file and rereads its length.
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
    /// Opens (creating folder 0700 and file 0600 if needed) for appending
    /// and reads the length.
    fn open(&mut self, path: &Path) -> io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                let mut folder = DirBuilder::new();
                folder.recursive(true);
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o700);
                folder.create(parent)?;
            }
        }
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path)?;
        self.len = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn try_append(
        &mut self,
        path: &Path,
        bytes: &[u8],
        rules: AppendRules,
        on_rotate: impl FnOnce(&Path, &Path),
    ) -> io::Result<()> {
        if self.file.is_none() {
            self.open(path)?;
        }
        let grown = self.len.saturating_add(bytes.len() as u64);
        if self.len > 0 && grown > rules.rotate_bytes {
            let rotated_to = self.rotate(path, rules.fsync)?;
            on_rotate(path, &rotated_to);
        }
        let file = self.file.as_mut().expect("opened above");
        let written = file.write_all(bytes).and_then(|()| match rules.fsync {
            true => file.sync_data(),
            false => Ok(()),
        });
        if let Err(error) = written {
            // Cut off whatever part of the batch reached the file; it will
            // be written again whole. Best effort: the error is what counts.
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

    /// Renames the full file to `<path>.<unix_ms>` and starts a new one;
    /// returns the name it was renamed to.
    fn rotate(&mut self, path: &Path, fsync: bool) -> io::Result<PathBuf> {
        let aside = free_rotation_name(path)?;
        std::fs::rename(path, &aside)?;
        self.file = None;
        self.open(path)?;
        if fsync {
            sync_dir(path)?;
        }
        self.stats.rotations += 1;
        Ok(aside)
    }
}

/// `<path>.<unix_ms>`, moving to the next millisecond while a name is taken.
fn free_rotation_name(path: &Path) -> io::Result<PathBuf> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for ms in now_ms..now_ms + ROTATE_NAME_TRIES_MAX {
        let candidate = rotation_name(path, ms);
        if !candidate.exists() {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free <path>.<unix_ms> name to rotate to",
    ))
}

fn rotation_name(path: &Path, unix_ms: u64) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{unix_ms}"));
    PathBuf::from(name)
}

/// The folder `path` is in (`.` for a bare file name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes a rename or a new entry in `path`'s folder durable.
#[cfg(unix)]
fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(folder_of(path))?.sync_all()
}

/// Elsewhere a folder cannot be opened to be synced.
#[cfg(not(unix))]
fn sync_dir(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// The files rotation has set aside from `path` (`<path>.<unix_ms>`),
/// oldest first: for a sink that keeps only the last few, and for tests.
pub fn rotated_files(path: &Path) -> io::Result<Vec<PathBuf>> {
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        ));
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(folder_of(path))? {
        let entry_name = entry?.file_name();
        let Some(suffix) = entry_name
            .as_encoded_bytes()
            .strip_prefix(name.as_encoded_bytes())
            .and_then(|rest| rest.strip_prefix(b"."))
        else {
            continue;
        };
        if suffix.is_empty() || !suffix.iter().all(u8::is_ascii_digit) {
            continue;
        }
        // All ASCII digits: valid UTF-8; more than 19 of them is no unix_ms.
        let Ok(unix_ms) = std::str::from_utf8(suffix)
            .unwrap_or_default()
            .parse::<u64>()
        else {
            continue;
        };
        found.push((unix_ms, rotation_name(path, unix_ms)));
    }
    found.sort();
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    use crate::units::KIB;

    fn rules(fsync: bool, rotate_bytes: u64) -> AppendRules {
        AppendRules {
            fsync,
            rotate_bytes,
        }
    }

    fn no_log(_: &Path, _: &Path) {}

    #[test]
    fn creates_private_folder_and_file_and_appends_to_what_is_there() {
        let dir = tempfile_dir("create");
        let path = dir.join("a/b/out.log");
        let file = RollingFile::open(&path).unwrap();
        file.append(b"one\n", rules(true, KIB), no_log).unwrap();
        drop(file);
        let file = RollingFile::open(&path).unwrap();
        file.append(b"two\n", rules(false, KIB), no_log).unwrap();
        file.append(b"", rules(true, KIB), no_log).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        assert_eq!(
            file.stats(),
            FileStats {
                batches: 1,
                bytes: 4,
                fsyncs: 0,
                rotations: 0
            }
        );
        #[cfg(unix)]
        {
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(&dir.join("a")), 0o700);
            assert_eq!(mode(&dir.join("a/b")), 0o700);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotates_before_exceeding_rotate_bytes_and_tells_the_caller() {
        let dir = tempfile_dir("rotate");
        let path = dir.join("out.log");
        let file = RollingFile::open(&path).unwrap();
        let mut logged = Vec::new();
        for fill in [b'a', b'a', b'b', b'c'] {
            let batch = vec![fill; 400];
            file.append(&batch, rules(true, KIB), |from, to| {
                logged.push((from.to_owned(), to.to_owned()))
            })
            .unwrap();
        }
        // aa fit in 1 KiB; b would not, so it starts a file; c goes with it.
        let rotated = rotated_files(&path).unwrap();
        assert_eq!(rotated.len(), 1);
        assert_eq!(logged, vec![(path.clone(), rotated[0].clone())]);
        assert_eq!(std::fs::read(&rotated[0]).unwrap(), vec![b'a'; 800]);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            [vec![b'b'; 400], vec![b'c'; 400]].concat()
        );
        assert_eq!(file.stats().rotations, 1);

        // A batch larger than rotate_bytes: the file is rotated once, never when empty.
        file.append(&vec![b'd'; 2048], rules(false, KIB), no_log)
            .unwrap();
        file.append(b"e", rules(false, KIB), no_log).unwrap();
        let rotated = rotated_files(&path).unwrap();
        assert_eq!(rotated.len(), 3, "{rotated:?}");
        assert_eq!(std::fs::read(&rotated[2]).unwrap(), vec![b'd'; 2048]);
        assert_eq!(std::fs::read(&path).unwrap(), b"e");
        assert_eq!(file.stats().rotations, 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotated_files_lists_only_rotation_names_oldest_first() {
        let dir = tempfile_dir("list");
        let path = dir.join("out.log");
        for name in [
            "out.log",
            "out.log.20",
            "out.log.3",
            "out.log.x1",
            "out.log.",
            "out.logs.4",
            "other.5",
        ] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        assert_eq!(
            rotated_files(&path).unwrap(),
            vec![dir.join("out.log.3"), dir.join("out.log.20")]
        );
        assert_eq!(
            rotated_files(Path::new("/")).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_error_cuts_the_batch_off_and_the_next_append_reopens() {
        let dir = tempfile_dir("error");
        let folder = dir.join("out");
        let path = folder.join("records.log");
        let file = RollingFile::open(&path).unwrap();
        file.append(b"a\n", rules(true, KIB), no_log).unwrap();

        // The folder replaced by a plain file: rotation and reopening fail.
        std::fs::remove_dir_all(&folder).unwrap();
        std::fs::write(&folder, b"not a folder").unwrap();
        assert!(file
            .append(&[b'z'; 1024], rules(true, KIB), no_log)
            .is_err());
        assert!(file.check().is_err());

        std::fs::remove_file(&folder).unwrap();
        file.check().unwrap();
        file.append(b"again\n", rules(true, KIB), no_log).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"again\n");
        assert_eq!(file.stats().batches, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_is_an_error_and_counts_nothing() {
        // /dev/full accepts the open and fails every write with ENOSPC.
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let file = RollingFile::open(full).unwrap();
        let error = file
            .append(b"lost", rules(false, u64::MAX), no_log)
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(28), "{error}");
        assert_eq!(file.stats(), FileStats::default());
    }

    #[test]
    fn a_panic_while_locked_drops_the_handle_and_appends_go_on() {
        let dir = tempfile_dir("poison");
        let path = dir.join("out.log");
        let file = RollingFile::open(&path).unwrap();
        file.append(b"1234", rules(false, 4), no_log).unwrap();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            file.append(b"5", rules(false, 4), |_, _| panic!("a logger that panics"))
                .unwrap();
        }));
        assert!(panicked.is_err());
        file.append(b"6", rules(false, 4), no_log).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"6");
        assert_eq!(rotated_files(&path).unwrap().len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh folder of this test's own (sink-sdk has no dev-dependencies).
    fn tempfile_dir(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("sink-sdk-output-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
