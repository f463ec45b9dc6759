//! The quarantine folder of a shard (`quarantine/`): untrusted segments
//! are moved there whole, and copies of damaged or cut bytes are saved
//! there, each with a `.reason` file beside it. Recovery and the header
//! repair both write here; the copies and reasons are evidence, so on
//! ENOSPC they are logged and skipped, never a reason to stop.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use crate::storage::{create_dir_durable, is_no_space, read_full_at, Storage, StorageFile};

pub use crate::layout::QUARANTINE_DIR;

/// Move `path` into `<dir>/quarantine/` with a `.reason` file beside it.
pub(crate) fn quarantine<S: Storage>(
    storage: &S,
    dir: &Path,
    path: &Path,
    reason: &str,
    quarantined: &mut Vec<(PathBuf, String)>,
) -> io::Result<()> {
    let qdir = dir.join(QUARANTINE_DIR);
    create_dir_durable(storage, &qdir)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("segment");
    let target = qdir.join(name);
    write_reason(storage, &qdir, &target, reason)?;
    storage.rename(path, &target)?;
    storage.sync_dir(&qdir)?;
    storage.sync_dir(dir)?;
    tracing::error!(path = %path.display(), moved_to = %target.display(), reason, "quarantined a segment that cannot be trusted");
    quarantined.push((target, reason.to_string()));
    Ok(())
}

/// [`save_copy`], unless `quarantine/<name>.reason` is there whole (it
/// ends in a newline): the copy is then whole too (the reason is written
/// after it), made by a recovery that went further before it crashed, and
/// may hold more than the bytes left now.
pub(crate) fn save_copy_once<S: Storage>(
    storage: &S,
    dir: &Path,
    file: &S::File,
    name: &str,
    from: u64,
    to: u64,
    reason: &str,
) -> io::Result<Option<PathBuf>> {
    let target = dir.join(QUARANTINE_DIR).join(name);
    let mut reason_path = target.as_os_str().to_owned();
    reason_path.push(".reason");
    if let Ok(written) = storage.open_read(Path::new(&reason_path)) {
        let len = written.len()?;
        let mut last = [0u8; 1];
        if len > 0 && read_full_at(&written, len - 1, &mut last)? == 1 && last[0] == b'\n' {
            return Ok(Some(target));
        }
    }
    save_copy(storage, dir, file, name, from, to, reason)
}

/// Copy `[from, to)` of `file` to `quarantine/<name>` with a `.reason`.
/// Evidence only: on ENOSPC (or a full quota) the partial copy is removed,
/// the failure logged, and `None` returned.
pub(crate) fn save_copy<S: Storage>(
    storage: &S,
    dir: &Path,
    file: &S::File,
    name: &str,
    from: u64,
    to: u64,
    reason: &str,
) -> io::Result<Option<PathBuf>> {
    let qdir = dir.join(QUARANTINE_DIR);
    let target = qdir.join(name);
    let copied = (|| {
        create_dir_durable(storage, &qdir)?;
        let _ = storage.remove(&target);
        let mut out = storage.create(&target)?;
        let mut buf = vec![0u8; COPY_CHUNK_BYTES];
        let mut at = from;
        while at < to {
            let want = ((to - at) as usize).min(buf.len());
            let n = read_full_at(file, at, &mut buf[..want])?;
            if n == 0 {
                break;
            }
            out.write_all_at(at - from, &[IoSlice::new(&buf[..n])])?;
            at += n as u64;
        }
        out.sync_all()
    })();
    match copied {
        Ok(()) => {}
        Err(e) if is_no_space(&e) => {
            let _ = storage.remove(&target);
            tracing::error!(path = %target.display(), error = %e, reason,
                "no space to save damaged bytes in quarantine; carrying on without the copy");
            return Ok(None);
        }
        Err(e) => return Err(e),
    }
    write_reason(storage, &qdir, &target, reason)?;
    storage.sync_dir(&qdir)?;
    Ok(Some(target))
}

/// Bytes copied at a time into quarantine.
const COPY_CHUNK_BYTES: usize = 1024 * 1024;

/// Write `<target>.reason`. Evidence only: on ENOSPC the partial file is
/// removed and the failure logged (the reason is in the log line too).
fn write_reason<S: Storage>(
    storage: &S,
    _qdir: &Path,
    target: &Path,
    reason: &str,
) -> io::Result<()> {
    let mut reason_path = target.as_os_str().to_owned();
    reason_path.push(".reason");
    let reason_path = PathBuf::from(reason_path);
    let _ = storage.remove(&reason_path);
    let written = (|| {
        let mut f = storage.create(&reason_path)?;
        let text = format!("{reason}\n");
        f.write_all_at(0, &[IoSlice::new(text.as_bytes())])?;
        f.sync_all()
    })();
    match written {
        Err(e) if is_no_space(&e) => {
            let _ = storage.remove(&reason_path);
            tracing::error!(path = %reason_path.display(), error = %e, reason,
                "no space to write a quarantine reason file; carrying on without it");
            Ok(())
        }
        other => other,
    }
}
