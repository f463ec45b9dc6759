//! The plugin host's keys ([`PluginConfig`]: what the user writes, and its
//! checks) and the [`PluginSettings`] they resolve to. The plugin's own
//! settings, `[sink.options]`, are checked when the plugin is loaded:
//! against the options it declares (`options.rs`), then by its `create`.

use std::path::PathBuf;

use crate::keys::required_path;
use crate::sink_keys;
use crate::KeyProblem;
use sink_sdk::keys::{Allowed, DefaultValue};

sink_keys! {
    /// The keys of `type = "plugin"` (rendered into docs/sinks.md); the
    /// options' values are redacted in `Debug` (they may hold secrets).
    pub struct PluginConfig in "sink.plugin" {
        path: PathBuf = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"a path to a shared library"#),
            also: "",
            meaning: r#"The plugin, e.g. `target/release/libspillway_plugin_file.so`; it is copied to a private file before loading, so rebuilding it in place and reloading picks up the new build."#,
        },
        options: toml::Table = Key {
            default: DefaultValue::Unset("empty"),
            allowed: Allowed::Shaped {
                text: r#"a TOML table, written `[sink.options]`"#,
                schema: r#"{"type": "object"}"#,
            },
            also: "",
            meaning: r#"The plugin's own settings: checked against the options the plugin declares, if it does (each error naming `sink.options.KEY`; `spillway check` prints them), then passed to its `create` as TOML text, which may refuse them too (reported with the plugin's name)."#,
            secret: true,
        },
    }
}

impl PluginConfig {
    /// Checks the keys the host uses. Does not touch the file system; the
    /// library is read when the sink is built.
    pub(crate) fn check(&self) -> Result<PluginSettings, KeyProblem> {
        let path = required_path(
            &self.path,
            super::TYPE.name,
            "a shared library (e.g. target/release/libmy_sink.so)",
        )?;
        Ok(PluginSettings {
            path: path.clone(),
            options_toml: self
                .options
                .as_ref()
                .map(|t| toml::to_string(t).unwrap_or_default())
                .unwrap_or_default(),
        })
    }
}

/// A checked plugin config: what to load, and what to pass its `create`.
#[derive(Debug, Clone)]
pub(crate) struct PluginSettings {
    pub path: PathBuf,
    /// The `[sink.options]` table as TOML text.
    pub options_toml: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{err, parse};
    use crate::config::{DeliveryConfig, TypeConfig};
    use crate::SinkConfig;

    #[test]
    fn every_key_is_read() {
        let cfg =
            parse("[sink]\ntype = \"plugin\"\npath = \"p.so\"\n[sink.options]\nk = 1\n").unwrap();
        let plugin: &PluginConfig = cfg.type_config().keys().expect("plugin keys");
        // Naming every field: a new key must be added here, and so to REFERENCE.
        let PluginConfig { path, options } = plugin;
        let set = [path.is_some(), options.is_some()];
        assert!(set.iter().all(|s| *s), "a key is missing from REFERENCE");
        assert_eq!(set.len(), PluginConfig::REFERENCE.len());
        assert_eq!(cfg.plugin_path(), Some(std::path::Path::new("p.so")));
    }

    #[test]
    fn path_is_required_and_names_a_library() {
        let table = |plugin| SinkConfig::new(TypeConfig::new(plugin), DeliveryConfig::default());
        assert_eq!(
            err(&table(PluginConfig::default())),
            "sink.path is required for type = \"plugin\""
        );
        let up = PluginConfig {
            path: Some("..".into()),
            ..PluginConfig::default()
        };
        let e = err(&table(up));
        assert!(
            e.starts_with("sink.path: \"..\" does not name a shared library"),
            "{e}"
        );
    }

    #[test]
    fn options_become_toml_text() {
        let cfg =
            parse("[sink]\ntype = \"plugin\"\npath = \"p.so\"\n[sink.options]\nk = 1\n").unwrap();
        let plugin: &PluginConfig = cfg.type_config().keys().expect("plugin keys");
        assert_eq!(plugin.check().unwrap().options_toml, "k = 1\n");
        let bare = PluginConfig {
            options: None,
            ..plugin.clone()
        };
        assert_eq!(bare.check().unwrap().options_toml, "");
    }
}
