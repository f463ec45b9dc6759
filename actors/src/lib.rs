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
//! The folders follow a record: [`ingest`] (the doors, their listeners
//! and connections) hands records to a [`shard`] (its queue, flusher,
//! sealer, checker and the WAB byte budget), and a [`drain`] per sink and
//! shard delivers them. [`clock`], [`stats`] and [`histogram`] serve all
//! three. [`tap`] copies records to `ctl tap`'s watchers.
//!
//! This crate may depend on the protocol, the WAB and sink-sdk; it must not
//! depend on the runtime (config files, CLI) or on any particular sink.

pub mod backoff;
pub mod clock;
pub mod drain;
pub mod histogram;
pub mod ingest;
pub mod panics;
pub mod shard;
pub mod stats;
pub mod tap;

pub use backoff::{Backoff, NotBefore};
pub use clock::Clock;
pub use drain::{
    Cursor, CursorConfig, CursorControl, DeliveryBoard, Drain, DrainStats, DrainWait, Membership,
    Requeue, Retention, RetentionStats, RetireDrain, RewindTo, SinkFigures, SinkHealth, SinkHost,
    SinkSlot, SinkState, StopDrain,
};
pub use ingest::accept::AcceptErrors;
pub use ingest::connection::{Connection, ConnectionContext, ConnectionLimits, PeerFilter};
pub use ingest::http::{HttpIngest, HttpIngestSettings, HttpIngestStats};
pub use ingest::idle::{Evict, IdleConnections};
pub use ingest::read_budget::ReadBudget;
pub use ingest::socket_dir::{
    check_socket_dir, group_by_gid, group_by_name, InsecureSocketDir, SocketAccess, SocketLock,
};
pub use ingest::tls::{TlsFiles, TlsServer};
pub use ingest::transport::Stream;
pub use ingest::{
    bind_socket, check_socket_path, ensure_socket_folder, BindError, Listener, StopListening,
    TcpDoor,
};
pub use shard::budget::{ShardBudget, WabBudget};
pub use shard::flusher::{FlusherConfig, FlusherCore, FlusherParts, ShardFlusher, StopShard};
pub use shard::sealer::{sealer_channel, SealerCore, SealerMsg, SegmentSealer};
pub use shard::{
    Abandoned, AppendBatch, CommitTarget, GroupBound, PendingRecord, PendingRecords, ShardHealth,
    ShardQueue, ShardStats, Watermark,
};
pub use stats::{DaemonStats, DoorStats, RateLimiter};
pub use tap::{Tap, TapCounts, TapFilter, TapReceiver, Tapped};
