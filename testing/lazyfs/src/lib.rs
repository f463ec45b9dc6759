//! A power-loss file system for tests, in the manner of LazyFS: a FUSE
//! file system that keeps everything that was not synced volatile and, on
//! command, throws it away, as a power cut would.
//!
//! A SIGKILL keeps the page cache, so a crash test on a real disk cannot
//! tell a program that fsyncs from one that does not. Mounted with
//! [`LazyFs::mount`], the program under test (a real process) sees an
//! ordinary file system; [`LazyFs::power_cut`] then makes the world the
//! disk would leave after the power went away at that moment.
//!
//! # What is durable
//!
//! - A file's content and length: what its last `fsync` or `fdatasync`
//!   saw (both are the same here; the file's mode and times are not
//!   modelled and never go back). `write`, `pwritev`, `ftruncate` and
//!   `fallocate` (mode 0 or `FALLOC_FL_KEEP_SIZE`; other modes are
//!   refused with `EOPNOTSUPP`) are volatile until then. `close` makes
//!   nothing durable.
//! - A directory's entries: what its last fsync (`FUSE_FSYNCDIR`, i.e.
//!   `fsync` on a descriptor of the directory) saw. `create`, `mkdir`,
//!   `unlink`, `rmdir` and `rename` (also over an existing file) are
//!   volatile until the directory holding the entry is fsynced: a new file
//!   whose data was fsynced but whose directory was not is gone after a
//!   cut, and so is everything below a new directory whose parent was not
//!   fsynced. A rename between two folders is durable per folder (if only
//!   the destination is fsynced, the file has both names after a cut).
//! - The mount's root always exists.
//!
//! # How it is kept
//!
//! The namespace is an in-memory inode table: each directory has a
//! *current* and a *durable* name → inode map. Each regular file's bytes
//! live in one file of the backing folder, `<backing>/<inode>`, which
//! holds the *current* content; an in-memory undo log keeps the durable
//! bytes of each 4 KiB page changed since the file's last sync (saved
//! before the page's first change) and the durable length. A power cut
//! unmounts (so the kernel forgets every cached page, attribute and name),
//! sets every directory back to its durable map, drops the inodes that no
//! durable entry reaches from the root, writes the saved pages back,
//! truncates each file to its durable length, and mounts again, at the
//! same place. The backing folder is private to the file system (start it
//! empty); nothing of the model outlives the [`LazyFs`] value.
//!
//! # What it does not model
//!
//! - Partial loss: a cut drops *all* unsynced state, never a random part of
//!   it (no torn pages, no reordering of unsynced writes, no "some of the
//!   unsynced writes made it"). Real disks can keep an arbitrary subset of
//!   unsynced writes; this checks the fsync discipline, not every outcome.
//! - An `fsync` that fails: every sync succeeds.
//! - Journalling file systems' extra durability (on ext4 an fsync of a file
//!   usually commits its new name too): here it never does.
//! - Locks: the file system does not ask for FUSE's lock requests, so the
//!   kernel keeps `flock` and `fcntl` locks locally on the mount, as for any
//!   local file system; they work between processes of this machine and go
//!   with the process, as usual.
//! - Hard links, symbolic links, special files (sockets, FIFOs: keep Unix
//!   sockets outside the mount) and extended attributes are refused.
//! - Speed: one thread serves every request.
//!
//! # Needs
//!
//! `/dev/fuse` and root (the mount is made directly with `mount(2)`, by
//! the `fuser` crate without libfuse); as another user, `fusermount3`
//! (Debian's `fuse3`) must be installed and allowed.

mod fs;
mod state;

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

pub use state::{CutReport, Pending};

/// A mounted lazy file system; dropping it unmounts.
pub struct LazyFs {
    state: Arc<Mutex<state::State>>,
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
}

impl std::fmt::Debug for LazyFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyFs")
            .field("mountpoint", &self.mountpoint)
            .field("mounted", &self.session.is_some())
            .finish()
    }
}

fn spawn(state: &Arc<Mutex<state::State>>, mountpoint: &Path) -> io::Result<BackgroundSession> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("spillway-lazyfs".into()),
        MountOption::Subtype("lazyfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    // Any user may use it (the kernel checks the modes): tests may run
    // programs as other users.
    config.acl = SessionACL::All;
    fuser::spawn_mount(
        fs::Fs {
            state: state.clone(),
        },
        mountpoint,
        &config,
    )
    .map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "mounting the lazy FUSE file system on {}: {e} (it needs /dev/fuse and root, or fusermount3)",
                mountpoint.display()
            ),
        )
    })
}

impl LazyFs {
    /// Mount an empty lazy file system on `mountpoint` (an existing empty
    /// folder), keeping file bytes in `backing` (created if missing; must be
    /// empty). Requests are served by a background thread.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<LazyFs> {
        let state = Arc::new(Mutex::new(state::State::new(backing)?));
        let session = spawn(&state, mountpoint)?;
        Ok(LazyFs {
            state,
            mountpoint: mountpoint.to_path_buf(),
            session: Some(session),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// What a cut would drop now.
    pub fn pending(&self) -> Pending {
        self.lock().pending()
    }

    /// Lose everything not synced, as a power cut would, and mount the
    /// durable state again at the same place. Every program using the file
    /// system must be gone first (SIGKILL it and reap it): the unmount
    /// fails with `EBUSY` while a file on it is open, and the cut is then
    /// not made.
    pub fn power_cut(&mut self) -> io::Result<CutReport> {
        self.unmount()?;
        let report = self.lock().power_cut()?;
        self.session = Some(spawn(&self.state, &self.mountpoint)?);
        Ok(report)
    }

    /// Unmount (waiting for the serving thread to finish the requests it
    /// has). The model stays; [`LazyFs::power_cut`] mounts again.
    pub fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let failed = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "unmounting the lazy file system at {}: {e} (is a program still using it?)",
                    self.mountpoint.display()
                ),
            )
        };
        // umount(2) here rather than fuser's unmount, so that a busy mount
        // (EBUSY) stays mounted and served. Once it is gone the serving
        // thread reads ENODEV and ends: join it. (fuser then tries its own
        // umount, which finds nothing mounted: before the next mount.)
        let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::umount(path.as_ptr()) } == 0 {
            // The mount is gone. The serving thread then reads ENODEV and
            // ends, or ECONNABORTED when the kernel aborted the connection
            // as part of the unmount (seen under load: a power-cut test
            // failed on it, seed 0x18eea8b7544bf3bb, cut 13/40, though
            // nothing was wrong): both are the end of the session.
            return match session.join() {
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
                other => other.map_err(failed),
            };
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EPERM) {
            self.session = Some(session);
            return Err(failed(e));
        }
        // Not root: fuser unmounts through fusermount3.
        session.umount_and_join().map_err(failed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, state::State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("spillway-lazyfs: {e}");
        }
    }
}
