//! # spillway-ctl: the admin socket's line protocol
//!
//! The admin socket (`admin.socket_path`) takes one command line, e.g.
//! `stats` or `dead-letter requeue 0:17`, and answers with `ok` or
//! `error: <why>` on the first line, then the body, then closes. Both sides
//! live here so they cannot drift apart: the daemon frames its reply with
//! [`reply`], and [`call`] (used by `spillway ctl` and `spillway bench`)
//! sends a command and unframes the answer.
//!
//! Every call is bounded: [`Limits`] gives it a deadline (a stopped daemon,
//! or a listener that never answers, cannot hang the caller) and a cap on
//! the reply (a socket that keeps sending cannot make it grow without end).
//!
//! This crate uses only the standard library, so the daemon built without
//! the bench still links nothing it does not need.

pub mod access;

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The first line of a successful reply.
const OK: &str = "ok";
/// What an error reply's first line starts with; the reason follows.
const ERROR_PREFIX: &str = "error: ";

/// The bytes the daemon writes for the outcome of one command.
pub fn reply(outcome: Result<String, String>) -> String {
    match outcome {
        Ok(body) => format!("{OK}\n{body}"),
        Err(why) => format!("{ERROR_PREFIX}{why}\n"),
    }
}

/// How long a call may take and how much of a reply it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The whole call: connect, send, and the reply to its last byte.
    pub timeout: Duration,
    /// A reply longer than this is refused (and no more of it is read).
    pub reply_bytes_max: u64,
}

/// A call's deadline unless told otherwise.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// The longest reply read unless told otherwise: far above any real one
/// (`metrics` of 64 shards is under 1 MiB; a dead-letter list previews
/// each payload in at most a few hundred bytes).
pub const REPLY_BYTES_MAX_DEFAULT: u64 = 64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: TIMEOUT_DEFAULT,
            reply_bytes_max: REPLY_BYTES_MAX_DEFAULT,
        }
    }
}

/// Send `command` to the admin socket at `socket` and return the reply's
/// body, or the daemon's reason (or why it could not be reached), within
/// the default [`Limits`].
pub fn call(socket: &Path, command: &str) -> Result<String, String> {
    call_with(socket, command, Limits::default())
}

/// Why a call did not return a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The daemon answered `error: <why>`: it was asked and said no.
    Refused(String),
    /// The daemon could not be asked: no socket, nobody listening, a
    /// timeout, a reply that is not spillway's.
    Unreachable(String),
}

