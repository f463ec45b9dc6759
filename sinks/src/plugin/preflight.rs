//! `spillway check` of a plugin sink: the library is loaded through the
//! same host code the daemon uses ([`PluginFactory`]), one instance is
//! created from `[sink.options]` (the plugin's `create` checks them) and
//! health-checked, then dropped. Nothing is delivered.
//!
//! Errors name the key in the table (`sink` or `sinks.NAME`): `path` for
//! a library that cannot be read or loaded (missing, not a plugin, another
//! ABI version), `options.<key>` when the plugin's error names an option
//! the way docs/plugins.md asks (`options.<key>: ...`), else `options`.

use sink_sdk::{Health, Sink};

use super::{PluginFactory, PluginSettings};
use crate::{Preflight, SinkError};

/// Loads the plugin, checks the options against its declaration, creates
/// and health-checks one instance. `Ok` carries the warnings (a failed
/// health check: the daemon would start and retry) and, as notes, the
/// options as the plugin declares them with what the config sets.
pub(crate) fn preflight(settings: &PluginSettings, table: &str) -> Result<Preflight, SinkError> {
    let factory = PluginFactory::open_in(
        &settings.path,
        &settings.options_toml,
        &std::env::temp_dir(),
    )
    .map_err(|e| SinkError::key(table, "path", e))?;
    let name = factory.plugin_name().to_string();
    factory.check_options(table)?;
    let mut instance = factory.instance_verbatim().map_err(|e| {
        let (key, reason) = options_error(&name, &e);
        SinkError::key(table, key, reason)
    })?;
    let warnings = match instance.health_check() {
        Health::Healthy => Vec::new(),
        Health::Unhealthy(why) => vec![format!(
            "{table}: plugin {name} fails its health check: {why}; the daemon would start and retry it"
        )],
    };
    drop(instance);
    let notes = super::options::report(
        factory.options(),
        &settings.options_toml,
        table,
        &format!("{name} {}", factory.plugin_version()),
    );
    Ok(Preflight { warnings, notes })
}

/// A plugin's `create` error as the key it names and the reason:
/// `options.<key>: why` becomes `options.<key>` and `plugin <name>: why`;
/// `options: why` and anything else `options` and `plugin <name>: ...`.
fn options_error(plugin: &str, error: &str) -> (String, String) {
    let is_key = |key: &str| {
        !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    };
    if let Some(rest) = error.strip_prefix("options.") {
        if let Some((key, why)) = rest.split_once(": ").filter(|(k, _)| is_key(k)) {
            return (format!("options.{key}"), format!("plugin {plugin}: {why}"));
        }
        // `options.KEY = 5 is out of range: ...`, as a declared key's
        // range check says it (sink_sdk::declare::OutOfRange).
        if let Some((key, _)) = rest.split_once(" = ").filter(|(k, _)| is_key(k)) {
            return (format!("options.{key}"), format!("plugin {plugin}: {rest}"));
        }
    }
    let why = error.strip_prefix("options: ").unwrap_or(error);
    ("options".into(), format!("plugin {plugin}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_errors_name_the_key() {
        let rendered = |plugin: &str, error: &str| {
            let (key, reason) = options_error(plugin, error);
            SinkError::key("sink", key, reason).to_string()
        };
        assert_eq!(
            rendered("file-plugin", "options.rotate_bytes: 5 is out of range"),
            "sink.options.rotate_bytes: plugin file-plugin: 5 is out of range"
        );
        assert_eq!(
            rendered(
                "file-plugin",
                "options.rotate_bytes = 5 is out of range: allowed 1..=2"
            ),
            "sink.options.rotate_bytes: plugin file-plugin: rotate_bytes = 5 is out of range: allowed 1..=2"
        );
        assert_eq!(
            rendered("file-plugin", "options: missing field `path`"),
            "sink.options: plugin file-plugin: missing field `path`"
        );
        assert_eq!(
            rendered("count-c", "the count sink takes no options"),
            "sink.options: plugin count-c: the count sink takes no options"
        );
        assert_eq!(
            rendered("p", "options.a b: not a key"),
            "sink.options: plugin p: options.a b: not a key"
        );
    }
}
