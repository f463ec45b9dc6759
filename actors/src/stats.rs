//! Daemon-wide counters shared by the listener and connections, read by
//! `spillway ctl stats`, the metrics endpoint and the bench.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use spillway_protocol::NackReason;

/// Counters of the ingest side (shard counters live in [`crate::ShardStats`]).
#[derive(Debug, Default)]
pub struct DaemonStats {
    pub connections_accepted: AtomicU64,
    /// Closed at once because `connections_max` were open.
    pub connections_refused: AtomicU64,
    /// Closed at once because the peer's uid and gid are not allowed
    /// (`server.allowed_uids`, `server.allowed_gids`).
    pub connections_refused_peer: AtomicU64,
    /// Idle connections closed to let a new one in at `connections_max`.
    pub connections_evicted: AtomicU64,
    pub read_timeouts: AtomicU64,
    /// Connections holding part of a frame right now (its stall clock runs).
    pub connections_mid_frame: AtomicU64,
    /// Closed because the peer read none of its responses for
    /// `connection_idle_timeout_ms`.
    pub write_timeouts: AtomicU64,
    /// Closed after `connection_idle_timeout_ms` with nothing in progress.
    pub idle_timeouts: AtomicU64,
    /// Times the producer socket's name was found removed or replaced by
    /// another file (someone else could now receive producers' records).
    pub socket_replaced: AtomicU64,
    /// `accept()` failures (EMFILE and the like); the loop pauses on each.
    pub accept_failures: AtomicU64,
    /// Bytes held right now by read buffers beyond their first
    /// [`crate::ingest::connection::READ_CHUNK`] (partially received frames),
    /// capped by `server.read_buffer_bytes_max`.
    pub read_buffer_bytes: AtomicU64,
    /// Times a connection paused reading because that cap was reached.
    pub read_buffer_pauses: AtomicU64,
    /// Nacks sent, indexed by reason byte (index 0 unused).
    pub nacks: [AtomicU64; 11],
    /// Limits warnings about bad clients so one hostile peer cannot flood the log.
    pub log_limiter: RateLimiter,
    /// The HTTP ingest door's figures (zero while it is off).
    pub http: HttpIngestStats,
    /// The TCP door's figures (zero while it is off).
    pub tcp: DoorStats,
}

impl DaemonStats {
    pub fn count_nack(&self, reason: NackReason) {
        self.nacks[reason.as_byte() as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn nack_count(&self, reason: NackReason) -> u64 {
        self.nacks[reason.as_byte() as usize].load(Ordering::Relaxed)
    }

    /// Every network door's figures, by the door's short name (the
    /// prefix of its `ctl stats` keys and metric names).
    pub fn network_doors(&self) -> [(&'static str, &DoorStats); 2] {
        [("http", &self.http.door), ("tcp", &self.tcp)]
    }
}

/// Allows `per_second` events per wall-clock second; reports how many were
/// suppressed when the next second starts.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: u32,
    window: Mutex<(Option<Instant>, u32, u64)>,
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter::per_second(20)
    }
}

impl RateLimiter {
    /// Allows `per_second` events per wall-clock second.
    pub fn per_second(per_second: u32) -> Self {
        RateLimiter {
            per_second,
            window: Mutex::new((None, 0, 0)),
        }
    }

    /// For a caller whose own line says how many were left out (so a
    /// limit of one a second means one line, not two): `Some(n)` when this
    /// event may be logged, `n` the events refused since the last one
    /// allowed; `None` when it may not. Logs nothing itself.
    pub fn allow_counting(&self) -> Option<u64> {
        let mut w = self.window.lock().unwrap();
        let now = Instant::now();
        let fresh =
            w.0.is_none_or(|start| now.duration_since(start).as_secs() >= 1);
        if fresh {
            // A new second; the refused count carries on until told.
            w.0 = Some(now);
            w.1 = 0;
        }
        if w.1 < self.per_second {
            w.1 += 1;
            Some(std::mem::take(&mut w.2))
        } else {
            w.2 += 1;
            None
        }
    }

