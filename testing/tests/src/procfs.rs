//! What `/proc` says of a process: its descriptors, limits, page faults
//! and context switches; and the data folder's segment files.

use std::fs::{self};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::*;

/// Open descriptors of a process.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `pre_exec`: soft = hard = `n` for RLIMIT_NOFILE in the daemon.
pub fn nofile_limit(n: u64) -> impl FnOnce(&mut Command) {
    move |cmd: &mut Command| {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: n as libc::rlim_t,
                    rlim_max: n as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Set a running process's soft RLIMIT_NOFILE to `soft` and its hard one
/// to `hard` (keep `hard` as it was to be able to raise `soft` again
/// without privilege).
pub fn set_soft_nofile_of(pid: u32, soft: u64, hard: u64) {
    let lim = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: prlimit reads the struct we pass and writes nothing (null old).
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &lim,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(
        rc,
        0,
        "prlimit({pid}, NOFILE, soft {soft}, hard {hard}): {}",
        std::io::Error::last_os_error()
    );
}

/// Sealed segment files across the daemon's shards.
pub fn sealed_segments(d: &Daemon) -> usize {
    shard_files_ending(d, ".sealed")
}

/// How many files of the daemon's shard folders end in `suffix`.
pub fn shard_files_ending(d: &Daemon, suffix: &str) -> usize {
    d.shard_dirs()
        .iter()
        .map(|(_, dir)| {
            std::fs::read_dir(dir)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .ends_with(suffix)
                })
                .count()
        })
        .sum()
}

/// The sum of `count` over the threads of process `pid` whose name starts
/// with `prefix` (threads that end meanwhile are left out).
fn sum_over_threads(pid: u32, prefix: &str, count: impl Fn(&Path) -> Option<u64>) -> u64 {
    let mut total = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        match fs::read_to_string(dir.join("comm")) {
            Ok(comm) if comm.starts_with(prefix) => total += count(&dir).unwrap_or(0),
            _ => {}
        }
    }
    total
}

/// Minor page faults the threads of process `pid` whose name starts with
/// `prefix` have taken so far (`/proc/PID/task/TID/stat`, field 10).
pub fn minor_faults(pid: u32, prefix: &str) -> u64 {
    sum_over_threads(pid, prefix, |dir| {
        let stat = fs::read_to_string(dir.join("stat")).ok()?;
        // The name (field 2) may hold spaces; the fields go on after its ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        rest.split(' ').nth(7)?.parse().ok()
    })
}

/// Times the threads of process `pid` whose name starts with `prefix` have
/// gone to sleep so far (`voluntary_ctxt_switches` of
/// `/proc/PID/task/TID/status`): their wake-ups.
pub fn voluntary_switches(pid: u32, prefix: &str) -> u64 {
    sum_over_threads(pid, prefix, |dir| {
        let status = fs::read_to_string(dir.join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
            .trim()
            .parse()
            .ok()
    })
}
