//! The file sink's keys ([`FileConfig`]: what the user writes, with its
//! defaults, ranges and checks) and the [`FileSettings`] they resolve to.
//! [`FileConfig::check`] runs once per table (see `crate::config`); the
//! file itself is opened only when the sink is built.

use std::path::PathBuf;

use serde::Deserialize;
use sink_sdk::keys::{Allowed, DefaultValue, Unit};
use sink_sdk::output::AppendRules;
use sink_sdk::Limits;

use crate::keys::{required_path, DeliveryConfig, GIB, MIB};
use crate::sink_keys;
use crate::KeyProblem;

pub(crate) const DEFAULT_ROTATE_BYTES: u64 = 256 * MIB;

/// Record framing of the file sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// Each payload followed by `\n`.
    #[default]
    Ndjson,
    /// Each payload as u32 little-endian length + bytes.
    LengthPrefixed,
}

impl FileFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            FileFormat::Ndjson => "ndjson",
            FileFormat::LengthPrefixed => "length_prefixed",
        }
    }
}

sink_keys! {
    /// The keys of `type = "file"` (rendered into docs/sinks.md). Unset
    /// keys take the defaults declared here.
    pub struct FileConfig in "sink.file" {
        path: PathBuf = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(
                r#"a file path, relative to the daemon's working folder or absolute"#,
            ),
            also: "",
            meaning: r#"The file records are appended to; its folder is created (mode 0700) if missing, the file is created with mode 0600."#,
        },
        format: FileFormat = Key {
            default: DefaultValue::Str("ndjson"),
            allowed: Allowed::OneOf(&["ndjson", "length_prefixed"]),
            also: "",
            meaning: r#"How records are framed in the file."#,
        },
        rotate_bytes: u64 = Key {
            default: DefaultValue::Int(DEFAULT_ROTATE_BYTES),
            allowed: Allowed::Range {
                min: MIB,
                max: 64 * GIB,
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"When an append would make the file larger than this, the file is rotated first."#,
        },
        fsync: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Fdatasync the file after every batch, before the batch counts as delivered."#,
        },
    }
}

impl FileConfig {
    /// Checks every key and resolves them, with the delivery keys, into the
    /// sink's settings. Does not touch the file system.
    pub(crate) fn check(&self, delivery: &DeliveryConfig) -> Result<FileSettings, KeyProblem> {
        let path = required_path(&self.path, super::TYPE.name, "a file")?;
        self.check_ranges()?;
        Ok(FileSettings {
            path: path.clone(),
            format: self.format.unwrap_or_default(),
            rules: AppendRules {
                fsync: self.fsync.unwrap_or(true),
                rotate_bytes: self.rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
            },
            limits: delivery.limits(),
        })
    }
}

/// A checked file sink config, defaults filled in.
#[derive(Debug, Clone)]
pub(crate) struct FileSettings {
    pub path: PathBuf,
    pub format: FileFormat,
    pub rules: AppendRules,
    pub limits: Limits,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{err, parse};
    use crate::config::TypeConfig;
    use crate::SinkConfig;

    fn file() -> FileConfig {
        FileConfig {
            path: Some("spillway-data/delivered.ndjson".into()),
            ..FileConfig::default()
        }
    }

    /// A `[sink]` table of `type = "file"` with these keys.
    fn table(file: FileConfig) -> SinkConfig {
        SinkConfig::new(TypeConfig::new(file), DeliveryConfig::default())
    }

    #[test]
    fn every_key_is_read() {
        let cfg = parse(
            "[sink]\ntype = \"file\"\npath = \"p\"\nformat = \"length_prefixed\"\nrotate_bytes = 1048576\nfsync = false\n",
        )
        .unwrap();
        let file: &FileConfig = cfg.type_config().keys().expect("file keys");
        // Naming every field: a new key must be added here, and so to REFERENCE.
        let FileConfig {
            path,
            format,
            rotate_bytes,
            fsync,
        } = file;
        let set = [
            path.is_some(),
            format.is_some(),
            rotate_bytes.is_some(),
            fsync.is_some(),
        ];
        assert!(set.iter().all(|s| *s), "a key is missing from REFERENCE");
        assert_eq!(set.len(), FileConfig::REFERENCE.len());
    }

    #[test]
    fn path_is_required() {
        assert_eq!(
            err(&table(FileConfig::default())),
            "sink.path is required for type = \"file\""
        );
    }

    #[test]
    fn range_errors_name_the_key_and_the_range() {
        let cases: Vec<(FileConfig, &str)> = vec![
            (
                FileConfig { rotate_bytes: Some(MIB - 1), ..file() },
                "sink.rotate_bytes = 1048575 is out of range: allowed 1048576..=68719476736 (1 MiB..=64 GiB)",
            ),
            (FileConfig { rotate_bytes: Some(64 * GIB + 1), ..file() }, "sink.rotate_bytes = "),
        ];
        for (file, want) in cases {
            let got = err(&table(file));
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn range_bounds_are_inclusive() {
        let ok = [
            FileConfig {
                rotate_bytes: Some(MIB),
                ..file()
            },
            FileConfig {
                rotate_bytes: Some(64 * GIB),
                ..file()
            },
        ];
        for file in ok {
            let cfg = table(file);
            assert_eq!(cfg.validate(), Ok(()), "{cfg:?}");
        }
    }
}
