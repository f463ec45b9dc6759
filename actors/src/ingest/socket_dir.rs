//! Who may touch the folder a socket lives in, who may connect to the
//! socket, and who owns the socket name.
//!
//! A Unix socket is only as private as its folder: a user who can write the
//! socket's folder (or rename a folder above it) can unlink the daemon's
//! socket, bind their own under the same name, receive the records meant
//! for spillway and answer them with forged acks. [`check_socket_dir`]
//! refuses such a folder before anything is bound; the operator may accept
//! the risk with `server.allow_insecure_socket_dir = true`, and is then
//! warned at every start. See docs/security.md.
//!
//! [`SocketLock`] makes the socket name single-owner: an exclusive `flock`
//! on `<socket>.lock`, held for the life of the process, so two daemons
//! started at once cannot both decide that the socket is stale and replace
//! each other's.
//!
//! [`SocketAccess`] is who may connect: the socket file's mode and group
//! (`server.socket_mode`, `server.socket_group`), applied right after bind.
//! A socket file its group may write is fine when the operator asks for it
//! (that group can then push records); the folder rules above still hold,
//! since a group that could write the folder could replace the socket.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

const WRITABLE_BY_GROUP_OR_OTHERS: u32 = 0o022;
const STICKY: u32 = 0o1000;

/// Why a socket folder is unsafe, naming the folder and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{folder}: {why}")]
pub struct InsecureSocketDir {
    pub folder: PathBuf,
    pub why: String,
}

/// The folder holding `socket`: `.` for a bare file name.
pub fn socket_folder(socket: &Path) -> PathBuf {
    match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Check that no user other than this process's can replace `socket`:
/// its folder must be owned by this user and writable by nobody else, and
/// every folder above it must be owned by this user or root and, if others
/// can write it, carry the sticky bit (as /tmp does). The folder must exist.
pub fn check_socket_dir(socket: &Path) -> Result<(), InsecureSocketDir> {
    let folder = socket_folder(socket);
    let folder = folder.canonicalize().map_err(|e| InsecureSocketDir {
        folder: folder.clone(),
        why: format!("cannot resolve the folder: {e}"),
    })?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let meta = std::fs::metadata(&folder).map_err(|e| InsecureSocketDir {
        folder: folder.clone(),
        why: format!("cannot read its owner and mode: {e}"),
    })?;
    if meta.uid() != me {
        return Err(InsecureSocketDir {
            folder,
            why: format!(
                "the socket's folder is owned by uid {}, not by this daemon's uid {me}; \
                 that user could replace the socket",
                meta.uid()
            ),
        });
    }
    if meta.mode() & WRITABLE_BY_GROUP_OR_OTHERS != 0 {
        return Err(InsecureSocketDir {
            folder,
            why: format!(
                "the socket's folder has mode {:o}: other users can write it and replace the socket",
                meta.mode() & 0o7777
            ),
        });
    }
    let mut above = folder.parent();
    while let Some(dir) = above {
        let meta = std::fs::metadata(dir).map_err(|e| InsecureSocketDir {
            folder: dir.to_path_buf(),
            why: format!("cannot read its owner and mode: {e}"),
        })?;
        if meta.uid() != me && meta.uid() != 0 {
            return Err(InsecureSocketDir {
                folder: dir.to_path_buf(),
                why: format!(
                    "a folder above the socket is owned by uid {} (neither root nor this daemon's uid {me}); \
                     that user could rename the socket's folder away and put their own in its place",
                    meta.uid()
                ),
            });
        }
        let mode = meta.mode();
        if mode & WRITABLE_BY_GROUP_OR_OTHERS != 0 && mode & STICKY == 0 {
            return Err(InsecureSocketDir {
                folder: dir.to_path_buf(),
                why: format!(
                    "a folder above the socket has mode {:o}: others can write it and it has no sticky bit, \
                     so they could rename the socket's folder away and put their own in its place",
                    mode & 0o7777
                ),
            });
        }
        above = dir.parent();
    }
    Ok(())
}

/// Who may connect to a socket: its permission bits and, if set, the group
/// it is given. Connecting needs write permission on the socket file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// Permission bits only (at most 0o777); the owner always keeps rw.
    pub mode: u32,
    /// The socket's group; `None` leaves the daemon's own group.
    pub gid: Option<u32>,
}

impl SocketAccess {
    /// The daemon's user (and root) only: the admin socket, and the
    /// producer socket by default.
    pub const PRIVATE: SocketAccess = SocketAccess {
        mode: 0o600,
        gid: None,
    };
}

