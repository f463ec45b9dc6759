//! # spillway-sinks: the built-in sinks
//!
//! Where delivered records go: [`http`] (POST batches or single records to
//! an endpoint), [`file`] (append to a local file), [`nats`] (publish to a
//! NATS JetStream stream, once) and [`noop`] (count and drop, for
//! benchmarks). Each implements `sink_sdk::Sink`, the one contract
//! plugins implement too.
//!
//! Every sink has the same rooms: a `config` module with the keys the user
//! writes (their defaults, ranges and checks), and the sink itself.
//! [`registry`] lists the types, one line each; [`config`] is a sink table:
//! it looks `type` up in the registry and holds the delivery keys, which
//! every type shares; [`error`] holds the errors, which name the key with
//! its table.
//!
//! The daemon turns the user's `[sink]` table ([`SinkConfig`], checked once
//! when it was read) into a [`SinkFactory`] with [`build`], once per start
//! or reload. The drain then asks the factory for one instance per shard,
//! and for a fresh one after an instance panicked. Instances of one factory are independent or share
//! state safely through it (the file sink's single file is behind a mutex).
//!
//! `spillway check` asks [`preflight`] instead: it builds what it can of
//! the sink without creating anything that would stay behind and without
//! delivering, and tells which key is wrong.
//!
//! This crate must not depend on the daemon (actors, runtime, WAB): it sees
//! records only as `sink_sdk::Batch`es.

pub mod config;
pub mod declare;
pub mod error;
pub mod file;
mod framing;
pub mod http;
pub mod kafka;
pub mod keys;
pub mod nats;
pub mod noop;
pub mod plugin;
mod reference;
pub mod registry;
pub mod regular_file;
pub mod sink_type;
pub mod suggest;

use std::sync::Arc;

pub use sink_sdk::delivery::{CreateError, SinkFactory};

pub use config::{DeliveryConfig, InFlight, OnLag, SinkConfig, StartAt, TypeConfig, DEFAULT_TABLE};
pub use error::{KeyProblem, SinkConfigError, SinkError};
pub use reference::reference_tables;
pub use registry::{CheckedSink, SinkType, TypeKeys, SINK_TYPES};
pub use sink_type::{Preflight, ReadBack, SinkEnv};

/// Builds the sink of a checked `cfg`: reads what it refers to (the bearer
/// token variable, the output file, the plugin library) and prepares the
/// state the instances share. Does not check `cfg` again; a table that
/// failed its check is refused with that problem. An error names the key
/// in `cfg`'s table (`sink.<key>`, `sinks.NAME.<key>`) and what is wrong;
/// on reload it leaves the old sink running.
pub fn build(cfg: &SinkConfig, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
    cfg.settings()?.build(cfg.table(), env)
}

/// What `spillway check` asks of a checked `cfg`, short of [`build`]ing
/// it: for `http`, the bearer token variable is read, the URL's host
/// resolved and the health check tried; for `file`, the file can be opened
/// for appending or created (nothing is left behind); for `plugin`, the
/// library is loaded and one instance created from `[sink.options]` and
/// health-checked (what the plugin's `create` opens, it opens). `Ok`
/// carries the warnings: a sink that does not answer its health check,
/// which the daemon would start and retry. An error names the key in
/// `cfg`'s table and what is wrong.
pub fn preflight(cfg: &SinkConfig) -> Result<Preflight, SinkError> {
    cfg.settings()?.preflight(cfg.table())
}

/// The last `limit` records sink `cfg`'s downstream holds (`ctl sink
/// tail`); an error names the key, or says that this type cannot be read
/// back.
pub fn read_back(cfg: &SinkConfig, limit: usize) -> Result<Vec<ReadBack>, SinkError> {
    let settings = cfg.settings()?;
    settings
        .read_back(cfg.table(), limit)
        .unwrap_or_else(|| {
            Err(SinkError::Build {
                reason: format!(
                    "{}: spillway reads back only nats sinks (a JetStream stream) and kafka sinks (a topic); use the downstream's own tools for this one",
                    cfg.table()
                ),
            })
        })
}

/// The options a plugin sink's library declares (`spillway schema
/// --config`): the library is loaded, no instance is created. `None` for a
/// sink of another type, or a plugin that declares nothing.
pub fn declared_options(
    cfg: &SinkConfig,
) -> Result<Option<&'static [sink_sdk::keys::Key]>, SinkError> {
    let Some(path) = cfg.plugin_path() else {
        return Ok(None);
    };
    let factory = plugin::PluginFactory::open_in(path, "", &std::env::temp_dir())
        .map_err(|e| SinkError::key(cfg.table(), "path", e))?;
    Ok(factory.options())
}
