//! Blocking producer client for spillway — or any weir v1 daemon — over a
//! Unix socket, or spillway's TCP door ([`Client::connect_tcp`]; over TLS
//! with the `tls` feature, `Client::connect_tls`).
//!
//! [`Client`] sends one request at a time and waits for its answer;
//! [`Client::pipeline`] keeps a window of requests in flight and hands the
//! answers back in request order. An ack means the record is durable at the
//! requested [`Tier`]: `Sync`/`Batched` after `fdatasync`, `Buffered` once in
//! the page cache. A refusal comes back as [`Error::Nack`]; after a retryable
//! reason ([`Error::is_retryable`]) the connection stays open and the
//! request may be resent, after any other the daemon closes the connection.
//!
//! ```no_run
//! use spillway_client::{Client, Reply, Tier};
//!
//! # fn main() -> Result<(), spillway_client::Error> {
//! // Every read and write times out (10 s unless `Client::connect_with`).
//! let mut client = Client::connect("/run/spillway/spillway.sock")?;
//! client.health()?;
//!
//! // One record, acked once fdatasync has returned.
//! client.push(Tier::Sync, b"order 1042 shipped")?;
//!
//! // Several records in one frame (spillway extension).
//! let acked = client.push_batch(Tier::Batched, &[&b"a"[..], b"b", b"c"])?;
//! assert_eq!(acked, 3);
//!
//! // Up to 64 requests in flight; answers come back in order.
//! let mut pipeline = client.pipeline(64);
//! for i in 0..1000u32 {
//!     pipeline.push(Tier::Buffered, &i.to_le_bytes())?;
//! }
//! while pipeline.outstanding() > 0 {
//!     match pipeline.recv() {
//!         Ok(Reply::Ack) => {}
//!         Err(e) if e.is_retryable() => { /* resend that record later */ }
//!         Err(e) => return Err(e),
//!         Ok(other) => unreachable!("{other:?}"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod client;
mod conn;
mod error;
mod pipeline;
mod reply;
mod stream;

#[cfg(feature = "tls")]
pub use client::tls_config;
pub use client::{Client, Options, DEFAULT_TIMEOUT};
pub use error::Error;
pub use pipeline::Pipeline;
pub use reply::Reply;
pub use spillway_protocol::{NackReason, Tier};
