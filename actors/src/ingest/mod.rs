//! Ingest: the doors that take records from producers, and what they
//! share.
//!
//! - [`unix`]: the Unix socket (its folder's safety in [`socket_dir`],
//!   peer credentials, idle eviction at the cap in [`idle`]);
//! - [`tcp`]: TCP with TLS ([`tls`]; mutual TLS and allowed names
//!   optional), or in the clear on loopback only;
//! - [`http`]: the HTTP door (`POST /v1/records`);
//! - [`lobby`]: the network doors' connections not yet shown to be
//!   producers (a TLS handshake unfinished, an HTTP connection between
//!   requests), the oldest of which gives way to a newcomer at the cap;
//! - [`connection`]: the connection actor of the wire-protocol doors, its
//!   limits and admission, with [`responder`] (responses in order),
//!   [`transport`] (the byte streams), [`frame_buffers`] and
//!   [`read_budget`] (the read-buffer bytes every door shares);
//! - [`accept`]: what an accept loop does when accept fails; the loop of
//!   the network doors is below.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use actix::prelude::*;

use crate::ingest::accept::AcceptErrors;
use crate::stats::DaemonStats;

pub mod accept;
pub mod connection;
pub mod frame_buffers;
pub mod http;
pub mod idle;
pub mod lobby;
pub mod read_budget;
pub mod responder;
pub mod socket_dir;
pub mod tcp;
pub mod tls;
pub mod transport;
pub mod unix;

pub use lobby::{Lobby, LobbyTicket};
pub use tcp::TcpDoor;
pub use unix::{bind_socket, check_socket_path, ensure_socket_folder, BindError, Listener};

/// Sent by the supervisor on shutdown: accept nothing more. The listening
/// socket closes with the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopListening;

/// A network door (the TCP door, the HTTP door): one accept loop, what it
/// does with a connection its own.
pub(crate) trait TcpAccept: Actor<Context = Context<Self>> {
    /// A connection came in (outside the descriptor reserve).
    fn on_accept(&mut self, stream: tokio::net::TcpStream, peer: SocketAddr);
    fn accept_errors(&mut self) -> &mut AcceptErrors;
    fn daemon_stats(&self) -> &DaemonStats;
}

/// Start accepting on `listener` (from the actor's `started`); a listener
/// the runtime cannot take stops the actor, with the reason.
pub(crate) fn start_accepting<A: TcpAccept>(
    act: &mut A,
    ctx: &mut Context<A>,
    listener: Option<std::net::TcpListener>,
    door: &str,
) {
    let Some(listener) = listener else {
        return;
    };
    match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => accept_loop(act, ctx, Rc::new(l)),
        Err(e) => {
            tracing::error!(door, error = %e, "listener unusable");
            ctx.stop();
        }
    }
}

fn accept_loop<A: TcpAccept>(
    act: &mut A,
    ctx: &mut Context<A>,
    listener: Rc<tokio::net::TcpListener>,
) {
    let l = listener.clone();
    let fut = async move { l.accept().await };
    ctx.spawn(
        fut.into_actor(act)
            .map(move |res, act: &mut A, ctx: &mut Context<A>| {
                // A socket on one of the daemon's reserved descriptors is closed
                // at once, as the Unix listener does.
                let res = res
                    .and_then(|(s, peer)| Ok((crate::ingest::accept::outside_reserve(s)?, peer)));
                match res {
                    Ok((stream, peer)) => {
                        act.accept_errors().accepted();
                        act.on_accept(stream, peer);
                        accept_loop(act, ctx, listener);
                    }
                    Err(e) => {
                        act.daemon_stats()
                            .accept_failures
                            .fetch_add(1, Ordering::Relaxed);
                        let pause = act.accept_errors().failed(&e);
                        ctx.run_later(pause, move |act, ctx| accept_loop(act, ctx, listener));
                    }
                }
            }),
    );
}
