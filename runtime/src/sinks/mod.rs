//! The configured sinks, from a `[sink]` / `[sinks.NAME]` table to the
//! drains that deliver to them: `build` turns a table into the factory its
//! drains use (at start, at every reload, in `spillway check`; on a thread
//! of its own under `sink.build_timeout_ms`), `run` holds what the daemon
//! keeps per sink while it runs (its slot, its dead-letter and requeue
//! stores, its paused mark) and starts its drain on each shard. The
//! supervisor owns the running sinks; a reload adds, changes and removes
//! them through it ([`crate::supervisor::ApplySinks`]).

mod build;
mod run;

pub use build::{
    build_on_thread, build_sinks, build_timeout, probe_all, probe_on_thread, BuiltSink,
};
pub use run::{
    open_dead_letters, open_requeue, seen_in_stores, set_paused_on_disk, sinks_on_disk,
    start_drain, DeadLetterStores, DeadLetters, RequeueStores, SinkRun,
};
