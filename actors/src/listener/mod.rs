//! The doors that speak the wire protocol, one room each, sharing the
//! connection actor ([`crate::Connection`]), its limits and admission:
//!
//! - [`unix`]: the Unix socket (its folder's safety, peer credentials,
//!   idle eviction at the cap);
//! - [`tcp`]: TCP with TLS (mutual TLS and allowed names optional), or in
//!   the clear on loopback only;
//! - [`lobby`]: the network doors' connections not yet shown to be
//!   producers (a TLS handshake unfinished, an HTTP connection between
//!   requests), the oldest of which gives way to a newcomer at the cap.
//!
//! The HTTP door is a room of its own ([`crate::http_ingest`]).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use actix::prelude::*;

use crate::accept::AcceptErrors;
use crate::stats::DaemonStats;

pub mod lobby;
pub mod tcp;
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
                let res = res.and_then(|(s, peer)| Ok((crate::accept::outside_reserve(s)?, peer)));
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
