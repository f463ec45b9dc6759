//! # spillway-test-http: one loopback HTTP receiver for tests and the bench
//!
//! The HTTP sink's unit tests, the end-to-end delivery tests and the
//! bench's end-to-end scenarios all point spillway at the same kind of
//! server: a [`Receiver`] on `127.0.0.1:0`, HTTP/1.1 by hyper on a thread
//! of its own. A [`Handler`] (a closure) reads each [`Request`] and says
//! the [`Reply`]: any status, headers and body, sent after an optional
//! delay. The receiver keeps what the tests assert on: every request
//! (method, path, headers, body, arrival time, connection, the status it
//! got), how many requests and connections it saw, how many were being
//! answered at once, and how many it refused. A closed gate holds every
//! request after its body was read, so a backlog can build up and its
//! delivery be timed. [`free_port`] picks a loopback port for a server a
//! test starts itself (a daemon's door, a nats-server), outside the range
//! the kernel gives outgoing connections. [`TlsFiles`] makes a throw-away
//! CA and a server certificate for the servers tests run with TLS.
//! [`cargo_command`] is the `cargo` for a build a test starts (the daemon,
//! a plugin), without the variables cargo sets for a test process.
//!
//! This crate is test equipment: the daemon's own code never depends on it
//! (the bench, which the binary links behind its `bench` feature, does).

mod cargo;
mod certs;
mod exchange;
pub mod port;
mod receiver;
mod serve;

pub use cargo::cargo_command;
pub use certs::TlsFiles;
pub use exchange::{Handler, Reply, Request};
pub use hyper::HeaderMap;
pub use port::free_port;
pub use receiver::{Builder, Receiver};
