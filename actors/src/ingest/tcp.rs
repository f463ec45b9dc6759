//! The TCP door (`[server.tcp]`): the wire protocol over TCP, with TLS
//! (and optionally mutual TLS and allowed names, [`crate::ingest::tls`]) or, on a
//! loopback address only, in the clear. Same connection actor, tiers,
//! pipelining, window and limits as the Unix socket; `connections_max` is
//! this door's own.
//!
//! The TLS handshake runs on the connection's arbiter, not on the accept
//! loop, so a slow client holds only its own slot; it must finish within
//! `server.tcp.handshake_timeout_ms`. Until it has, the connection waits
//! in the door's [`Lobby`]: at `connections_max` a newcomer evicts the
//! connection that has waited there longest, and is refused (closed at
//! once) only when every connection has finished its handshake. A client
//! that connects and sends nothing can then no longer keep producers out.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use actix::prelude::*;

use super::{Lobby, LobbyTicket, StopListening};
use crate::ingest::accept::AcceptErrors;
use crate::ingest::connection::{Connection, ConnectionContext, NEXT_CONNECTION_ID};
use crate::ingest::door::{start_accepting, Door, RoundRobin};
use crate::ingest::tls::TlsServer;
use crate::ingest::transport::Stream;
use crate::shard::ShardQueue;
use crate::stats::DaemonStats;

/// Accepts on the TCP door. Runs on the system arbiter.
pub struct TcpDoor {
    listener: Option<std::net::TcpListener>,
    /// This door's: its own count of open connections, the daemon's stats.
    shared: Arc<ConnectionContext>,
    arbiters: RoundRobin<ArbiterHandle>,
    shards: RoundRobin<Arc<ShardQueue>>,
    connections_max: usize,
    tls: Option<Arc<TlsServer>>,
    /// Connections still in their TLS handshake: evicted, oldest first,
    /// to let a newcomer in at `connections_max`.
    lobby: Arc<Lobby>,
    accept_errors: AcceptErrors,
}

impl TcpDoor {
    pub fn new(
        listener: std::net::TcpListener,
        shared: Arc<ConnectionContext>,
        arbiters: Vec<ArbiterHandle>,
        shards: Vec<Arc<ShardQueue>>,
        connections_max: usize,
        tls: Option<Arc<TlsServer>>,
    ) -> Self {
        TcpDoor {
            listener: Some(listener),
            shared,
            arbiters: RoundRobin::new(arbiters),
            shards: RoundRobin::new(shards),
            connections_max,
            tls,
            lobby: Arc::new(Lobby::default()),
            accept_errors: AcceptErrors::new("tcp"),
        }
    }

    fn on_accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        let stats = &self.shared.stats;
        let live = self.shared.live.fetch_add(1, Ordering::Relaxed) + 1;
        if live > self.connections_max && !self.evict_unfinished_handshake(peer) {
            self.shared.live.fetch_sub(1, Ordering::Relaxed);
            stats
                .tcp
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            if stats.log_limiter.allow() {
                tracing::warn!(%peer, connections_max = self.connections_max, "TCP connection refused: server.tcp.connections_max reached");
            }
            return;
        }
        stats
            .tcp
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let std_stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                self.shared.live.fetch_sub(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "could not detach an accepted TCP connection");
                return;
            }
        };
        let id = NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed);
        let arbiter = self.arbiters.next();
        let shard = self.shards.next().clone();
        let (shared, tls) = (self.shared.clone(), self.tls.clone());
        // In the lobby from the accept on, so the next accept already sees it.
        let ticket = self.lobby.enter();
        let started = arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                match open(std_stream, peer, tls.as_deref(), &shared, &ticket).await {
                    Some(stream) => {
                        Connection::new(id, stream, shard, shared).start();
                    }
                    None => {
                        shared.live.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            });
        });
        if !started {
            tracing::error!(conn = id, "connection arbiter is gone; connection dropped");
        }
    }
}

impl TcpDoor {
    /// At `connections_max`: close the connection that has been in its
    /// TLS handshake longest, if there is one (see [`Lobby`]). The new
    /// connection takes its place; until the evicted one is gone
    /// (microseconds) one more is open than the cap.
    fn evict_unfinished_handshake(&self, peer: SocketAddr) -> bool {
        if !self.lobby.evict_oldest() {
            return false;
        }
        let stats = &self.shared.stats;
        stats
            .tcp
            .connections_evicted
            .fetch_add(1, Ordering::Relaxed);
        if stats.log_limiter.allow() {
            tracing::info!(%peer, connections_max = self.connections_max, "server.tcp.connections_max reached: closed the connection longest in its TLS handshake to let a new one in");
        }
        true
    }
}

/// Register the socket on this arbiter and, with TLS, shake hands (under
/// `server.tcp.handshake_timeout_ms`, in the lobby); `None` when it fails
/// (counted, logged) or the door evicted the connection meanwhile.
async fn open(
    std_stream: std::net::TcpStream,
    peer: SocketAddr,
    tls: Option<&TlsServer>,
    shared: &ConnectionContext,
    ticket: &LobbyTicket,
) -> Option<Stream> {
    let stream = tokio::select! {
        biased;
        stream = shake_hands(std_stream, peer, tls, shared) => stream,
        () = ticket.evicted() => None,
    };
    // A claim that came after the handshake ended still wins: the door
    // has let another connection in on this one's slot.
    stream.filter(|_| ticket.leave())
}

async fn shake_hands(
    std_stream: std::net::TcpStream,
    peer: SocketAddr,
    tls: Option<&TlsServer>,
    shared: &ConnectionContext,
) -> Option<Stream> {
    let tcp = match tokio::net::TcpStream::from_std(std_stream) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "could not register a TCP connection on its arbiter");
            return None;
        }
    };
    // Acks are small and each one waits on nobody: no Nagle delay.
    let _ = tcp.set_nodelay(true);
    match tls {
        None => Some(Stream::Tcp(tcp)),
        Some(tls) => tls
            .accept(tcp, peer, &shared.stats.tcp.tls)
            .await
            .map(|s| Stream::Tls(Box::new(s))),
    }
}

impl Actor for TcpDoor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let listener = self.listener.take();
        start_accepting(self, ctx, listener);
    }
}

impl Door for TcpDoor {
    type Listener = tokio::net::TcpListener;
    const TABLE: &'static str = "server.tcp";

    fn on_accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        TcpDoor::on_accept(self, stream, peer)
    }

    fn accept_errors(&mut self) -> &mut AcceptErrors {
        &mut self.accept_errors
    }

    fn daemon_stats(&self) -> &DaemonStats {
        &self.shared.stats
    }
}

impl Handler<StopListening> for TcpDoor {
    type Result = ();
    fn handle(&mut self, _: StopListening, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
