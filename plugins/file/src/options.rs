//! The `[sink.options]` of the file plugin, each declared once
//! ([`sink_sdk::key_table!`]): the field, its default, its range and its
//! meaning. The daemon reads the declaration through the plugin's ABI
//! (`PluginSink::OPTIONS`), checks a config against it before `create`
//! (naming `sink.options.KEY`), prints it in `spillway check` and puts it
//! in the JSON Schema; `parse` here checks the same ranges for a caller
//! that is not the daemon.

use std::path::PathBuf;

use serde::Deserialize;

use sink_sdk::keys::{Allowed, Unit};
use sink_sdk::units::MIB;

/// Default of [`FileOptions::rotate_bytes`]: 256 MiB, as the built-in sink.
pub const DEFAULT_ROTATE_BYTES: u64 = 256 * MIB;
/// Smallest [`FileOptions::rotate_bytes`]: 1 MiB.
pub const ROTATE_BYTES_MIN: u64 = MIB;
/// Largest [`FileOptions::rotate_bytes`]: 64 GiB.
pub const ROTATE_BYTES_MAX: u64 = 64 * 1024 * MIB;

sink_sdk::key_table! {
    /// Options of the file plugin (`[sink.options]`). Unknown keys are an
    /// error, so a misspelt option is not silently ignored.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct FileOptions in "options" {
        path: PathBuf = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"a file path"#),
            also: "",
            meaning: r#"The file records are appended to. Its folder is created (mode 0700) if missing; the file is mode 0600. Every instance (one per shard) with the same path appends to the same file, one whole batch at a time."#,
        },
        fsync: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true` or `false`"#),
            also: "",
            meaning: r#"fdatasync the file after every batch before reporting it delivered."#,
        },
        rotate_bytes: u64 = Key {
            default: DefaultValue::Int(DEFAULT_ROTATE_BYTES),
            allowed: Allowed::Range {
                min: ROTATE_BYTES_MIN,
                max: ROTATE_BYTES_MAX,
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"When an append would make the file larger than this, the file is renamed to `<path>.<unix_ms>` and a new one started."#,
        },
        panic_on_batch: u64 = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "never",
                min: 1,
                max: u64::MAX,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"Testing only: panic in the Nth `deliver` call of an instance (counting from 1), to exercise the daemon's recovery."#,
        },
        fail_first_batches: u64 = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::Range {
                min: 0,
                max: u64::MAX,
                unit: Unit::Count,
            },
            also: "",
            meaning: r#"Testing only: answer "retry" to the first N batches of an instance."#,
        },
        panic_on_payload: Option<String> = Key {
            default: DefaultValue::Unset("never"),
            allowed: Allowed::Text(r#"a string"#),
            also: "",
            meaning: r#"Testing only: panic in every `deliver` call whose batch holds a record with exactly this payload (a poison record)."#,
        },
        retry_on_payload: Option<String> = Key {
            default: DefaultValue::Unset("never"),
            allowed: Allowed::Text(r#"a string"#),
            also: "",
            meaning: r#"Testing only: answer "retry" to every batch that holds a record with exactly this payload."#,
        },
    }
}

impl FileOptions {
    /// Parses and checks the options text; the error names the option.
    pub fn parse(options_toml: &str) -> Result<FileOptions, String> {
        let options: FileOptions =
            toml::from_str(options_toml).map_err(|e| format!("options: {}", e.message().trim()))?;
        if options.path.as_os_str().is_empty() {
            return Err("options.path: is required (a file path)".into());
        }
        options.check_ranges().map_err(|e| e.to_string())?;
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let o = FileOptions::parse("path = \"/tmp/x.ndjson\"").unwrap();
        assert_eq!(
            o,
            FileOptions {
                path: "/tmp/x.ndjson".into(),
                fsync: true,
                rotate_bytes: DEFAULT_ROTATE_BYTES,
                panic_on_batch: 0,
                fail_first_batches: 0,
                panic_on_payload: None,
                retry_on_payload: None,
            }
        );
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(
            FileOptions::parse("").unwrap_err(),
            "options.path: is required (a file path)"
        );
        let e = FileOptions::parse("path = \"x\"\nfsinc = false").unwrap_err();
        assert!(
            e.starts_with("options: unknown field `fsinc`, expected one of"),
            "{e}"
        );
        assert_eq!(
            FileOptions::parse("path = \"x\"\nrotate_bytes = 5").unwrap_err(),
            "options.rotate_bytes = 5 is out of range: allowed 1048576..=68719476736 (1 MiB..=64 GiB)"
        );
        let e = FileOptions::parse("path = 3").unwrap_err();
        assert!(e.starts_with("options: invalid type: integer `3`"), "{e}");
        assert_eq!(
            FileOptions::parse("path = \"\"").unwrap_err(),
            "options.path: is required (a file path)"
        );
    }
}