    pub fn allow(&self) -> bool {
        let mut w = self.window.lock().unwrap();
        let now = Instant::now();
        let fresh =
            w.0.is_none_or(|start| now.duration_since(start).as_secs() >= 1);
        if fresh {
            if w.2 > 0 {
                tracing::warn!(
                    suppressed = w.2,
                    "log messages about bad clients suppressed in the last second"
                );
            }
            *w = (Some(now), 0, 0);
        }
        if w.1 < self.per_second {
            w.1 += 1;
            true
        } else {
            w.2 += 1;
            false
        }
    }
}

// ------------------------------------------------ the network doors' figures

/// Status codes the ingest door answers, counted one by one.
pub const HTTP_STATUSES: [u16; 12] = [200, 400, 401, 404, 405, 408, 413, 415, 429, 431, 500, 503];

/// What every network door counts (`ctl stats`, metrics): its
/// connections and its TLS handshakes.
#[derive(Debug, Default)]
pub struct DoorStats {
    /// Open connections (the door's own count against `connections_max`).
    pub connections_open: Arc<AtomicUsize>,
    pub connections_accepted: AtomicU64,
    /// Closed at once: `connections_max` were open and none could give
    /// way (the HTTP door: each with a request being answered; the TCP
    /// door: none in its TLS handshake).
    pub connections_refused: AtomicU64,
    /// Closed in the door's [`crate::ingest::Lobby`] (the HTTP door:
    /// between requests, before the first or in the TLS handshake; the TCP
    /// door: in the TLS handshake) to let a new one in at `connections_max`.
    pub connections_evicted: AtomicU64,
    /// TLS handshakes that failed, by reason (see [`crate::ingest::tls`]).
    pub tls: HandshakeStats,
}

/// The HTTP door's figures: a door's, and its answers.
#[derive(Debug, Default)]
pub struct HttpIngestStats {
    pub door: DoorStats,
    /// Requests answered, by status (index into [`HTTP_STATUSES`]).
    pub responses: [AtomicU64; HTTP_STATUSES.len()],
    /// Records acknowledged (answered 200).
    pub records: AtomicU64,
}

impl HttpIngestStats {
    pub(crate) fn answered(&self, status: u16) {
        if let Some(i) = HTTP_STATUSES.iter().position(|&s| s == status) {
            self.responses[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Why a handshake failed, as counted.
pub const HANDSHAKE_FAILURES: [&str; 6] = [
    "no_client_certificate",
    "unknown_ca",
    "expired",
    "bad_certificate",
    "name_not_allowed",
    "other",
];

/// Failed handshakes by reason (index into [`HANDSHAKE_FAILURES`]).
#[derive(Debug, Default)]
pub struct HandshakeStats {
    pub failed: [AtomicU64; HANDSHAKE_FAILURES.len()],
}

impl HandshakeStats {
    pub(crate) fn count(&self, reason: &str) {
        let i = HANDSHAKE_FAILURES
            .iter()
            .position(|&r| r == reason)
            .unwrap_or(HANDSHAKE_FAILURES.len() - 1);
        self.failed[i].fetch_add(1, Ordering::Relaxed);
    }

    /// `(reason, count)` for every reason.
    pub fn by_reason(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        HANDSHAKE_FAILURES
            .iter()
            .zip(&self.failed)
            .map(|(r, n)| (*r, n.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_a_second_counting_says_how_many_were_left_out() {
        let log = RateLimiter::per_second(1);
        assert_eq!(log.allow_counting(), Some(0));
        for _ in 0..30 {
            assert_eq!(
                log.allow_counting(),
                None,
                "a second line in the same second"
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(1010));
        assert_eq!(log.allow_counting(), Some(30));
        assert_eq!(log.allow_counting(), None);
        std::thread::sleep(std::time::Duration::from_millis(1010));
        assert_eq!(log.allow_counting(), Some(1));
    }
}
