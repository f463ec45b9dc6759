//! The storage seam: every file operation the write-ahead buffer performs
//! goes through [`Storage`] and [`StorageFile`].
//!
//! Production uses [`FsStorage`], a zero-sized type whose methods are the
//! plain system calls; callers are generic over `S: Storage`, so the seam is
//! monomorphised away and costs nothing on the hot path. Tests use
//! [`crate::fault::FaultyStorage`] to inject torn writes, EIO, ENOSPC and
//! crashes at a chosen step, and power cuts that drop every directory
//! entry whose folder was not fsynced.
//!
//! A name (file or folder) is durable only once its parent folder has been
//! fsynced; [`create_dir_durable`] is how the WAB makes its folders.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// File-system operations used by the WAB. Implementations must be cheap to
/// clone (they are handed to every shard thread).
pub trait Storage: Clone + Send + Sync + 'static {
    type File: StorageFile;

    /// Create a new file (fails if it exists), mode 0600, opened read-write.
    fn create(&self, path: &Path) -> io::Result<Self::File>;
    /// Open an existing file read-write.
    fn open(&self, path: &Path) -> io::Result<Self::File>;
    /// Open an existing file read-only.
    fn open_read(&self, path: &Path) -> io::Result<Self::File>;
    /// Atomically rename `from` to `to` (not durable until [`Storage::sync_dir`]).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync a directory so renames, creations and removals in it are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Remove a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Create a directory and its parents with mode 0700. Not durable (no
    /// parent is fsynced): the WAB itself uses [`create_dir_durable`].
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Create one directory with mode 0700; fails with `AlreadyExists` if
    /// it exists and `NotFound` if its parent does not. Not durable until
    /// the parent is fsynced ([`create_dir_durable`] does both).
    ///
    /// The default is the plain system call, so a `Storage` written before
    /// this method existed keeps working.
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        fs::DirBuilder::new().mode(0o700).create(dir)?;
        // The umask may have cleared bits; the mode is part of the contract.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
    }
    /// The entries of a directory (full paths), unordered.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
}

/// An open file of the WAB. Every write is positional, so a writer and a
/// reader of the same segment never share a cursor.
#[allow(clippy::len_without_is_empty)] // a file length, not a collection
pub trait StorageFile: Send + 'static {
    /// Write all of `bufs` at `offset` (vectored; loops over short writes).
    fn write_all_at(&mut self, offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()>;
    /// `fdatasync`: the data (and the metadata needed to read it) is durable.
    fn sync_data(&mut self) -> io::Result<()>;
    /// `fsync`: data and all metadata.
    fn sync_all(&mut self) -> io::Result<()>;
    /// Truncate or extend the file.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Read at `offset` into `buf`; returns the bytes read (0 at end of file).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Current length of the file.
    fn len(&self) -> io::Result<u64>;
    /// Write `len` bytes at `offset` out to the disk now and wait for them
    /// (`sync_file_range`), without a cache flush or any metadata: pacing
    /// for a large write, never a durability step (`sync_data` is). By
    /// default nothing.
    fn write_out(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }
}

/// The plain file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStorage;

impl Storage for FsStorage {
    type File = FsFile;

    fn create(&self, path: &Path) -> io::Result<FsFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
        Ok(FsFile {
            file: counted(file, "creating a file")?,
        })
    }

    fn open(&self, path: &Path) -> io::Result<FsFile> {
        regular_file(path)?;
        let file = OpenOptions::new().read(true).write(true).open(path);
        Ok(FsFile {
            file: counted(file, "opening a file")?,
        })
    }

    fn open_read(&self, path: &Path) -> io::Result<FsFile> {
        regular_file(path)?;
        Ok(FsFile {
            file: counted(File::open(path), "opening a file")?,
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        counted(File::open(dir), "opening a folder to fsync it")?.sync_all()
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        for entry in counted(fs::read_dir(dir), "listing a folder")? {
            paths.push(entry?.path());
        }
        Ok(paths)
    }
}

/// `result`, its error counted if it is a descriptor shortage
/// ([`crate::descriptors`]).
fn counted<T>(result: io::Result<T>, doing: &'static str) -> io::Result<T> {
    result.inspect_err(|e| crate::descriptors::note(e, doing))
}

/// Every file the WAB opens is a regular file it wrote. Anything else
/// under such a name (a directory named like a segment, a FIFO, a device)
/// is refused with its path and what it is, before it is opened: opening a
/// FIFO would block, and reading a directory fails with a bare "Is a
/// directory" that names nothing.
fn regular_file(path: &Path) -> io::Result<()> {
    let kind = fs::metadata(path)?.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}, not a file spillway wrote (the write-ahead buffer holds only regular files)",
            path.display()
        ),
    ))
}

