//! systemd's service notification protocol (`sd_notify`), spoken without
//! libsystemd: readiness, stopping, and the watchdog.
//!
//! Under `Type=notify` systemd passes `NOTIFY_SOCKET`, a Unix datagram
//! socket (a path, or an abstract name written `@name`), and waits for a
//! datagram holding `READY=1` before it counts the service as started. The
//! daemon sends it once the producer socket listens and every shard has
//! been recovered ([`ready`]), `STOPPING=1` when shutdown begins
//! ([`stopping`]), and, when systemd asks for a watchdog (`WatchdogSec=`
//! sets `WATCHDOG_USEC`), `WATCHDOG=1` every half of that period from a
//! timer on the system arbiter ([`spawn_watchdog`]): the arbiter that runs
//! the listener and the supervisor, so a wedged one stops the pings and
//! systemd restarts the daemon. Without `NOTIFY_SOCKET` every call here
//! does nothing. A message that cannot be sent is logged (once) and never
//! fatal: systemd then reports the start as timed out, which says more
//! than a daemon that refused to run.
//!
//! Not the `sd-notify` crate: it (0.4.5, and 0.5.0 at its source) connects
//! to `NOTIFY_SOCKET` as a file path only, so an abstract `@name` socket
//! (what container managers and some service managers pass) would fail,
//! and it accepts a malformed `WATCHDOG_USEC` silently. This file is the
//! protocol's whole client side, and its tests pin both cases.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Where systemd listens, and the socket the daemon sends from.
struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `NOTIFY_SOCKET` as given, for log lines.
    target: String,
    /// A send failed and was logged: later failures stay quiet.
    failed: AtomicBool,
}

impl Notifier {
    /// The notifier for `NOTIFY_SOCKET = value`: an absolute path, or `@`
    /// followed by an abstract socket name.
    fn new(value: &OsStr) -> Result<Notifier, String> {
        let target = value.to_string_lossy().into_owned();
        let bytes = value.as_bytes();
        let addr = match bytes.first() {
            Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
            Some(b'/') => SocketAddr::from_pathname(value),
            _ => {
                return Err(format!(
                    "NOTIFY_SOCKET = {target:?} is neither an absolute path nor an @abstract name"
                ))
            }
        }
        .map_err(|e| format!("NOTIFY_SOCKET = {target:?}: {e}"))?;
        let socket = UnixDatagram::unbound()
            .map_err(|e| format!("NOTIFY_SOCKET = {target:?}: creating a datagram socket: {e}"))?;
        Ok(Notifier {
            socket,
            addr,
            target,
            failed: AtomicBool::new(false),
        })
    }

    /// Send one datagram of `KEY=value` lines.
    fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.addr) {
            if !self.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    notify_socket = %self.target,
                    error = %e,
                    "could not notify the service manager (NOTIFY_SOCKET); it may count this start as failed"
                );
            }
        }
    }
}

/// The process's notifier, read from the environment on first use.
fn notifier() -> Option<&'static Notifier> {
    static NOTIFIER: OnceLock<Option<Notifier>> = OnceLock::new();
    NOTIFIER
        .get_or_init(|| {
            let value = std::env::var_os("NOTIFY_SOCKET").filter(|v| !v.is_empty())?;
            Notifier::new(&value)
                .map_err(|e| tracing::warn!("{e}; not notifying the service manager"))
                .ok()
        })
        .as_ref()
}

/// Tell the service manager the daemon is ready: producers connecting now
/// are answered. `status` is shown by `systemctl status`.
pub fn ready(status: &str) {
    if let Some(n) = notifier() {
        n.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }
}

/// Tell the service manager shutdown has begun.
pub fn stopping() {
    if let Some(n) = notifier() {
        n.send("STOPPING=1\nSTATUS=stopping");
    }
}

/// `STATUS=` ends at a newline: keep the text on one line.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// If systemd asked for a watchdog, ping it every half period from the
/// current arbiter (the system arbiter: call it from `start`).
pub fn spawn_watchdog() {
    let Some(n) = notifier() else {
        return;
    };
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    let every = match watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id()) {
        Ok(Some(every)) => every,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("{e}; not sending watchdog pings");
            return;
        }
    };
    actix_rt::spawn(async move {
        let mut tick = actix_rt::time::interval(every);
        loop {
            tick.tick().await;
            n.send("WATCHDOG=1");
        }
    });
}

/// How often to ping: half of `WATCHDOG_USEC`, as sd_watchdog_enabled
/// advises; `None` without a watchdog, or when `WATCHDOG_PID` names
/// another process (the variables were inherited, not meant for us).
fn watchdog_interval(
    usec: Option<&str>,
    pid: Option<&str>,
    my_pid: u32,
) -> Result<Option<Duration>, String> {
    let Some(usec) = usec.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    if let Some(pid) = pid.filter(|p| !p.is_empty()) {
        match pid.parse::<u32>() {
            Ok(p) if p == my_pid => {}
            Ok(_) => return Ok(None),
            Err(_) => return Err(format!("WATCHDOG_PID = {pid:?} is not a process id")),
        }
    }
    match usec.parse::<u64>() {
        Ok(us) if us > 0 => Ok(Some(
            Duration::from_micros(us / 2).max(Duration::from_millis(1)),
        )),
        _ => Err(format!(
            "WATCHDOG_USEC = {usec:?} is not a positive number of microseconds"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_period_and_only_for_us() {
        let half = |u, p| watchdog_interval(u, p, 42);
        assert_eq!(half(None, None), Ok(None));
        assert_eq!(
            half(Some("30000000"), None),
            Ok(Some(Duration::from_secs(15)))
        );
        assert_eq!(
            half(Some("30000000"), Some("42")),
            Ok(Some(Duration::from_secs(15)))
        );
        assert_eq!(half(Some("30000000"), Some("7")), Ok(None));
        assert!(half(Some("0"), None).unwrap_err().contains("WATCHDOG_USEC"));
        assert!(half(Some("soon"), None)
            .unwrap_err()
            .contains("WATCHDOG_USEC"));
        assert!(half(Some("10"), Some("x"))
            .unwrap_err()
            .contains("WATCHDOG_PID"));
    }

    #[test]
    fn addresses_are_paths_or_abstract_names() {
        assert!(Notifier::new(OsStr::new("/run/systemd/notify")).is_ok());
        let n = Notifier::new(OsStr::new("@spillway-test")).unwrap();
        assert_eq!(n.addr.as_abstract_name(), Some(&b"spillway-test"[..]));
        let err = Notifier::new(OsStr::new("relative/notify"))
            .err()
            .expect("a relative path is refused");
        assert!(err.contains("NOTIFY_SOCKET"), "{err}");
    }

    #[test]
    fn a_datagram_reaches_a_bound_socket() {
        let dir = std::env::temp_dir().join(format!("spillway-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        Notifier::new(path.as_os_str()).unwrap().send("READY=1");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn status_stays_on_one_line() {
        assert_eq!(one_line("a\nb\r\nc"), "a b  c");
    }
}
