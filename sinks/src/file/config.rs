//! The file sink's keys ([`FileConfig`]: what the user writes, with its
//! defaults, ranges and checks) and the [`FileSettings`] they resolve to.
//! [`FileConfig::check`] runs once per table (see `crate::config`); the
//! file itself is opened only when the sink is built.

use std::ops::RangeInclusive;
use std::path::PathBuf;

use serde::Deserialize;
use sink_sdk::keys::{Allowed, DefaultValue, Key, Unit};
use sink_sdk::output::AppendRules;
use sink_sdk::Limits;

use crate::keys::{check_range, required_path, DeliveryConfig, GIB, MIB};
use crate::KeyProblem;

pub(crate) const DEFAULT_ROTATE_BYTES: u64 = 256 * MIB;
pub(crate) const ROTATE_BYTES_RANGE: RangeInclusive<u64> = MIB..=64 * GIB;

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

/// The keys of `type = "file"` (mirrored in `docs/sinks.md`). Unset
/// keys take the defaults below.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileConfig {
    /// The file records are appended to. Required. Its folder is created
    /// (mode 0700) if missing; the file is mode 0600.
    pub path: Option<PathBuf>,
    /// `"ndjson"` (default) or `"length_prefixed"`.
    pub format: Option<FileFormat>,
    /// When an append would make the file larger than this many bytes, it is
    /// renamed to `<path>.<unix_ms>` and a new file started. Default
    /// 268435456 (256 MiB), range 1 MiB..=64 GiB.
    pub rotate_bytes: Option<u64>,
    /// fsync (fdatasync) the file after every batch before reporting it
    /// delivered. Default true.
    pub fsync: Option<bool>,
}

impl FileConfig {
    /// Every key of this type, as the user writes it.
    /// Every key described for the reference (docs, `spillway.toml(5)`),
    /// from the same defaults and ranges the check uses.
    pub(crate) const REFERENCE: &'static [Key] = &[
        Key {
            name: "sink.file.path",
            default: DefaultValue::Required,
            allowed: Allowed::Text(
                r#"a file path, relative to the daemon's working folder or absolute"#,
            ),
            also: "",
            meaning: r#"The file records are appended to; its folder is created (mode 0700) if missing, the file is created with mode 0600."#,
        },
        Key {
            name: "sink.file.format",
            default: DefaultValue::Str("ndjson"),
            allowed: Allowed::OneOf(&["ndjson", "length_prefixed"]),
            also: "",
            meaning: r#"How records are framed in the file."#,
        },
        Key {
            name: "sink.file.rotate_bytes",
            default: DefaultValue::Int(DEFAULT_ROTATE_BYTES),
            allowed: Allowed::Range {
                min: *ROTATE_BYTES_RANGE.start(),
                max: *ROTATE_BYTES_RANGE.end(),
                unit: Unit::Bytes,
            },
            also: "",
            meaning: r#"When an append would make the file larger than this, the file is rotated first."#,
        },
        Key {
            name: "sink.file.fsync",
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true`, `false`"#),
            also: "",
            meaning: r#"Fdatasync the file after every batch, before the batch counts as delivered."#,
        },
    ];

    /// Reads the value of `key`, one of [`FileConfig::REFERENCE`].
    pub(crate) fn read_key(
        &mut self,
        key: &str,
        value: toml::Value,
    ) -> Result<(), toml::de::Error> {
        match key {
            "path" => self.path = value.try_into()?,
            "format" => self.format = value.try_into()?,
            "rotate_bytes" => self.rotate_bytes = value.try_into()?,
            "fsync" => self.fsync = value.try_into()?,
            other => unreachable!("sink.{other} is not a file key"),
        }
        Ok(())
    }

    /// Checks every key and resolves them, with the delivery keys, into the
    /// sink's settings. Does not touch the file system.
    pub(crate) fn check(&self, delivery: &DeliveryConfig) -> Result<FileSettings, KeyProblem> {
        let path = required_path(&self.path, super::TYPE.name, "a file")?;
        if let Some(v) = self.rotate_bytes {
            check_range("rotate_bytes", v, &ROTATE_BYTES_RANGE, " (1 MiB..=64 GiB)")?;
        }
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