/// Create `dir` and every missing parent (mode 0700), durably: after each
/// folder is made its parent is fsynced, from the first missing component
/// down, so a power cut cannot make the new folder (and every segment and
/// checkpoint inside it) vanish. The existing top folder's fsync covers the
/// first new entry.
///
/// When `dir` already exists its parent is fsynced anyway (one fsync, at
/// start-up): an earlier run may have crashed between creating it and the
/// fsync, and a restart without a power cut would otherwise trust a name
/// the disk never got. Parents of `dir` that already existed are trusted.
pub fn create_dir_durable<S: Storage>(storage: &S, dir: &Path) -> io::Result<()> {
    // Errors are the system's own (errno kept, so callers can tell ENOSPC
    // from EIO); the caller names the shard it was opening.
    if !make_dir(storage, dir)? {
        storage.sync_dir(parent_of(dir))?;
    }
    Ok(())
}

/// Create `dir` (and missing parents, each followed by an fsync of its
/// parent); `Ok(false)` if it already existed.
fn make_dir<S: Storage>(storage: &S, dir: &Path) -> io::Result<bool> {
    match storage.create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            let Some(parent) = parent else { return Err(e) };
            make_dir(storage, parent)?;
            match storage.create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    }
    storage.sync_dir(parent_of(dir))?;
    Ok(true)
}

/// The folder holding `path` (`.` for a bare relative name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether `e` says the file system (or the user's quota) is full.
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
}

/// A file of [`FsStorage`].
#[derive(Debug)]
pub struct FsFile {
    file: File,
}

/// Linux accepts at most this many iovecs per `pwritev` (IOV_MAX).
const IOV_MAX: usize = 1024;

impl StorageFile for FsFile {
    fn write_all_at(&mut self, mut offset: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        // Skip over what has been written so far without copying: `start` is
        // the first iovec not fully written and `skip` the bytes of it that were.
        let mut start = 0;
        let mut skip = 0usize;
        while start < bufs.len() {
            let end = (start + IOV_MAX).min(bufs.len());
            let mut iov: Vec<libc::iovec> = Vec::with_capacity(end - start);
            for (i, buf) in bufs[start..end].iter().enumerate() {
                let bytes: &[u8] = if i == 0 { &buf[skip..] } else { buf };
                iov.push(libc::iovec {
                    iov_base: bytes.as_ptr() as *mut libc::c_void,
                    iov_len: bytes.len(),
                });
            }
            // SAFETY: every iovec points into a live borrowed slice of `bufs`.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov.as_ptr(),
                    iov.len() as libc::c_int,
                    offset as libc::off_t,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if n == 0 && iov.iter().any(|v| v.iov_len > 0) {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote 0 bytes",
                ));
            }
            let mut written = n as usize;
            offset += written as u64;
            while start < bufs.len() {
                let remaining = bufs[start].len() - skip;
                if written >= remaining {
                    written -= remaining;
                    start += 1;
                    skip = 0;
                } else {
                    skip += written;
                    break;
                }
            }
        }
        Ok(())
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.file.read_at(buf, offset) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn write_out(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a plain syscall on a descriptor this file owns.
        let r = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                flags,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Read exactly `buf.len()` bytes at `offset`, or fewer at end of file.
/// Returns how many bytes were read.
pub fn read_full_at<F: StorageFile>(
    file: &F,
    mut offset: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read_at(offset, &mut buf[filled..])?;
        if n == 0 {
            break;
        }
        filled += n;
        offset += n as u64;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_out_keeps_the_bytes_and_refuses_a_bad_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = FsStorage.create(&path).unwrap();
        f.write_all_at(0, &[IoSlice::new(&[7u8; 8192])]).unwrap();
        f.write_out(0, 8192).unwrap();
        let mut back = [0u8; 8192];
        assert_eq!(read_full_at(&f, 0, &mut back).unwrap(), 8192);
        assert!(back.iter().all(|&b| b == 7));
        // A negative offset is EINVAL: the error comes back, not ignored.
        assert!(f.write_out(u64::MAX, 1).is_err());
    }

    #[test]
    fn vectored_write_handles_many_slices() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = FsStorage.create(&path).unwrap();
        let chunks: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
        f.write_all_at(10, &slices).unwrap();
        let mut buf = vec![0u8; 12_000];
        assert_eq!(read_full_at(&f, 10, &mut buf).unwrap(), 12_000);
        for i in 0..3000u32 {
            let at = i as usize * 4;
            assert_eq!(&buf[at..at + 4], &i.to_le_bytes());
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
