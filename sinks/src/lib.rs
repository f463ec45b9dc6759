//! # spillway-sinks: the built-in sinks
//!
//! Where delivered records go: [`http`] (POST batches or single records to
//! an endpoint), [`file`] (append to a local file) and [`noop`] (count and
//! drop, for benchmarks). Each implements `sink_sdk::Sink`, the one contract
//! plugins implement too.
//!
//! The daemon turns the user's `[sink]` table ([`SinkConfig`]) into a
//! [`SinkFactory`] with [`build`], once per start or reload. The drain then
//! asks the factory for one instance per shard, and for a fresh one after
//! an instance panicked. Instances of one factory are independent or share
//! state safely through it (the file sink's single file is behind a mutex).
//!
//! This crate must not depend on the daemon (actors, runtime, WAB): it sees
//! records only as `sink_sdk::Batch`es.

pub mod config;
pub mod file;
mod framing;
pub mod http;
pub mod noop;
pub mod plugin;
#[cfg(test)]
mod test_server;

use std::sync::Arc;

use sink_sdk::{Limits, Sink};

pub use config::{SinkConfig, SinkConfigError, SinkKind};

/// Makes sink instances for one validated `[sink]` config.
pub trait SinkFactory: Send + Sync {
    /// A new instance for `shard`. Called once per shard at start, and again
    /// after an instance panicked (the old one is gone by then).
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, String>;

    /// One line for logs, e.g. `http POST https://host/path (batched, ndjson, timeout 10000 ms)`.
    fn describe(&self) -> String;
}

/// Validates `cfg`, reads what it refers to (the bearer token variable, the
/// output file) and prepares the state the instances share. An error names
/// the key (`sink.<key>`) and what is wrong; on reload it leaves the old sink
/// running.
pub fn build(cfg: &SinkConfig) -> Result<Arc<dyn SinkFactory>, String> {
    cfg.validate().map_err(|e| e.to_string())?;
    let factory: Arc<dyn SinkFactory> = match cfg.kind {
        SinkKind::Http => Arc::new(http::HttpFactory::new(cfg)?),
        SinkKind::File => Arc::new(file::FileFactory::new(cfg)?),
        SinkKind::Noop => Arc::new(noop::NoopFactory::new(limits(cfg))),
        SinkKind::Plugin => {
            let path = cfg.path.as_deref().expect("validated: plugin has a path");
            Arc::new(plugin::PluginFactory::load(path, &cfg.options_toml())?)
        }
    };
    Ok(factory)
}

/// The batch limits the drain's keys ask for.
pub(crate) fn limits(cfg: &SinkConfig) -> Limits {
    Limits {
        max_records: cfg.max_records as usize,
        max_bytes: cfg.max_bytes as usize,
    }
}
