//! The client's error type: connection, I/O and protocol failures, plus the
//! daemon's own refusals (nacks) with their retry semantics.

use std::io;
use std::path::PathBuf;

use spillway_protocol::{NackReason, Response, ResponseError};

/// Everything that can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket could not be connected.
    #[error("connecting to {path}: {source}")]
    Connect {
        /// The socket path that was tried.
        path: PathBuf,
        /// Why the connect failed.
        source: io::Error,
    },
    /// The TCP connection could not be made.
    #[error("connecting to {addr}: {source}")]
    ConnectAddr {
        /// The address that was tried (the last one, if several).
        addr: String,
        /// Why the connect failed.
        source: io::Error,
    },
    /// TLS could not be set up: a certificate or key that does not load,
    /// a bad server name, or a handshake the daemon refused.
    #[error("TLS: {0}")]
    Tls(String),
    /// Reading or writing the socket failed (including timeouts:
    /// `WouldBlock`/`TimedOut`). The request's fate is unknown.
    #[error("{}", io_display(.0))]
    Io(#[from] io::Error),
    /// The daemon refused the request. Unless the reason is retryable, the
    /// daemon has closed the connection.
    #[error("daemon refused the request: {0} (retryable: {retryable})", retryable = .0.is_retryable())]
    Nack(NackReason),
    /// The daemon sent bytes that are not a valid response frame.
    #[error(transparent)]
    Protocol(#[from] ResponseError),
    /// A valid response of the wrong kind (or an AckBatch with the wrong count).
    #[error("daemon answered {got:?} where {expected} was expected")]
    UnexpectedResponse {
        /// What the request called for.
        expected: &'static str,
        /// What arrived instead.
        got: Response,
    },
    /// The daemon closed the connection (EOF, reset or broken pipe).
    #[error("connection closed by the daemon")]
    Closed,
    /// The request was refused locally before anything was sent (e.g. an
    /// empty payload or an empty batch).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl Error {
    /// The daemon's nack reason, if this error is a nack.
    pub fn nack_reason(&self) -> Option<NackReason> {
        match self {
            Self::Nack(reason) => Some(*reason),
            _ => None,
        }
    }

    /// Whether the same request may be resent on the same connection: true
    /// only for the retryable nacks (InternalError, Overloaded). After any
    /// other error the connection is closed or in an unknown state; reconnect.
    pub fn is_retryable(&self) -> bool {
        self.nack_reason().is_some_and(NackReason::is_retryable)
    }

    /// Whether the daemon refused the request for good: a nack that is not
    /// retryable. The daemon has closed the connection, and the same bytes
    /// would be refused again (a client bug, or a version mismatch).
    pub fn is_fatal_nack(&self) -> bool {
        self.nack_reason().is_some_and(|r| !r.is_retryable())
    }

    /// Whether a read or write timed out ([`crate::Options::timeout`]). The
    /// request's fate is unknown: it may still be stored and acked.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

/// An expired socket timeout reads as EAGAIN ("Resource temporarily
/// unavailable"), which names neither the timeout nor what to do.
fn io_display(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "timed out waiting for the daemon (Options::timeout); the request's fate is unknown"
                .to_string()
        }
        _ => format!("i/o: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_retryable_nacks_are_retryable() {
        assert!(Error::Nack(NackReason::Overloaded).is_retryable());
        assert!(Error::Nack(NackReason::InternalError).is_retryable());
        assert!(!Error::Nack(NackReason::BadPayloadCrc).is_retryable());
        assert!(!Error::Closed.is_retryable());
        let timeout = Error::Io(io::Error::from(io::ErrorKind::TimedOut));
        assert!(!timeout.is_retryable());
        assert!(timeout.is_timeout());
        let would_block = Error::Io(io::Error::from(io::ErrorKind::WouldBlock));
        assert!(
            would_block.to_string().starts_with("timed out"),
            "{would_block}"
        );
        assert!(
            !would_block.to_string().contains("temporarily"),
            "{would_block}"
        );
        assert!(!timeout.is_fatal_nack());
        assert_eq!(timeout.nack_reason(), None);
        assert!(Error::Nack(NackReason::VersionMismatch).is_fatal_nack());
        assert!(!Error::Nack(NackReason::Overloaded).is_fatal_nack());
    }

    #[test]
    fn nack_display_says_whether_to_retry() {
        assert_eq!(
            Error::Nack(NackReason::Overloaded).to_string(),
            "daemon refused the request: overloaded (retryable: true)"
        );
        assert_eq!(
            Error::Nack(NackReason::EmptyPayload).to_string(),
            "daemon refused the request: empty_payload (retryable: false)"
        );
    }
}