/// Longest buffer the group database may ask for (a group with thousands
/// of members); past it the lookup fails rather than growing without bound.
const GROUP_BUFFER_BYTES_MAX: usize = 1 << 20;

/// The gid of the group called `name`, from the system's group database
/// (files, LDAP, whatever NSS is set up with); `None` if there is none.
pub fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let c_name = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the name"))?;
    lookup_group(|grp, buf, len, result| {
        // SAFETY: a NUL-terminated name, a group struct and a buffer of
        // `len` bytes that outlive the call; `result` is written by it.
        unsafe { libc::getgrnam_r(c_name.as_ptr(), grp, buf, len, result) }
    })
}

/// `gid` if the group database knows a group with that id, else `None`.
pub fn group_by_gid(gid: u32) -> io::Result<Option<u32>> {
    lookup_group(|grp, buf, len, result| {
        // SAFETY: as in `group_by_name`.
        unsafe { libc::getgrgid_r(gid, grp, buf, len, result) }
    })
}

/// Run a `getgr*_r` call, growing its buffer on ERANGE.
fn lookup_group(
    mut call: impl FnMut(
        *mut libc::group,
        *mut libc::c_char,
        libc::size_t,
        *mut *mut libc::group,
    ) -> libc::c_int,
) -> io::Result<Option<u32>> {
    let mut buf = vec![0 as libc::c_char; 4096];
    loop {
        // SAFETY: an all-zero `struct group` is a valid value to overwrite.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc = call(&mut grp, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc == libc::ERANGE && buf.len() < GROUP_BUFFER_BYTES_MAX {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        return Ok((!result.is_null()).then_some(grp.gr_gid));
    }
}

/// The exclusive lock on a socket's name, held while the process lives.
#[derive(Debug)]
pub struct SocketLock {
    _file: File,
    pub path: PathBuf,
}

impl SocketLock {
    /// Lock `<socket>.lock` (created 0600 beside the socket).
    pub fn acquire(socket: &Path) -> Result<SocketLock, String> {
        let mut name = socket.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        match spillway_wab::lock::try_lock_file(&path) {
            Ok(Ok(file)) => Ok(SocketLock { _file: file, path }),
            Ok(Err(_held)) => Err(format!(
                "another spillway daemon is already listening on {} (it holds the lock {}); \
                 stop it, or set another socket path",
                socket.display(),
                path.display()
            )),
            Err(e) => Err(format!("locking {}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn private_folder_passes_and_group_writable_folder_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let run = top.path().join("run");
        std::fs::create_dir(&run).unwrap();
        chmod(top.path(), 0o700);
        chmod(&run, 0o700);
        check_socket_dir(&run.join("s.sock")).unwrap();
        chmod(&run, 0o770);
        let err = check_socket_dir(&run.join("s.sock")).unwrap_err();
        assert!(err.why.contains("mode 770"), "{err}");
    }

    #[test]
    fn world_writable_parent_needs_the_sticky_bit() {
        let top = tempfile::tempdir().unwrap();
        let run = top.path().join("run");
        std::fs::create_dir(&run).unwrap();
        chmod(&run, 0o700);
        chmod(top.path(), 0o777);
        let err = check_socket_dir(&run.join("s.sock")).unwrap_err();
        assert_eq!(err.folder, top.path().canonicalize().unwrap());
        assert!(err.why.contains("no sticky bit"), "{err}");
        chmod(top.path(), 0o1777);
        check_socket_dir(&run.join("s.sock")).unwrap();
    }

    #[test]
    fn groups_are_found_by_name_and_gid() {
        // SAFETY: getegid has no preconditions.
        let mine = unsafe { libc::getegid() };
        assert_eq!(group_by_gid(mine).unwrap(), Some(mine));
        assert_eq!(group_by_name("root").unwrap(), Some(0));
        assert_eq!(group_by_name("no-such-group-spillway").unwrap(), None);
        assert_eq!(group_by_gid(4_000_000_000).unwrap(), None);
    }

    #[test]
    fn a_second_socket_lock_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let sock = top.path().join("s.sock");
        let held = SocketLock::acquire(&sock).unwrap();
        let err = SocketLock::acquire(&sock).unwrap_err();
        assert!(err.contains("already listening"), "{err}");
        drop(held);
        SocketLock::acquire(&sock).unwrap();
    }
}
