//! Why a connect to one of the daemon's Unix sockets failed, said so that
//! the reader can act: a missing socket (is the daemon running?), nobody
//! listening (a socket left by a stopped daemon), or a permission refused,
//! with the socket's and its folder's owner, group and mode, who the
//! caller is, and which group to join or user to be.

use std::ffi::CStr;
use std::io::{self, ErrorKind};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What to add after "connecting to `what` `socket`: `e`".
pub fn why_not_connected(what: &str, socket: &Path, e: &io::Error) -> String {
    match e.kind() {
        ErrorKind::PermissionDenied => permission(what, socket),
        ErrorKind::ConnectionRefused => format!(
            "nothing listens on it (a socket left by a daemon that stopped?): is the daemon \
             running? Is this its {what}?"
        ),
        _ => format!("is the daemon running? Is this its {what}?"),
    }
}

/// The permission refused, and what would grant it.
fn permission(what: &str, socket: &Path) -> String {
    let folder = socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let describe = |p: &Path| match std::fs::metadata(p) {
        Ok(m) => format!(
            "{} is owned by {}, group {}, mode {:04o}",
            p.display(),
            user_name(m.uid()),
            group_name(m.gid()),
            m.mode() & 0o7777
        ),
        Err(e) => format!("{} cannot be read ({e})", p.display()),
    };
    let me = caller();
    let advice = match (std::fs::metadata(socket), std::fs::metadata(folder)) {
        (Ok(s), Ok(f)) if s.mode() & 0o060 == 0o060 && f.mode() & 0o010 != 0 => {
            let group = group_name(s.gid());
            format!(
                "join its group {group} (`sudo usermod -aG {group} {}`, then log in again) or \
                 run as {} or root",
                me.name,
                user_name(s.uid())
            )
        }
        (Ok(s), _) if s.uid() == 0 => format!("only root may connect to the {what}: run as root"),
        (Ok(s), _) => format!(
            "only {} (and root) may connect to the {what}: run as that user (`sudo -u {} \
             spillway ...`) or as root",
            user_name(s.uid()),
            user_name(s.uid())
        ),
        _ => "run as the daemon's user or root".to_string(),
    };
    format!(
        "permission denied: {}; {}; you run as {} (uid {}) in groups {}: {advice}",
        describe(socket),
        describe(folder),
        me.name,
        me.uid,
        me.groups.join(", ")
    )
}

struct Caller {
    uid: u32,
    name: String,
    groups: Vec<String>,
}

fn caller() -> Caller {
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut ids = vec![gid];
    // SAFETY: a null buffer with size 0 asks for the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n > 0 {
        let mut more = vec![0 as libc::gid_t; n as usize];
        // SAFETY: a buffer of `n` gids.
        let got = unsafe { libc::getgroups(n, more.as_mut_ptr()) };
        more.truncate(got.max(0) as usize);
        for g in more {
            if !ids.contains(&g) {
                ids.push(g);
            }
        }
    }
    Caller {
        uid,
        name: user_name(uid),
        groups: ids.into_iter().map(group_name).collect(),
    }
}

/// Longest buffer the user and group databases may ask for.
const BUFFER_MAX: usize = 1 << 20;

/// `uid`'s name, or the number when the user database has none.
pub fn user_name(uid: u32) -> String {
    // SAFETY: a passwd struct and a buffer of its length that outlive the
    // call; `result` is written by it.
    name_of(
        uid,
        |pw: &mut libc::passwd, buf, len, result| unsafe {
            libc::getpwuid_r(uid, pw, buf, len, result)
        },
        |pw| pw.pw_name,
    )
}

/// `gid`'s name, or the number when the group database has none.
pub fn group_name(gid: u32) -> String {
    // SAFETY: as in `user_name`.
    name_of(
        gid,
        |gr: &mut libc::group, buf, len, result| unsafe {
            libc::getgrgid_r(gid, gr, buf, len, result)
        },
        |gr| gr.gr_name,
    )
}

/// A `get*id_r` lookup of `id`'s name (growing the buffer on ERANGE), or
/// the number when the database has none.
fn name_of<T>(
    id: u32,
    call: impl Fn(&mut T, *mut libc::c_char, libc::size_t, &mut *mut T) -> libc::c_int,
    name: impl Fn(&T) -> *const libc::c_char,
) -> String {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: an all-zero passwd or group is a valid value to overwrite.
        let mut entry: T = unsafe { std::mem::zeroed() };
        let mut result: *mut T = std::ptr::null_mut();
        let rc = call(&mut entry, buf.as_mut_ptr(), buf.len(), &mut result);
        if rc == libc::ERANGE && buf.len() < BUFFER_MAX {
            buf.resize(buf.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return id.to_string();
        }
        // SAFETY: the name points into `buf`, NUL-terminated.
        return unsafe { CStr::from_ptr(name(&entry)) }
            .to_string_lossy()
            .into_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_its_group_have_names() {
        assert_eq!(user_name(0), "root");
        assert_eq!(group_name(0), "root");
        // An id nobody has: the number.
        assert_eq!(user_name(4_000_000_007), "4000000007");
    }

    #[test]
    fn a_missing_socket_asks_whether_the_daemon_runs() {
        let e = io::Error::from(ErrorKind::NotFound);
        let said = why_not_connected("admin socket", Path::new("/nonexistent/a.sock"), &e);
        assert!(said.contains("is the daemon running"), "{said}");
    }
}
