//! The configured sink, built into the maker the drains use: at start
//! ([`crate::daemon`]) and at every reload ([`crate::reload`]), the one
//! place a `[sink]` table becomes sink instances.

use std::sync::Arc;

use spillway_actors::SinkMaker;

use crate::config::Config;

/// Build the configured sink into the maker the drains use.
pub fn sink_maker(cfg: &Config) -> Result<(SinkMaker, String), String> {
    let factory = spillway_sinks::build(&cfg.sink).map_err(|e| format!("sink: {e}"))?;
    let description = factory.describe();
    let maker: SinkMaker = Arc::new(move |shard| factory.create(shard));
    Ok((maker, description))
}
