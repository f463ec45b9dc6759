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
//! - [`door`]: what every door shares: the one accept loop, the round
//!   robin over arbiters and shards; [`accept`]: what the loop does when
//!   accept fails.

pub mod accept;
pub mod connection;
pub mod door;
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

pub use door::StopListening;
pub use lobby::{Lobby, LobbyTicket};
pub use tcp::TcpDoor;
pub use unix::{bind_socket, check_socket_path, ensure_socket_folder, BindError, Listener};
