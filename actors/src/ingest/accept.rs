//! What an accept loop does when `accept()` fails.
//!
//! With every file descriptor in use, `accept()` fails with EMFILE at once,
//! and the pending connection stays in the backlog: a loop that retries
//! straight away spins a core and, measured before this existed, wrote
//! millions of WARN lines (over a GB of log in seconds). [`AcceptErrors`]
//! pauses the loop instead, doubling the pause while the resource shortage
//! lasts (as tokio-style accept loops do), and logs at most one line per
//! [`LOG_EVERY`] with the count of failures since the last line.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;

/// The last descriptors below `RLIMIT_NOFILE` that no producer connection
/// may take: they are kept for the daemon's own files (the next segment,
/// a checkpoint write, a seal, the drain's reader) and the admin
/// listeners, whose connections are capped. Start-up sizes
/// `server.connections_max` so producers never get near them; this holds
/// the line when the limit shrinks under a running daemon or something
/// else takes descriptors (measured before it existed: a flood of
/// connections after the limit was lowered took the last descriptors and
/// the drain failed to open its next segment with EMFILE).
pub const RESERVED_FDS: u64 = 32;

/// `Some(EMFILE)` when the socket just accepted as `fd` sits among the
/// last [`RESERVED_FDS`] descriptors: it must be closed, and the accept
/// loop treated as out of descriptors. Descriptors are handed out lowest
/// first, so a new one that high means nearly every one below is in use.
pub fn into_reserve(fd: RawFd) -> Option<io::Error> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let limit = lim.rlim_cur;
    let in_reserve = (fd as u64).saturating_add(RESERVED_FDS) >= limit;
    in_reserve.then(|| io::Error::from_raw_os_error(libc::EMFILE))
}

/// The pause after resource errors (EMFILE, ENFILE, ENOBUFS, ENOMEM) in a
/// row: 5 ms, doubling to 1 s while resources stay short.
const PAUSE: Backoff = Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
/// Pause after any other error, so no error can make the loop spin.
const PAUSE_OTHER: Duration = Duration::from_millis(1);
/// At most one log line per this interval.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

/// Backoff and log throttling for one accept loop.
#[derive(Debug)]
pub struct AcceptErrors {
    /// Which socket, for the log line.
    what: &'static str,
    /// Resource errors since the last successful accept.
    short: u32,
    last_log: Option<Instant>,
    /// Failures not yet reported in a log line.
    unreported: u64,
    /// Every failure so far (exported as a counter by the caller).
    pub total: u64,
}

/// Whether an accept error means "out of descriptors or memory": the
/// condition lasts until something is freed, so retrying at once is futile.
pub fn is_resource_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl AcceptErrors {
    pub fn new(what: &'static str) -> Self {
        AcceptErrors {
            what,
            short: 0,
            last_log: None,
            unreported: 0,
            total: 0,
        }
    }

    /// A successful accept: the shortage (if any) is over.
    pub fn accepted(&mut self) {
        self.short = 0;
    }

    /// Count and maybe log `e`; returns how long to wait before the next accept.
    pub fn failed(&mut self, e: &io::Error) -> Duration {
        spillway_wab::descriptors::note(e, "accepting a connection");
        self.total += 1;
        self.unreported += 1;
        let now = Instant::now();
        if self
            .last_log
            .is_none_or(|t| now.duration_since(t) >= LOG_EVERY)
        {
            let resource = is_resource_error(e);
            tracing::warn!(
                socket = self.what,
                error = %e,
                failures = self.unreported,
                hint = if resource {
                    "out of file descriptors or memory: raise the fd limit (ulimit -n / LimitNOFILE) or lower server.connections_max"
                } else {
                    ""
                },
                "accept failed; pausing before the next attempt (at most one such line per second)"
            );
            self.last_log = Some(now);
            self.unreported = 0;
        }
        if is_resource_error(e) {
            self.short += 1;
            PAUSE.delay(self.short - 1)
        } else {
            PAUSE_OTHER
        }
    }
}

/// `socket` back, or (closing it) EMFILE when it took one of the
/// daemon's reserved descriptors ([`into_reserve`]).
pub fn outside_reserve<S: AsRawFd>(socket: S) -> io::Result<S> {
    match into_reserve(socket.as_raw_fd()) {
        Some(e) => Err(e),
        None => Ok(socket),
    }
}

/// Connections the kernel queues for a network door before `accept()`
/// takes them (the kernel caps it at `net.core.somaxconn`). std listens
/// with 128: a burst of new connections past that had its SYNs dropped
/// and retried a second later, and more.
pub const NETWORK_BACKLOG: i32 = 4096;

/// Listen again on a bound listener with [`NETWORK_BACKLOG`] (Linux takes
/// a second `listen` as a new backlog).
pub fn raise_backlog<S: AsRawFd>(listener: &S) -> io::Result<()> {
    // SAFETY: listen(2) on a descriptor we own, which stays open.
    if unsafe { libc::listen(listener.as_raw_fd(), NETWORK_BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_top_descriptors_are_the_reserve() {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        let limit = lim.rlim_cur as RawFd;
        assert!(into_reserve(3).is_none());
        assert!(into_reserve(limit - RESERVED_FDS as RawFd - 1).is_none());
        let e = into_reserve(limit - RESERVED_FDS as RawFd).unwrap();
        assert!(is_resource_error(&e));
        assert!(into_reserve(limit - 1).is_some());
    }

    #[test]
    fn resource_errors_back_off_up_to_the_cap_and_reset_on_success() {
        let mut a = AcceptErrors::new("test");
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<Duration> = (0..12).map(|_| a.failed(&emfile)).collect();
        assert_eq!(pauses[0], PAUSE.initial);
        assert!(pauses.windows(2).all(|w| w[1] >= w[0]), "{pauses:?}");
        assert_eq!(*pauses.last().unwrap(), PAUSE.max);
        assert_eq!(a.total, 12);
        // Only the first failure was logged; the rest wait for the next second.
        assert_eq!(a.unreported, 11);
        a.accepted();
        assert_eq!(a.failed(&emfile), PAUSE.initial);
        let other = io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert_eq!(a.failed(&other), PAUSE_OTHER);
    }
}
