//! Who may touch the folder a socket lives in, and who owns the socket name.
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

use std::fs::File;
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
