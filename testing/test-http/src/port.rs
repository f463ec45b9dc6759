//! A loopback port for a server a test starts itself: a daemon's door, a
//! nats-server's client or cluster port.
//!
//! Binding `127.0.0.1:0`, reading the port and letting it go leaves a
//! window before the server binds it. In that window the kernel may give
//! the same port to any outgoing connection as its local port, because
//! `bind(0)` draws from the ephemeral range that connections use too: a
//! three-node nats-server cluster opening its routes, or another test's
//! client, did exactly that in CI ("bind: address already in use"). So
//! [`free_port`] picks below the ephemeral range, where the kernel never
//! picks on its own, and hands out each port once per process. Another
//! process may still take one first; a server that reports "address
//! already in use" is the caller's to start again on new ports.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port [`free_port`] hands out: above the well-known and
/// most registered service ports a machine may run.
const LOWEST: u32 = 10_000;

/// At least this many ports between [`LOWEST`] and the ephemeral range,
/// or [`free_port`] falls back to `bind(0)`.
const LEAST_SPAN: u32 = 1_000;

/// A loopback TCP port nothing listens on now, outside the kernel's
/// ephemeral range; see the module documentation.
pub fn free_port() -> u16 {
    let span = ephemeral_low().saturating_sub(LOWEST);
    if span < LEAST_SPAN {
        return any_port();
    }
    // Processes start at different points, so two test binaries (or a
    // test and a daemon it started) rarely walk the same ports.
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        AtomicU32::new(std::process::id().wrapping_mul(7919).wrapping_add(nanos) % span)
    });
    for _ in 0..span {
        let port = LOWEST + next.fetch_add(1, Ordering::Relaxed) % span;
        let port = u16::try_from(port).expect("below the ephemeral range, so below 65536");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    any_port()
}

/// The first port of `/proc/sys/net/ipv4/ip_local_port_range` (Linux's
/// default when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Whatever `bind(0)` gives: the fallback when no range is left.
fn any_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CI failure this module fixes: a port inside the ephemeral range
    /// can be taken by an outgoing connection before the server binds it.
    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_handed_out_twice() {
        let low = ephemeral_low();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let port = free_port();
            if low.saturating_sub(LOWEST) >= LEAST_SPAN {
                assert!(
                    u32::from(port) >= LOWEST && u32::from(port) < low,
                    "port {port} is not in {LOWEST}..{low}"
                );
            }
            assert!(seen.insert(port), "port {port} handed out twice");
            TcpListener::bind(("127.0.0.1", port)).expect("the port handed out is free");
        }
    }
}
