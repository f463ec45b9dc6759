//! # spillway-sinks: the built-in sinks
//!
//! Where delivered records go: [`http`] (POST batches or single records to
//! an endpoint), [`file`] (append to a local file) and [`noop`] (count and
//! drop, for benchmarks). Each implements `sink_sdk::Sink`, the one contract
//! plugins implement too.
//!
//! Every sink has the same rooms: a `config` module with the keys the user
//! writes (their defaults, ranges and checks), and the sink itself.
//! [`config`] is the `[sink]` table: it dispatches on `type` and holds the
//! drain's keys, which every type shares.
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
pub mod file;
mod framing;
pub mod http;
pub mod noop;
pub mod plugin;
pub mod regular_file;

use std::sync::Arc;

use sink_sdk::Sink;

use config::SinkSettings;
pub use config::{DrainConfig, SinkConfig, SinkConfigError, SinkKind, TypeConfig};

/// Makes sink instances for one checked `[sink]` config.
pub trait SinkFactory: Send + Sync {
    /// A new instance for `shard`. Called once per shard at start, and again
    /// after an instance panicked (the old one is gone by then).
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, String>;

    /// One line for logs, e.g. `http POST https://host/path (batched, ndjson, timeout 10000 ms)`.
    fn describe(&self) -> String;
}

/// Builds the sink of a checked `cfg`: reads what it refers to (the bearer
/// token variable, the output file, the plugin library) and prepares the
/// state the instances share. Does not check `cfg` again; a table that
/// failed its check is refused with that problem. An error names the key
/// (`sink.<key>`) and what is wrong; on reload it leaves the old sink
/// running.
pub fn build(cfg: &SinkConfig) -> Result<Arc<dyn SinkFactory>, String> {
    let settings = cfg.settings().map_err(|e| e.to_string())?;
    let factory: Arc<dyn SinkFactory> = match settings {
        SinkSettings::Http(http) => Arc::new(http::HttpFactory::new(http)?),
        SinkSettings::File(file) => Arc::new(file::FileFactory::new(file)?),
        SinkSettings::Noop(limits) => Arc::new(noop::NoopFactory::new(*limits)),
        SinkSettings::Plugin(plugin) => Arc::new(plugin::PluginFactory::load(
            &plugin.path,
            &plugin.options_toml,
        )?),
    };
    Ok(factory)
}

/// What `spillway check` asks of a checked `cfg`, short of [`build`]ing
/// it: for `http`, the bearer token variable is read, the URL's host
/// resolved and the health check tried; for `file`, the file can be opened
/// for appending or created (nothing is left behind); for `plugin`, the
/// library is loaded and one instance created from `[sink.options]` and
/// health-checked (what the plugin's `create` opens, it opens). `Ok`
/// carries the warnings: a sink that does not answer its health check,
/// which the daemon would start and retry. An error names the key
/// (`sink.<key>`) and what is wrong.
pub fn preflight(cfg: &SinkConfig) -> Result<Vec<String>, String> {
    match cfg.settings().map_err(|e| e.to_string())? {
        SinkSettings::Http(http) => http::preflight(http),
        SinkSettings::File(file) => file::preflight(file).map(|()| Vec::new()),
        SinkSettings::Noop(_) => Ok(Vec::new()),
        SinkSettings::Plugin(plugin) => plugin::preflight(plugin),
    }
}
