//! Running out of file descriptors, noticed wherever it happens.
//!
//! EMFILE (this process is at `RLIMIT_NOFILE`) or ENFILE (the system is at
//! its file table limit) from any open, accept or directory read is a
//! condition of the whole process, not of the file at hand: the next
//! checkpoint write, seal or rotation fails the same way. So every such
//! failure is counted here, process-wide ([`total`], exported as
//! `spillway_fd_exhaustion_total`), the time of the last one is kept
//! ([`last_unix_ms`], which `GET /ready` and `ctl health` read: a daemon
//! that just ran out is not ready), and a WARN line says so at most once a
//! second with the number of failures since the previous line.
//!
//! Every file operation of [`crate::storage::FsStorage`] reports here, and
//! so do the accept loops of the daemon.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Failures for lack of a descriptor since the process started.
static TOTAL: AtomicU64 = AtomicU64::new(0);
/// Wall-clock time of the latest one (ms since the epoch); 0: never.
static LAST_MS: AtomicU64 = AtomicU64::new(0);
/// Wall-clock time of the latest log line (ms since the epoch).
static LOGGED_MS: AtomicU64 = AtomicU64::new(0);
/// Failures not yet reported in a log line.
static UNREPORTED: AtomicU64 = AtomicU64::new(0);

/// At most one log line per this many milliseconds.
const LOG_EVERY_MS: u64 = 1000;

/// Whether `e` means "no descriptor left" (EMFILE, ENFILE).
pub fn is_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// Count `e` if it is a descriptor shortage met while `doing` (e.g.
/// "opening a file"), logging at most once a second; other errors pass.
pub fn note(e: &io::Error, doing: &'static str) {
    if !is_exhaustion(e) {
        return;
    }
    let now = unix_ms();
    TOTAL.fetch_add(1, Ordering::Relaxed);
    LAST_MS.store(now, Ordering::Relaxed);
    let unreported = UNREPORTED.fetch_add(1, Ordering::Relaxed) + 1;
    let logged = LOGGED_MS.load(Ordering::Relaxed);
    if now.saturating_sub(logged) < LOG_EVERY_MS
        || LOGGED_MS
            .compare_exchange(logged, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    UNREPORTED.fetch_sub(unreported, Ordering::Relaxed);
    tracing::warn!(
        error = %e,
        during = doing,
        failures = unreported,
        total = TOTAL.load(Ordering::Relaxed),
        "out of file descriptors: raise the limit (ulimit -n, LimitNOFILE=) or lower server.connections_max \
         (at most one such line per second; not ready until it has passed)"
    );
}

/// Failures for lack of a descriptor since the process started.
pub fn total() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

/// When the latest one happened (ms since the epoch); 0: never.
pub fn last_unix_ms() -> u64 {
    LAST_MS.load(Ordering::Relaxed)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test touches the process-wide counters, so no other test races it.
    #[test]
    fn only_descriptor_shortages_are_counted() {
        let before = total();
        note(
            &io::Error::from_raw_os_error(libc::ENOENT),
            "opening a file",
        );
        note(&io::Error::from(io::ErrorKind::Other), "opening a file");
        assert_eq!(total(), before);
        assert_eq!(last_unix_ms(), 0);
        note(
            &io::Error::from_raw_os_error(libc::EMFILE),
            "opening a file",
        );
        note(
            &io::Error::from_raw_os_error(libc::ENFILE),
            "listing a folder",
        );
        assert_eq!(total(), before + 2);
        assert!(last_unix_ms() > 0);
    }
}
