//! The `[sink.options]` of the file plugin: this type is its user
//! documentation.

use std::path::PathBuf;

use serde::Deserialize;

use sink_sdk::units::MIB;

/// Default of [`FileOptions::rotate_bytes`]: 256 MiB, as the built-in sink.
pub const DEFAULT_ROTATE_BYTES: u64 = 256 * MIB;
/// Smallest [`FileOptions::rotate_bytes`]: 1 MiB.
pub const ROTATE_BYTES_MIN: u64 = MIB;
/// Largest [`FileOptions::rotate_bytes`]: 64 GiB.
pub const ROTATE_BYTES_MAX: u64 = 64 * 1024 * MIB;

/// Options of the file plugin (`[sink.options]`). Unknown keys are an
/// error, so a misspelt option is not silently ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOptions {
    /// The file records are appended to. Required. Its folder is created
    /// (mode 0700) if missing; the file is mode 0600. Every instance (one
    /// per shard) with the same path appends to the same file, one whole
    /// batch at a time.
    pub path: PathBuf,
    /// fdatasync the file after every batch before reporting it
    /// delivered. Default true.
    #[serde(default = "default_fsync")]
    pub fsync: bool,
    /// When an append would make the file larger than this many bytes, the
    /// file is renamed to `<path>.<unix_ms>` and a new one started. Default
    /// 268435456 (256 MiB), range 1 MiB..=64 GiB.
    #[serde(default = "default_rotate_bytes")]
    pub rotate_bytes: u64,
    /// Testing only: panic in the Nth `deliver` call of an instance
    /// (counting from 1), to exercise the daemon's recovery. Default 0
    /// (never).
    #[serde(default)]
    pub panic_on_batch: u64,
    /// Testing only: answer "retry" to the first N batches of an instance.
    /// Default 0.
    #[serde(default)]
    pub fail_first_batches: u64,
    /// Testing only: panic in every `deliver` call whose batch holds a
    /// record with exactly this payload (a poison record). Default none.
    #[serde(default)]
    pub panic_on_payload: Option<String>,
    /// Testing only: answer "retry" to every batch that holds a record with
    /// exactly this payload. Default none.
    #[serde(default)]
    pub retry_on_payload: Option<String>,
}

fn default_fsync() -> bool {
    true
}

fn default_rotate_bytes() -> u64 {
    DEFAULT_ROTATE_BYTES
}

impl FileOptions {
    /// Parses and checks the options text; the error names the option.
    pub fn parse(options_toml: &str) -> Result<FileOptions, String> {
        let options: FileOptions =
            toml::from_str(options_toml).map_err(|e| format!("options: {}", e.message().trim()))?;
        if options.path.as_os_str().is_empty() {
            return Err("options.path: must not be empty".into());
        }
        if !(ROTATE_BYTES_MIN..=ROTATE_BYTES_MAX).contains(&options.rotate_bytes) {
            return Err(format!(
                "options.rotate_bytes: {} is out of range {ROTATE_BYTES_MIN}..={ROTATE_BYTES_MAX}",
                options.rotate_bytes
            ));
        }
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
            "options: missing field `path`"
        );
        let e = FileOptions::parse("path = \"x\"\nfsinc = false").unwrap_err();
        assert!(
            e.starts_with("options: unknown field `fsinc`, expected one of"),
            "{e}"
        );
        assert_eq!(
            FileOptions::parse("path = \"x\"\nrotate_bytes = 5").unwrap_err(),
            "options.rotate_bytes: 5 is out of range 1048576..=68719476736"
        );
        let e = FileOptions::parse("path = 3").unwrap_err();
        assert!(e.starts_with("options: invalid type: integer `3`"), "{e}");
        assert_eq!(
            FileOptions::parse("path = \"\"").unwrap_err(),
            "options.path: must not be empty"
        );
    }
}
