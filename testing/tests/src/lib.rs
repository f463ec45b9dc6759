//! Shared helpers for spillway's end-to-end tests, one module per concern.
//!
//! The tests start the real `spillway` binary (`target/release/spillway`,
//! found next to the test executable) on a private temporary folder, talk
//! to it over its Unix socket with `spillway_client` or with hand-crafted
//! frames, kill it, restart it, and read its write-ahead buffer back with
//! the segment reader of `spillway_wab`.
//!
//! - [`daemon`]: [`Daemon`], one daemon process with its own config,
//!   socket and data folder; its `ctl stats`.
//! - [`run`]: the binary run as a command (`ctl`, `check`, `run`) and
//!   waiting on what it does.
//! - [`frames`] and [`raw_conn`]: frames built by hand, and a bare socket
//!   that reads one response frame at a time.
//! - [`producers`]: producers pushing tagged records, and the check of what
//!   they were told against what was stored.
//! - [`procfs`]: what `/proc` says of a process.
//! - [`receiver`]: the loopback HTTP receiver the delivery tests' sinks
//!   point at; [`disk`]: a small tmpfs, a full disk, a proxy to cut;
//!   [`plugins`]: the example plugins built, C plugins compiled, the SQL
//!   servers; [`http`] and [`tls`]: an HTTP/1.1 client and TLS clients
//!   with their certificates.
//!
//! The modules of the first list are re-exported here, so a test file
//! writes `use spillway_tests::*;`; the others are named by path.

use std::time::Duration;

pub use spillway_client::{Client, Error as ClientError, NackReason, Pipeline, Reply, Tier};
pub use spillway_protocol::{decode_response, encode_frame, Response};
pub use spillway_test_http::free_port;
/// The NATS JetStream cluster of the NATS sink's tests.
pub use spillway_test_kafka as kafka;
pub use spillway_test_nats as nats;
pub use spillway_wab::StoredRecord;

pub mod daemon;
pub mod disk;
pub mod frames;
pub mod http;
pub mod plugins;
pub mod procfs;
pub mod producers;
pub mod raw_conn;
pub mod receiver;
pub mod run;
pub mod tls;

pub use daemon::*;
pub use frames::*;
pub use procfs::*;
pub use producers::*;
pub use raw_conn::*;
pub use run::*;

/// Longest a daemon may take to start answering health checks.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest a daemon may take to exit after SIGTERM (a liveness bound only).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// The default sink of test daemons: nothing listens there, so no record
/// is ever confirmed (and deleted from the WAB).
pub const HELD_SINK_URL: &str = "http://127.0.0.1:1/spillway-tests-held-sink";
/// Read/write timeout on test sockets: an upper bound, never a pacing device.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