impl CallError {
    pub fn message(&self) -> &str {
        match self {
            CallError::Refused(m) | CallError::Unreachable(m) => m,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// [`call`] within `limits`.
pub fn call_with(socket: &Path, command: &str, limits: Limits) -> Result<String, String> {
    ask(socket, command, limits).map_err(|e| e.message().to_string())
}

/// [`call_with`], saying whether the daemon refused or could not be asked
/// (`spillway ctl`'s exit codes tell the two apart).
/// Connect to `socket` and write `command` by `deadline`.
fn send(
    socket: &Path,
    command: &str,
    limits: Limits,
    deadline: Instant,
) -> Result<UnixStream, CallError> {
    let unreachable = CallError::Unreachable;
    let timed_out = |doing: &str| timed_out(socket, limits, doing);
    let mut s = connect_by(socket, deadline)
        .map_err(|e| match e {
            None => timed_out("connecting to"),
            Some(e) => format!(
                "connecting to the admin socket {}: {e} ({})",
                socket.display(),
                access::why_not_connected("admin socket", socket, &e)
            ),
        })
        .map_err(unreachable)?;
    s.set_write_timeout(Some(
        remaining(deadline)
            .ok_or_else(|| timed_out("writing to"))
            .map_err(unreachable)?,
    ))
    .map_err(|e| unreachable(e.to_string()))?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(|e| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => timed_out("writing to"),
            _ => format!("writing to the admin socket {}: {e}", socket.display()),
        })
        .map_err(unreachable)?;
    Ok(s)
}

fn timed_out(socket: &Path, limits: Limits, doing: &str) -> String {
    format!(
        "timed out after {:.1} s {doing} the admin socket {} (is the daemon stopped, or busy? \
         --timeout gives it longer)",
        limits.timeout.as_secs_f64(),
        socket.display()
    )
}

/// Send `command` and hand each line of a streamed answer (`tap`) to
/// `line` until the daemon ends it or `line` returns false. The first
/// line (`ok` or the daemon's refusal) must come within `limits.timeout`;
/// the stream itself has no deadline, and no line may pass
/// `limits.reply_bytes_max`.
pub fn stream(
    socket: &Path,
    command: &str,
    limits: Limits,
    mut line: impl FnMut(&str) -> bool,
) -> Result<(), CallError> {
    let deadline = Instant::now() + limits.timeout;
    let s = send(socket, command, limits, deadline)?;
    let unreachable = CallError::Unreachable;
    let reading = |e: std::io::Error| {
        unreachable(match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => {
                timed_out(socket, limits, "waiting for the answer of")
            }
            _ => format!(
                "reading the answer of the admin socket {}: {e}",
                socket.display()
            ),
        })
    };
    let left = remaining(deadline)
        .ok_or_else(|| unreachable(timed_out(socket, limits, "waiting for the answer of")))?;
    s.set_read_timeout(Some(left))
        .map_err(|e| unreachable(e.to_string()))?;
    let mut reader = std::io::BufReader::new(s);
    let mut buf = Vec::new();
    let next_line = |reader: &mut std::io::BufReader<UnixStream>, buf: &mut Vec<u8>| {
        buf.clear();
        let n = std::io::BufRead::read_until(
            &mut Read::take(&mut *reader, limits.reply_bytes_max),
            b'\n',
            buf,
        )
        .map_err(reading)?;
        if n as u64 == limits.reply_bytes_max && buf.last() != Some(&b'\n') {
            return Err(unreachable(format!(
                "a line of the admin socket {}'s answer passed {} bytes; stopped reading",
                socket.display(),
                limits.reply_bytes_max
            )));
        }
        Ok(n)
    };
    next_line(&mut reader, &mut buf)?;
    let first = String::from_utf8_lossy(&buf).into_owned();
    if first != format!("{OK}\n") {
        return parse_reply(&first).map(|_| ());
    }
    reader
        .get_ref()
        .set_read_timeout(None)
        .map_err(|e| unreachable(e.to_string()))?;
    loop {
        let n = next_line(&mut reader, &mut buf)?;
        if n == 0 || !line(String::from_utf8_lossy(&buf).trim_end_matches('\n')) {
            return Ok(());
        }
    }
}

pub fn ask(socket: &Path, command: &str, limits: Limits) -> Result<String, CallError> {
    let deadline = Instant::now() + limits.timeout;
    let mut s = send(socket, command, limits, deadline)?;
    let unreachable = CallError::Unreachable;
    let timed_out = |doing: &str| timed_out(socket, limits, doing);
    let mut answer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let left = remaining(deadline)
            .ok_or_else(|| timed_out("waiting for the answer of"))
            .map_err(unreachable)?;
        s.set_read_timeout(Some(left))
            .map_err(|e| unreachable(e.to_string()))?;
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if answer.len() as u64 > limits.reply_bytes_max {
                    return Err(unreachable(format!(
                        "the reply of the admin socket {} passed {} bytes; stopped reading \
                         (is something other than spillway listening there?)",
                        socket.display(),
                        limits.reply_bytes_max
                    )));
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(unreachable(timed_out("waiting for the answer of")))
            }
            Err(e) => {
                return Err(unreachable(format!(
                    "reading the answer of the admin socket {}: {e}",
                    socket.display()
                )))
            }
        }
    }
    parse_reply(&String::from_utf8_lossy(&answer))
}

