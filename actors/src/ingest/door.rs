//! What every door shares: the one accept loop (the Unix socket's and the
//! network doors'), the round robin that spreads connections over the
//! connection arbiters and the shards, and the message that closes a door.
//!
//! A door is an actor on the system arbiter that implements [`Door`]: what
//! it does with an accepted connection is its own (peer credentials, the
//! cap, TLS, HTTP); accepting, skipping the daemon's reserved descriptors
//! and pausing while `accept()` fails ([`AcceptErrors`]) are done here.

use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix::prelude::*;

use crate::ingest::accept::{outside_reserve, AcceptErrors};
use crate::stats::DaemonStats;

/// Sent by the supervisor on shutdown: accept nothing more. The listening
/// socket closes with the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopListening;

/// A listening socket the accept loop can take connections from.
pub(crate) trait Accepting: Sized + 'static {
    /// The socket as the door is handed it (std, non-blocking).
    type Std;
    /// An accepted connection.
    type Stream: AsRawFd;
    /// Who connected.
    type Peer;
    /// Register `std` with this arbiter's runtime.
    fn adopt(std: Self::Std) -> io::Result<Self>;
    async fn take(&self) -> io::Result<(Self::Stream, Self::Peer)>;
}

impl Accepting for tokio::net::TcpListener {
    type Std = std::net::TcpListener;
    type Stream = tokio::net::TcpStream;
    type Peer = std::net::SocketAddr;

    fn adopt(std: Self::Std) -> io::Result<Self> {
        tokio::net::TcpListener::from_std(std)
    }

    async fn take(&self) -> io::Result<(Self::Stream, Self::Peer)> {
        self.accept().await
    }
}

impl Accepting for tokio::net::UnixListener {
    type Std = std::os::unix::net::UnixListener;
    type Stream = tokio::net::UnixStream;
    type Peer = tokio::net::unix::SocketAddr;

    fn adopt(std: Self::Std) -> io::Result<Self> {
        tokio::net::UnixListener::from_std(std)
    }

    async fn take(&self) -> io::Result<(Self::Stream, Self::Peer)> {
        self.accept().await
    }
}

/// A door: one accept loop, what it does with a connection its own.
pub(crate) trait Door: Actor<Context = Context<Self>> {
    type Listener: Accepting;
    /// The door's table, for the log (`"server"`, `"server.tcp"`, ...).
    const TABLE: &'static str;
    /// A connection came in (outside the descriptor reserve).
    fn on_accept(
        &mut self,
        stream: <Self::Listener as Accepting>::Stream,
        peer: <Self::Listener as Accepting>::Peer,
    );
    fn accept_errors(&mut self) -> &mut AcceptErrors;
    fn daemon_stats(&self) -> &DaemonStats;
}

/// Start accepting on `listener` (from the actor's `started`); a listener
/// the runtime cannot take stops the actor, with the reason.
pub(crate) fn start_accepting<D: Door>(
    door: &mut D,
    ctx: &mut Context<D>,
    listener: Option<<D::Listener as Accepting>::Std>,
) {
    let Some(listener) = listener else {
        return;
    };
    match D::Listener::adopt(listener) {
        Ok(l) => accept_loop(door, ctx, Rc::new(l)),
        Err(e) => {
            tracing::error!(door = D::TABLE, error = %e, "listener unusable");
            ctx.stop();
        }
    }
}

fn accept_loop<D: Door>(door: &mut D, ctx: &mut Context<D>, listener: Rc<D::Listener>) {
    let l = listener.clone();
    let fut = async move { l.take().await };
    ctx.spawn(
        fut.into_actor(door)
            .map(move |res, door: &mut D, ctx: &mut Context<D>| {
                // A socket on one of the daemon's reserved descriptors is
                // closed at once: as good as out of descriptors.
                let res = res.and_then(|(s, peer)| Ok((outside_reserve(s)?, peer)));
                match res {
                    Ok((stream, peer)) => {
                        door.accept_errors().accepted();
                        door.on_accept(stream, peer);
                        accept_loop(door, ctx, listener);
                    }
                    Err(e) => {
                        door.daemon_stats()
                            .accept_failures
                            .fetch_add(1, Ordering::Relaxed);
                        let pause = door.accept_errors().failed(&e);
                        ctx.run_later(pause, move |door, ctx| accept_loop(door, ctx, listener));
                    }
                }
            }),
    );
}

/// Hands out `items` in turn: the connection arbiters a door spreads its
/// connections over, the shards its connections are pinned to.
#[derive(Debug)]
pub(crate) struct RoundRobin<T> {
    items: Vec<T>,
    next: AtomicUsize,
}

impl<T> RoundRobin<T> {
    pub(crate) fn new(items: Vec<T>) -> Self {
        assert!(!items.is_empty(), "a round robin over nothing");
        RoundRobin {
            items,
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) fn next(&self) -> &T {
        let at = self.next.fetch_add(1, Ordering::Relaxed);
        &self.items[at % self.items.len()]
    }
}
