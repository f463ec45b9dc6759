//! `spillway check` for the file sink: can the daemon open `sink.path` for
//! appending, without this check leaving anything behind?
//!
//! [`FileFactory::new`](super::FileFactory::new) creates the folder and the
//! file, which a check must not do. Instead: an existing file is opened for
//! appending (which changes nothing) and closed; for a file that does not
//! exist yet, the first folder on its path that does exist must be a folder
//! in which an entry can be created, which is tried by creating a probe
//! folder there and removing it at once. [`creatable_folder`] is that
//! second half on its own, which `spillway check` also asks of the
//! daemon's own folders (`server.data_dir`, the sockets' folders).
//!
//! Proc and sys file systems are refused outright: nothing spillway writes
//! belongs there, and as root some of their files open for appending.

use std::ffi::CString;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, ErrorKind};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::FileSettings;
use crate::SinkError;

/// `<table>.path` can be opened for appending, or created. The error names
/// the key.
pub(crate) fn preflight(settings: &FileSettings, table: &str) -> Result<(), SinkError> {
    appendable(&settings.path).map_err(|e| SinkError::key(table, "path", e))
}

/// Whether the file at `path` can be opened for appending: an existing
/// file is opened (without creating or changing anything); a missing one
/// must be creatable, with any missing folders above it
/// ([`creatable_folder`] of its folder). The error names the path.
pub fn appendable(path: &Path) -> Result<(), String> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(format!("{} is a folder, not a file", path.display())),
        // A FIFO would block the open (and every delivery); a device is
        // not a file records can be appended to and read back.
        Ok(meta) if !meta.is_file() => Err(format!(
            "{} is {}, not a regular file",
            path.display(),
            crate::regular_file::describe(&meta.file_type())
        )),
        Ok(_) => {
            refuse_pseudo_fs(path)?;
            OpenOptions::new()
                .append(true)
                .open(path)
                .map(drop)
                .map_err(|e| format!("cannot open {} for appending: {e}", path.display()))
        }
        Err(e) if missing(&e) => {
            let folder = parent_folder(path);
            creatable_folder(folder).map_err(|e| format!("cannot create {}: {e}", path.display()))
        }
        Err(e) => Err(format!("cannot look at {}: {e}", path.display())),
    }
}

/// Whether the folder `dir` exists or can be created, and entries can be
/// created in it: the first folder on its path that exists (`dir` itself,
/// or an ancestor) must be a folder, on an ordinary file system, in which
/// a probe folder can be made (it is removed at once). The error names the
/// path that is in the way.
pub fn creatable_folder(dir: &Path) -> Result<(), String> {
    let existing = first_existing(dir)?;
    let meta = fs::metadata(&existing)
        .map_err(|e| format!("cannot look at {}: {e}", existing.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a folder", existing.display()));
    }
    refuse_pseudo_fs(&existing)?;
    probe(&existing).map_err(|e| format!("cannot create anything in {}: {e}", existing.display()))
}

/// The folder a file at `path` lives in (`.` for a bare name).
fn parent_folder(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether `e` says that (part of) a path does not exist: not found, or a
/// component is a file (the caller then finds that file as the first
/// existing path, and reports it).
fn missing(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

/// `dir` or its nearest ancestor that exists.
fn first_existing(dir: &Path) -> Result<PathBuf, String> {
    let mut at = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    loop {
        match fs::symlink_metadata(at) {
            Ok(_) => return Ok(at.to_path_buf()),
            Err(e) if missing(&e) => {
                let up = parent_folder(at);
                if up == at {
                    return Err(format!("cannot look at {}: {e}", at.display()));
                }
                at = up;
            }
            Err(e) => return Err(format!("cannot look at {}: {e}", at.display())),
        }
    }
}

/// Makes a uniquely named folder (0700) in `dir` and removes it again.
fn probe(dir: &Path) -> io::Result<()> {
    static PROBES: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        ".spillway-check-{}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    );
    let probe = dir.join(name);
    DirBuilder::new().mode(0o700).create(&probe)?;
    fs::remove_dir(&probe)
}

/// Refuses a path on a proc or sys file system.
fn refuse_pseudo_fs(path: &Path) -> Result<(), String> {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return Err(format!("{} contains a NUL byte", path.display()));
    };
    // SAFETY: statfs writes only into the zeroed struct we pass; the path
    // is NUL-terminated and outlives the call.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut stat) } != 0 {
        // Not decisive: the open or the probe that follows reports why.
        return Ok(());
    }
    // f_type's and the constants' integer types differ between C
    // libraries and targets: compare as i64 (a no-op cast on some).
    #[allow(clippy::unnecessary_cast)]
    let (fs_type, proc_magic, sys_magic) = (
        stat.f_type as i64,
        libc::PROC_SUPER_MAGIC as i64,
        libc::SYSFS_MAGIC as i64,
    );
    let kind = if fs_type == proc_magic {
        "proc"
    } else if fs_type == sys_magic {
        "sysfs"
    } else {
        return Ok(());
    };
    Err(format!(
        "{} is on a {kind} file system, which holds no ordinary files",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_fifo_or_a_device_is_no_file_to_append_to() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = appendable(&fifo).unwrap_err();
        assert!(err.ends_with("fifo is a FIFO, not a regular file"), "{err}");
        let err = appendable(Path::new("/dev/zero")).unwrap_err();
        assert!(err.contains("is a character device"), "{err}");
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn missing_file_in_a_writable_folder_is_fine_and_nothing_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/out.ndjson");
        assert_eq!(appendable(&path), Ok(()));
        assert_eq!(appendable(&dir.path().join("out.ndjson")), Ok(()));
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            0,
            "left something"
        );
    }

    #[test]
    fn existing_file_is_opened_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        fs::write(&path, b"kept\n").unwrap();
        assert_eq!(appendable(&path), Ok(()));
        assert_eq!(fs::read(&path).unwrap(), b"kept\n");
    }

    #[test]
    fn a_folder_is_not_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = appendable(dir.path()).unwrap_err();
        assert!(e.ends_with("is a folder, not a file"), "{e}");
    }

    #[test]
    fn a_file_in_the_way_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("plain");
        fs::write(&blocker, b"").unwrap();
        let e = appendable(&blocker.join("sub/out.ndjson")).unwrap_err();
        assert!(
            e.ends_with(&format!("{} is not a folder", blocker.display())),
            "{e}"
        );
        let e = creatable_folder(&blocker.join("data")).unwrap_err();
        assert_eq!(e, format!("{} is not a folder", blocker.display()));
    }

    #[test]
    fn proc_and_sys_are_refused() {
        for path in [
            "/proc/spillway.ndjson",
            "/proc/sys/kernel/hostname",
            "/sys/x/y",
        ] {
            let e = appendable(Path::new(path)).unwrap_err();
            assert!(
                e.contains("file system, which holds no ordinary files"),
                "{path}: {e}"
            );
        }
        assert!(creatable_folder(Path::new("/proc/wab")).is_err());
    }

    #[test]
    fn a_folder_without_write_permission_is_refused() {
        if is_root() {
            // root writes into any folder: nothing to refuse here. The
            // end-to-end test (testing/tests/tests/check.rs) runs `check` as nobody.
            eprintln!("SKIPPED: running as root, which may write into any folder");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let locked = dir.path().join("locked");
        fs::create_dir(&locked).unwrap();
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o500)).unwrap();
        let e = appendable(&locked.join("out.ndjson")).unwrap_err();
        assert!(e.contains("cannot create anything in"), "{e}");
        assert!(creatable_folder(&locked.join("wab")).is_err());
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o700)).unwrap();
    }
}