/// Time left before `deadline`, `None` once it has passed.
fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

/// Connect before `deadline`. A Unix `connect` blocks while the listener's
/// backlog is full (a stopped daemon), and std has no connect timeout for
/// Unix sockets, so it runs on a thread of its own; past the deadline the
/// caller goes on (`Err(None)`) and the thread ends with the process or
/// when the connect returns.
fn connect_by(socket: &Path, deadline: Instant) -> Result<UnixStream, Option<std::io::Error>> {
    let (tx, rx) = mpsc::channel();
    let path: PathBuf = socket.to_path_buf();
    std::thread::Builder::new()
        .name("ctl-connect".into())
        .spawn(move || {
            let _ = tx.send(UnixStream::connect(path));
        })
        .map_err(Some)?;
    let left = remaining(deadline).ok_or(None)?;
    match rx.recv_timeout(left) {
        Ok(connected) => connected.map_err(Some),
        Err(_) => Err(None),
    }
}

/// The body of an `ok` reply, or the reason of an `error:` one.
fn parse_reply(answer: &str) -> Result<String, CallError> {
    match answer.split_once('\n') {
        Some((OK, body)) => Ok(body.to_string()),
        // Errors may span lines (a TOML error shows the offending line).
        _ => match answer.strip_prefix(ERROR_PREFIX) {
            Some(why) => Err(CallError::Refused(why.trim_end().to_string())),
            None => Err(CallError::Unreachable(format!(
                "unexpected reply {answer:?} (is something other than spillway listening there?)"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_unframes_to_what_was_framed() {
        let body = "shard 0: Running\nshard 1: Running\n".to_string();
        assert_eq!(parse_reply(&reply(Ok(body.clone()))), Ok(body));
        assert_eq!(parse_reply(&reply(Ok(String::new()))), Ok(String::new()));
        let why = "sink.url: expected http:// or https://\n  at line 3".to_string();
        assert_eq!(
            parse_reply(&reply(Err(why.clone()))),
            Err(CallError::Refused(why))
        );
    }

    /// A fresh folder of this process's with a listening `admin.sock`.
    fn socket_in_temp(tag: &str) -> (PathBuf, std::os::unix::net::UnixListener) {
        let dir = std::env::temp_dir().join(format!("spillway-ctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("admin.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        (path, listener)
    }

    /// A listener that accepts and never answers: the call gives up at
    /// its deadline and says it timed out.
    #[test]
    fn a_silent_listener_is_a_timeout_not_a_hang() {
        let (path, listener) = socket_in_temp("silent");
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let limits = Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        };
        let err = ask(&path, "health", limits).unwrap_err();
        assert!(matches!(err, CallError::Unreachable(_)), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("timed out after 0.3 s"), "{err}");
        assert!(err.contains("admin.sock"), "{err}");
        drop(held.join());
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// A socket that keeps sending: the call stops at the cap.
    #[test]
    fn a_flooding_socket_is_cut_at_the_reply_cap() {
        let (path, listener) = socket_in_temp("flood");
        let flood = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let block = [b'x'; 4096];
            // Until the caller hangs up (EPIPE) or 64 MiB, far past the cap.
            for _ in 0..16 * 1024 {
                if s.write_all(&block).is_err() {
                    break;
                }
            }
        });
        let limits = Limits {
            timeout: Duration::from_secs(30),
            reply_bytes_max: 1024 * 1024,
        };
        let err = call_with(&path, "stats", limits).unwrap_err();
        assert!(err.contains("passed 1048576 bytes"), "{err}");
        flood.join().unwrap();
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn an_answer_in_no_known_shape_is_an_error_that_quotes_it() {
        let err = parse_reply("HTTP/1.1 400 Bad Request\r\n").unwrap_err();
        assert!(matches!(err, CallError::Unreachable(_)), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("unexpected reply"), "{err}");
        assert!(err.contains("HTTP/1.1 400"), "{err}");
    }
}
