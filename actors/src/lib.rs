//! spillway's actors and the messages between them.
//!
//! - [`Listener`] accepts connections and spreads them over arbiters.
//! - [`HttpIngest`] is the HTTP door: `POST /v1/records`, answered once
//!   the records are durable; [`tls`] serves the network doors' TLS.
//! - [`Connection`] decodes frames, batches records per read, writes
//!   responses in order (pipelined, bounded window).
//! - [`ShardFlusher`] owns a shard's I/O thread: group commit, no timer.
//! - [`SegmentSealer`] preallocates and seals segments beside the flusher.
//!
//! This crate may depend on the protocol, the WAB and sink-sdk; it must not
//! depend on the runtime (config files, CLI) or on any particular sink.

pub mod accept;
pub mod budget;
pub mod checker;
pub mod clock;
pub mod connection;
pub mod drain;
pub mod flusher;
pub mod frame_buffers;
pub mod histogram;
pub mod http_ingest;
pub mod idle;
pub mod listener;
pub mod responder;
pub mod sealer;
pub mod shard;
pub mod socket_dir;
pub mod stats;
pub mod tls;
pub mod transport;

pub use accept::AcceptErrors;
pub use budget::{ShardBudget, WabBudget};
pub use clock::Clock;
pub use connection::{Connection, ConnectionContext, ConnectionLimits, PeerFilter, ReadBudget};
pub use drain::{
    learned_file, Cursor, CursorConfig, CursorControl, DeliveryBoard, Drain, DrainSettings,
    DrainStats, DrainWait, InFlight, Membership, Requeue, Retention, RetentionStats, RetireDrain,
    RewindTo, SinkFigures, SinkHealth, SinkHost, SinkMaker, SinkSlot, SinkState, StartAt,
    StopDrain,
};
pub use flusher::{FlusherConfig, FlusherCore, FlusherParts, ShardFlusher, StopShard};
pub use http_ingest::{HttpIngest, HttpIngestSettings, HttpIngestStats};
pub use idle::{Evict, IdleConnections};
pub use listener::{
    bind_socket, check_socket_path, ensure_socket_folder, BindError, Listener, StopListening,
    TcpDoor,
};
pub use sealer::{sealer_channel, SealerCore, SealerMsg, SegmentSealer};
pub use shard::{
    Abandoned, AppendBatch, CommitTarget, GroupBound, PendingRecord, PendingRecords, ShardHealth,
    ShardQueue, ShardStats, Watermark,
};
pub use socket_dir::{
    check_socket_dir, group_by_gid, group_by_name, InsecureSocketDir, SocketAccess, SocketLock,
};
pub use stats::{DaemonStats, RateLimiter};
pub use tls::{TlsFiles, TlsServer};
pub use transport::Stream;
