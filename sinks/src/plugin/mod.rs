//! The plugin host: sinks loaded at run time from shared libraries.
//!
//! `[sink] type = "plugin"` names a `.so` built against `sink-sdk` (see
//! `docs/plugins.md`; the keys are in [`config`]). [`PluginFactory::load`]
//! copies it to a fresh private path, `dlopen`s the copy, checks its ABI
//! version and creates one instance to validate the `[sink.options]`; the
//! drain then gets one [`PluginInstance`] per shard, each calling through
//! the plugin's C vtable (`sink_sdk::abi`). `spillway check` runs
//! `preflight`: the same loading, one instance created, health-checked and
//! dropped.
//!
//! Choices this module makes, and why:
//!
//! - **Read before load.** A library's constructors run at `dlopen`, so a
//!   file is opened as a plugin only after [`elf`] found it to be an ELF
//!   shared object of this machine exporting the entry symbol, from its
//!   bytes alone. A real plugin still runs in the daemon's process: its
//!   constructors and its bugs are the daemon's.
//! - **Copy before load.** `dlopen` of a path already loaded returns the
//!   loaded library, so a rebuilt plugin at the same path would silently
//!   keep running its old code after a reload. Every load reads the file
//!   and, unless a library with the very same bytes is already loaded (then
//!   that one is reused), writes it to `<dir>/plugin-<file stem>-<unix_ns>.so`
//!   (created exclusively, mode 0600) and loads that. The copy is unlinked
//!   right after `dlopen`: the mapping keeps the code alive and nothing is
//!   left behind (a debugger shows the mapping as "(deleted)"; the original
//!   file has the same bytes for symbolising).
//! - **Never unload.** Unloading a library that registered thread-local
//!   destructors (any Rust `thread_local!` with a destructor, a tokio
//!   runtime, ...) can crash the process or silently not unload. A library
//!   that passed the checks stays mapped until the process exits, in a
//!   process-wide list; a reload to an unchanged file reuses it, so only a
//!   changed plugin costs another mapping. Factories and instances hold an
//!   `Arc` of the checked vtable, which is valid for `'static`.
//! - **A plugin failure restarts the instance.** A panic inside the plugin
//!   is caught at its boundary and comes back as an internal error;
//!   [`PluginInstance::deliver`] then panics on the host side (after
//!   freeing the plugin's answer) with the plugin's message. The drain's
//!   sink host catches that like any sink panic: it logs it, drops the
//!   instance (which calls the plugin's `destroy`), offers the batch again
//!   (a retry) and re-creates the instance with backoff.
//! - **Logs.** Lines a plugin writes with `sink_sdk::plugin_info!` and
//!   friends become `tracing` events with `plugin = <name>` and
//!   `module = <where in the plugin>`.

mod config;
mod elf;
mod factory;
mod instance;
mod library;
mod log;
mod options;
mod preflight;
#[cfg(test)]
mod tests;

pub use config::PluginConfig;
pub(crate) use config::PluginSettings;
pub use factory::PluginFactory;
pub use instance::PluginInstance;
pub(crate) use preflight::preflight;

use std::path::Path;
use std::sync::Arc;

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, SinkEnv, SinkType, TypeKeys};
use crate::{KeyProblem, SinkError, SinkFactory};

/// The plugin host in the registry: its name and keys here, reading and
/// checking them in [`config`], building in [`PluginFactory::load`], the
/// preflight in `preflight`.
pub static TYPE: SinkType = SinkType {
    name: "plugin",
    about: "A sink plugin: a `cdylib` built against sink-sdk, loaded at run time.",
    reference: PluginConfig::REFERENCE,
    unset: || Box::<PluginConfig>::default(),
};

impl TypeKeys for PluginConfig {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        PluginConfig::read_key(self, key, value)
    }

    /// The host's keys only; the delivery keys do not reach a plugin (it
    /// reports its own limits).
    fn check(&self, _delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(PluginConfig::check(self)?))
    }

    fn library_path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

impl CheckedSink for PluginSettings {
    fn build(&self, table: &str, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(
            PluginFactory::load_for(table, &self.path, &self.options_toml, &std::env::temp_dir())?
                .with_context(env.context(table)),
        ))
    }

    fn preflight(&self, table: &str) -> Result<Preflight, SinkError> {
        preflight(self, table)
    }
}
