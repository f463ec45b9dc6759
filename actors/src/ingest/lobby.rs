//! The lobby of a network door: its connections that have not shown yet
//! that a producer is behind them, so that at the door's `connections_max`
//! the oldest of them gives way to a newcomer rather than the newcomer
//! being refused. Without it, a client that connects and never finishes
//! its TLS handshake, or an idle HTTP keep-alive connection, held a slot
//! until its timeout, and a flood of them kept every producer out.
//!
//! Who waits in the lobby: on the TCP door, a connection whose TLS
//! handshake has not finished (it leaves once it has, for good: the wire
//! connection then holds its slot as any producer's does); on the HTTP
//! door, a connection waiting for its first request or between two (its
//! TLS handshake included). A connection whose request is being answered
//! is out of the lobby and is never evicted. Each door bounds the time
//! in the lobby itself (`server.tcp.handshake_timeout_ms`,
//! `server.http.idle_timeout_ms`), so the lobby holds no more than the
//! door's connections, none of them for long.
//!
//! Each connection's state is an [`IdleMark`], as on the Unix socket
//! ([`crate::ingest::idle`]): idle since when, busy, or claimed. The door picks the
//! connection in the lobby longest and claims it by a compare-exchange; a
//! claimed connection closes (its [`Notify`] wakes the task serving it)
//! without taking in anything more, and a connection leaving the lobby
//! learns from the mark whether it was claimed first. Unlike the Unix
//! socket there is no minimum wait before a connection may be evicted: a
//! flood connects faster than any such wait, and a producer in the lobby
//! is gone from it within a round trip or two, long before the door has
//! taken `connections_max` newer ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use crate::ingest::idle::{IdleMark, EVICT_TRIES};

struct Seat {
    mark: Arc<IdleMark>,
    close: Arc<Notify>,
}

/// One door's lobby, shared by its accept loop and its connections.
pub struct Lobby {
    epoch: Instant,
    seats: Mutex<HashMap<u64, Seat>>,
    next_id: AtomicU64,
}

impl Default for Lobby {
    fn default() -> Self {
        Lobby {
            epoch: Instant::now(),
            seats: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
        }
    }
}

impl Lobby {
    /// Now, as an idle mark (never 0, which means busy).
    fn now(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as u64).saturating_add(1)
    }

    /// A connection was accepted: it waits in the lobby from now until
    /// its ticket says otherwise, and leaves it when the ticket drops.
    pub fn enter(self: &Arc<Self>) -> LobbyTicket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mark = Arc::new(IdleMark::default());
        mark.set_idle(self.now());
        let close = Arc::new(Notify::new());
        self.seats.lock().unwrap().insert(
            id,
            Seat {
                mark: mark.clone(),
                close: close.clone(),
            },
        );
        LobbyTicket {
            lobby: self.clone(),
            id,
            mark,
            close,
        }
    }

    /// Claim the connection in the lobby longest and tell it to close;
    /// false when there is none (every connection is busy).
    pub fn evict_oldest(&self) -> bool {
        let seats = self.seats.lock().unwrap();
        let mut waiting: Vec<(u64, u64)> = seats
            .iter()
            .filter_map(|(id, s)| Some((s.mark.idle_since()?, *id)))
            .collect();
        waiting.sort_unstable();
        for (since, id) in waiting.into_iter().take(EVICT_TRIES) {
            let seat = &seats[&id];
            if seat.mark.claim(since) {
                // A stored permit: the task sees it even if it is not
                // waiting on it right now.
                seat.close.notify_one();
                return true;
            }
        }
        false
    }

    /// Connections registered (in the lobby or not), for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.seats.lock().unwrap().len()
    }
}

/// One connection's place in its door's lobby.
pub struct LobbyTicket {
    lobby: Arc<Lobby>,
    id: u64,
    mark: Arc<IdleMark>,
    close: Arc<Notify>,
}

impl LobbyTicket {
    /// Back in the lobby (an HTTP connection whose answer is written).
    pub fn wait(&self) {
        self.mark.set_idle(self.lobby.now());
    }

    /// Out of the lobby: a request came in, or the handshake finished.
    /// False when the door claimed the connection first: it must then
    /// close without taking in anything more.
    pub fn leave(&self) -> bool {
        !self.mark.set_busy()
    }

    /// Resolves once the door has claimed this connection.
    pub async fn evicted(&self) {
        self.close.notified().await
    }
}

impl Drop for LobbyTicket {
    fn drop(&mut self) {
        self.lobby.seats.lock().unwrap().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_connection_is_evicted_and_a_busy_one_never() {
        let lobby = Arc::new(Lobby::default());
        let first = lobby.enter();
        let second = lobby.enter();
        let third = lobby.enter();
        assert!(first.leave(), "a request came in on the first");
        assert!(lobby.evict_oldest());
        assert!(!second.leave(), "the second, oldest waiting, was claimed");
        assert!(third.leave());
        assert!(!lobby.evict_oldest(), "nobody is waiting");
        first.wait();
        assert!(lobby.evict_oldest());
        assert!(!first.leave(), "back in the lobby, it can be claimed");
        drop((first, second, third));
        assert_eq!(lobby.len(), 0);
    }

    #[tokio::test]
    async fn a_claim_wakes_the_connection_even_before_it_waits() {
        let lobby = Arc::new(Lobby::default());
        let t = lobby.enter();
        assert!(lobby.evict_oldest());
        tokio::time::timeout(std::time::Duration::from_secs(5), t.evicted())
            .await
            .expect("the claim's permit was kept");
    }
}
