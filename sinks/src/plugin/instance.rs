//! [`PluginInstance`]: one plugin sink instance, seen by the drain as a
//! `Sink` like any built-in one.

use sink_sdk::abi::host::Instance;
use sink_sdk::{Batch, Health, Limits, Outcome, Sink};

use super::log::ShardScope;

/// One instance of a sink plugin; calls through the plugin's vtable and
/// destroys the plugin-side instance when dropped.
#[derive(Debug)]
pub struct PluginInstance {
    inner: Instance,
    /// The shard it delivers for (`None`: made by `check`): the `shard`
    /// field of what the plugin logs during its calls.
    shard: Option<u32>,
}

impl PluginInstance {
    pub(crate) fn new(inner: Instance, shard: Option<u32>) -> PluginInstance {
        PluginInstance { inner, shard }
    }

    /// [`Sink::deliver`] without the unwind: the plugin's answer, or how
    /// it failed (a panic at its boundary, an answer that breaks the ABI).
    /// For `spillway plugin test`.
    pub fn try_deliver(
        &mut self,
        batch: &Batch<'_>,
    ) -> Result<Outcome, sink_sdk::abi::host::PluginFailure> {
        let _scope = ShardScope::enter(self.shard);
        self.inner.deliver(batch)
    }

    /// Whether the plugin is told who delivers (`SinkContext`: it exports
    /// the ABI extension).
    pub fn takes_context(&self) -> bool {
        self.inner.plugin().takes_context()
    }

    /// The plugin's sink-sdk version and ABI version.
    pub fn built_with(&self) -> (String, u32) {
        let p = self.inner.plugin();
        (p.sdk_version().to_string(), p.abi_version())
    }
}

impl Sink for PluginInstance {
    fn name(&self) -> &str {
        self.inner.plugin().name()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }

    /// # Panics
    /// When the plugin reports an internal error (it panicked: the panic was
    /// caught at its boundary) or breaks the ABI. The plugin's answer is
    /// freed first. The drain catches the panic, offers the batch again and
    /// replaces this instance, which is what such a failure needs.
    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let _scope = ShardScope::enter(self.shard);
        match self.inner.deliver(batch) {
            Ok(outcome) => outcome,
            // Resumed, not raised: the plugin said where it panicked, and
            // no hook in the daemon prints this (the host that catches it
            // logs it once, with the shard).
            Err(failure) => {
                let text = failure.to_string();
                let text = text
                    .strip_prefix(sink_sdk::abi::DELIVER_PANICKED)
                    .map_or(text.clone(), str::to_string);
                std::panic::resume_unwind(Box::new(text))
            }
        }
    }

    fn health_check(&mut self) -> Health {
        let _scope = ShardScope::enter(self.shard);
        self.inner.health_check()
    }
}
