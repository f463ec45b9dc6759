//! The doors that speak the wire protocol, one room each, sharing the
//! connection actor ([`crate::Connection`]), its limits and admission:
//!
//! - [`unix`]: the Unix socket (its folder's safety, peer credentials,
//!   idle eviction at the cap);
//! - [`tcp`]: TCP with TLS (mutual TLS and allowed names optional), or in
//!   the clear on loopback only.
//!
//! The HTTP door is a room of its own ([`crate::http_ingest`]).

use actix::prelude::*;

pub mod tcp;
pub mod unix;

pub use tcp::TcpDoor;
pub use unix::{bind_socket, check_socket_path, ensure_socket_folder, BindError, Listener};

/// Sent by the supervisor on shutdown: accept nothing more. The listening
/// socket closes with the actor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopListening;
