//! [`PluginFactory`]: one loaded plugin and the options its instances are
//! created with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sink_sdk::abi::host::Plugin;
use sink_sdk::abi::{HostApi, EXTENSION_SYMBOL};
use sink_sdk::keys::Key;
use sink_sdk::{Sink, SinkContext};

use super::instance::PluginInstance;
use super::library;
use super::log::ShardScope;
use crate::DEFAULT_TABLE;
use crate::{CreateError, SinkConfigError, SinkEnv, SinkError, SinkFactory};

/// Makes instances of a sink plugin, all with the same options.
pub struct PluginFactory {
    plugin: Arc<Plugin>,
    /// Given to every instance's `create`; lives as long as the process.
    host: &'static HostApi,
    /// The `[sink.options]` table as TOML text, passed to every `create`.
    options_toml: String,
    /// The file named in the config (for messages).
    source: PathBuf,
    /// Who creates the instances (told to a plugin that takes it).
    context: SinkContext,
    /// The options the plugin describes (`None`: it describes none).
    options: Option<&'static [Key]>,
}

impl PluginFactory {
    /// Loads the plugin at `path` through a private copy in the system's
    /// temporary folder; see [`PluginFactory::load_in`].
    pub fn load(path: &Path, options_toml: &str) -> Result<PluginFactory, SinkError> {
        Self::load_in(path, options_toml, &std::env::temp_dir())
    }

    /// Loads the plugin at `path`: copies it into `copy_dir` (which must be
    /// on a filesystem that allows executable mappings; the copy is removed
    /// once loaded), checks its ABI version, and creates one instance with
    /// `options_toml` to validate the options. A reload of an unchanged
    /// file reuses the library already loaded.
    ///
    /// Errors name the file (a missing entry symbol, an ABI mismatch naming
    /// both versions) or the plugin (its `create` error, verbatim).
    pub fn load_in(
        path: &Path,
        options_toml: &str,
        copy_dir: &Path,
    ) -> Result<PluginFactory, SinkError> {
        Self::load_for(DEFAULT_TABLE, path, options_toml, copy_dir)
    }

    /// [`PluginFactory::load_in`] for the sink of `table` (`sink`,
    /// `sinks.NAME`): an option the plugin's description refuses is named
    /// in that table.
    pub(crate) fn load_for(
        table: &str,
        path: &Path,
        options_toml: &str,
        copy_dir: &Path,
    ) -> Result<PluginFactory, SinkError> {
        let factory = Self::open_in(path, options_toml, copy_dir)
            .map_err(|reason| SinkError::Plugin { reason })?;
        // Validate the options now, so a bad config fails the start or the
        // reload rather than every shard: against the plugin's description
        // first, then by its `create`. The instance is dropped at once.
        factory.check_options(table)?;
        drop(factory.instance()?);
        tracing::info!(
            plugin = factory.plugin.name(),
            version = factory.plugin.version(),
            sdk = factory.plugin.sdk_version(),
            path = %path.display(),
            "sink plugin loaded"
        );
        if !factory.plugin.takes_context() {
            tracing::warn!(
                plugin = factory.plugin.name(),
                sdk = factory.plugin.sdk_version(),
                path = %path.display(),
                "this plugin was built before sinks were told the daemon's instance id (it exports no `{EXTENSION_SYMBOL}`): it still works, but if it dedupes by (shard, seq), records of several daemons writing into one destination collide there and are dropped; rebuild it against this daemon's sink-sdk and key on (instance, shard, seq)"
            );
        }
        Ok(factory)
    }

    /// The same factory, its instances told `context` (the daemon's
    /// instance id and the sink's name) when the plugin takes it.
    pub fn with_context(self, context: SinkContext) -> PluginFactory {
        PluginFactory { context, ..self }
    }

    /// The library at `path` loaded and checked (as [`PluginFactory::load_in`]
    /// does first), no instance created yet: the options are unchecked.
    pub(crate) fn open_in(
        path: &Path,
        options_toml: &str,
        copy_dir: &Path,
    ) -> Result<PluginFactory, String> {
        let loaded = library::load(path, copy_dir)?;
        Ok(PluginFactory {
            plugin: loaded.plugin,
            host: loaded.host,
            options_toml: options_toml.to_string(),
            source: path.to_path_buf(),
            context: SinkEnv::detached().context("sink"),
            options: loaded.options,
        })
    }

    /// The options the plugin describes, as keys named `options.NAME`;
    /// `None` when it describes none (then its `create` alone checks them).
    pub fn options(&self) -> Option<&'static [Key]> {
        self.options
    }

    /// The options against the plugin's description (nothing to check
    /// when it gives none); the error names `TABLE.options.KEY`.
    pub fn check_options(&self, table: &str) -> Result<(), SinkError> {
        let Some(keys) = self.options else {
            return Ok(());
        };
        let options: toml::Table = toml::from_str(&self.options_toml).map_err(|e| {
            SinkError::key(
                table,
                "options",
                format!("not a TOML table: {}", e.message()),
            )
        })?;
        super::options::check(keys, &options, self.plugin.name())
            .map_err(|problem| SinkError::Config(SinkConfigError::from(problem).in_table(table)))
    }

    /// The plugin's name (from its vtable).
    pub fn plugin_name(&self) -> &str {
        self.plugin.name()
    }

    /// The plugin's own version.
    pub fn plugin_version(&self) -> &str {
        self.plugin.version()
    }

    /// A new instance, as its concrete type.
    pub fn instance(&self) -> Result<PluginInstance, SinkError> {
        self.instance_for(None)
    }

    /// A new instance for `shard`: what the plugin logs while creating it
    /// and in its later calls carries the shard's number.
    pub fn instance_for(&self, shard: Option<u32>) -> Result<PluginInstance, SinkError> {
        self.create_verbatim(shard).map_err(|e| SinkError::Plugin {
            reason: format!("plugin {}: {e}", self.plugin.name()),
        })
    }

    /// A new instance; the error is the plugin's `create` error as it wrote
    /// it (`options.<key>: ...` by convention).
    pub(crate) fn instance_verbatim(&self) -> Result<PluginInstance, String> {
        self.create_verbatim(None)
    }

    fn create_verbatim(&self, shard: Option<u32>) -> Result<PluginInstance, String> {
        let _scope = ShardScope::enter(shard);
        self.plugin
            .create_in(&self.options_toml, Some(self.host), &self.context)
            .map(|inner| PluginInstance::new(inner, shard))
    }
}

impl SinkFactory for PluginFactory {
    fn create(&self, shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        Ok(Box::new(self.instance_for(Some(shard))?))
    }

    fn describe(&self) -> String {
        let p = &self.plugin;
        format!(
            "plugin {} {} from {} (sink ABI v{}, sink-sdk {})",
            p.name(),
            p.version(),
            self.source.display(),
            p.abi_version(),
            p.sdk_version()
        )
    }
}
