//! The `[sink]` table of spillway's configuration file: `type`, that type's
//! own keys, and the drain's batching and retry keys, which every type has.
//!
//! Each sink owns its keys: their documentation, defaults, ranges and checks
//! live in the sink's `config` module ([`HttpConfig`], [`FileConfig`],
//! [`PluginConfig`]; noop has none). This module only dispatches on `type`,
//! holds the drain's keys ([`DrainConfig`]), and reports keys set for a type
//! that does not use them.
//!
//! A table is checked once, when it is made ([`SinkConfig::new`], which
//! reading it from TOML and [`Default`] go through): ranges, required keys,
//! keys that do not apply to the chosen type. The outcome is kept with the
//! table; [`SinkConfig::validate`] reports it and [`crate::build`] builds
//! from the checked settings, so a start or a reload checks the table
//! exactly once. Every error names the key as `sink.<key>` with what is
//! allowed. Reading only checks shapes (a string where a string belongs, a
//! known enum value, no unknown key) and reports them as TOML errors.
//!
//! Adding a sink type: a [`SinkKind`] variant and its [`TypeConfig`] and
//! `SinkSettings` variants; its config module with a `KEYS` list, a
//! `read_key` and a `check`; and an arm in `lib.rs`'s `build`.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use sink_sdk::Limits;

use crate::file::{FileConfig, FileSettings};
use crate::http::{HttpConfig, HttpSettings};
use crate::plugin::{PluginConfig, PluginSettings};

pub(crate) use sink_sdk::units::{GIB, KIB, MIB};

/// The file the built-in default config delivers to.
pub const DEFAULT_FILE_PATH: &str = "spillway-data/delivered.ndjson";

pub const DEFAULT_MAX_RECORDS: u32 = 1000;
pub const MAX_RECORDS_RANGE: RangeInclusive<u32> = 1..=100_000;
pub const DEFAULT_MAX_BYTES: u64 = 4 * MIB;
pub const MAX_BYTES_RANGE: RangeInclusive<u64> = KIB..=64 * MIB;
pub const DEFAULT_LINGER_MS: u64 = 5;
pub const LINGER_MS_RANGE: RangeInclusive<u64> = 0..=10_000;
pub const DEFAULT_RETRY_INITIAL_MS: u64 = 100;
pub const RETRY_INITIAL_MS_RANGE: RangeInclusive<u64> = 1..=60_000;
pub const DEFAULT_RETRY_MAX_MS: u64 = 30_000;
pub const RETRY_MAX_MS_RANGE: RangeInclusive<u64> = 10..=3_600_000;
/// 0 means "retry forever"; any other value must lie in this range.
pub const MAX_RETRY_DURATION_MS_RANGE: RangeInclusive<u64> = 1_000..=604_800_000;
/// How long building and health-checking a new sink may take (a reload, a
/// start, `check`): long enough for a TLS handshake to a far endpoint or a
/// database login, short enough that a stuck one is refused while the
/// operator still waits on `ctl reload`.
pub const DEFAULT_BUILD_TIMEOUT_MS: u64 = 10_000;
pub const BUILD_TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;

/// Which sink delivers the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// POST (or PUT/PATCH) the records to an HTTP endpoint.
    Http,
    /// Append the records to a local file.
    File,
    /// Accept and count the records, deliver them nowhere (benchmarks).
    Noop,
    /// A sink plugin: a `cdylib` built against sink-sdk, loaded at run time.
    Plugin,
}

impl SinkKind {
    pub(crate) const ALL: [SinkKind; 4] = [
        SinkKind::Http,
        SinkKind::File,
        SinkKind::Noop,
        SinkKind::Plugin,
    ];

    /// The value the user writes for `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Http => "http",
            SinkKind::File => "file",
            SinkKind::Noop => "noop",
            SinkKind::Plugin => "plugin",
        }
    }

    /// The keys of this type (the drain's keys, which every type has, aside).
    pub(crate) fn keys(self) -> &'static [&'static str] {
        match self {
            SinkKind::Http => HttpConfig::KEYS,
            SinkKind::File => FileConfig::KEYS,
            SinkKind::Noop => &[],
            SinkKind::Plugin => PluginConfig::KEYS,
        }
    }
}

impl fmt::Display for SinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `type` and the keys of that type, as the user wrote them.
#[derive(Debug, Clone, PartialEq)]
pub enum TypeConfig {
    Http(HttpConfig),
    File(FileConfig),
    Noop,
    Plugin(PluginConfig),
}

impl TypeConfig {
    pub fn kind(&self) -> SinkKind {
        match self {
            TypeConfig::Http(_) => SinkKind::Http,
            TypeConfig::File(_) => SinkKind::File,
            TypeConfig::Noop => SinkKind::Noop,
            TypeConfig::Plugin(_) => SinkKind::Plugin,
        }
    }
}

/// The drain's batching and retry keys: every type has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainConfig {
    /// Most records in one batch. Default 1000, range 1..=100000.
    pub max_records: u32,
    /// Most payload bytes in one batch (a single larger record is still sent
    /// alone). Default 4194304 (4 MiB), range 1 KiB..=64 MiB.
    pub max_bytes: u64,
    /// How long the drain waits for more records before sending a batch that
    /// is not full, in milliseconds. Default 5, range 0..=10000.
    pub linger_ms: u64,
    /// First backoff after a transient failure, in milliseconds; it doubles
    /// (with jitter) on each further failure. Default 100, range 1..=60000.
    pub retry_initial_ms: u64,
    /// Longest backoff between two attempts, in milliseconds. Default 30000,
    /// range 10..=3600000, and at least `retry_initial_ms`.
    pub retry_max_ms: u64,
    /// After a batch has failed transiently for this long, in milliseconds,
    /// it is dead-lettered. Default 0: retry forever. Otherwise
    /// 1000..=604800000 (7 days).
    pub max_retry_duration_ms: u64,
    /// Deadline for building a new sink and running its health check, in
    /// milliseconds (at a reload, at start, in `check`). Past it the new
    /// sink is refused and the running one keeps delivering. Default 10000,
    /// range 100..=600000.
    pub build_timeout_ms: u64,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            max_records: DEFAULT_MAX_RECORDS,
            max_bytes: DEFAULT_MAX_BYTES,
            linger_ms: DEFAULT_LINGER_MS,
            retry_initial_ms: DEFAULT_RETRY_INITIAL_MS,
            retry_max_ms: DEFAULT_RETRY_MAX_MS,
            max_retry_duration_ms: 0,
            build_timeout_ms: DEFAULT_BUILD_TIMEOUT_MS,
        }
    }
}

impl DrainConfig {
    pub(crate) const KEYS: &'static [&'static str] = &[
        "max_records",
        "max_bytes",
        "linger_ms",
        "retry_initial_ms",
        "retry_max_ms",
        "max_retry_duration_ms",
        "build_timeout_ms",
    ];

    /// Reads the value of `key`, one of [`DrainConfig::KEYS`].
    fn read_key<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "max_records" => self.max_records = map.next_value()?,
            "max_bytes" => self.max_bytes = map.next_value()?,
            "linger_ms" => self.linger_ms = map.next_value()?,
            "retry_initial_ms" => self.retry_initial_ms = map.next_value()?,
            "retry_max_ms" => self.retry_max_ms = map.next_value()?,
            "max_retry_duration_ms" => self.max_retry_duration_ms = map.next_value()?,
            "build_timeout_ms" => self.build_timeout_ms = map.next_value()?,
            other => unreachable!("sink.{other} is not a drain key"),
        }
        Ok(())
    }

    fn check(&self) -> Result<(), SinkConfigError> {
        check_range("max_records", self.max_records, &MAX_RECORDS_RANGE, "")?;
        check_range(
            "max_bytes",
            self.max_bytes,
            &MAX_BYTES_RANGE,
            " (1 KiB..=64 MiB)",
        )?;
        check_range("linger_ms", self.linger_ms, &LINGER_MS_RANGE, "")?;
        check_range(
            "retry_initial_ms",
            self.retry_initial_ms,
            &RETRY_INITIAL_MS_RANGE,
            "",
        )?;
        check_range("retry_max_ms", self.retry_max_ms, &RETRY_MAX_MS_RANGE, "")?;
        check_range(
            "build_timeout_ms",
            self.build_timeout_ms,
            &BUILD_TIMEOUT_MS_RANGE,
            "",
        )?;
        if self.retry_max_ms < self.retry_initial_ms {
            return Err(SinkConfigError::Invalid {
                key: "retry_max_ms".into(),
                reason: format!(
                    "{} is less than sink.retry_initial_ms = {}; it must be at least that",
                    self.retry_max_ms, self.retry_initial_ms
                ),
            });
        }
        let d = self.max_retry_duration_ms;
        if d != 0 && !MAX_RETRY_DURATION_MS_RANGE.contains(&d) {
            return Err(SinkConfigError::OutOfRange {
                key: "max_retry_duration_ms",
                value: d,
                allowed: format!(
                    "0 (retry forever) or {}..={}",
                    MAX_RETRY_DURATION_MS_RANGE.start(),
                    MAX_RETRY_DURATION_MS_RANGE.end()
                ),
            });
        }
        Ok(())
    }

    /// The batch limits these keys ask for, as a sink reports them.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_records: self.max_records as usize,
            max_bytes: self.max_bytes as usize,
        }
    }

    /// `max_retry_duration_ms` as the drain uses it: `None` = retry forever.
    pub fn max_retry_duration(&self) -> Option<Duration> {
        (self.max_retry_duration_ms != 0).then(|| Duration::from_millis(self.max_retry_duration_ms))
    }

    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.linger_ms)
    }

    pub fn retry_initial(&self) -> Duration {
        Duration::from_millis(self.retry_initial_ms)
    }

    pub fn retry_max(&self) -> Duration {
        Duration::from_millis(self.retry_max_ms)
    }
}

/// A `[sink]` table that parses but cannot be used. Every message names the
/// key as `sink.<key>` and says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkConfigError {
    #[error("sink.{key} = {value} is out of range: allowed {allowed}")]
    OutOfRange {
        key: &'static str,
        value: u64,
        allowed: String,
    },
    #[error("sink.{key} is required for type = \"{kind}\"")]
    Missing { key: &'static str, kind: SinkKind },
    #[error("sink.{key} is not used by type = \"{kind}\"{hint}")]
    NotApplicable {
        key: &'static str,
        kind: SinkKind,
        hint: String,
    },
    #[error("sink.{key}: {reason}")]
    Invalid { key: String, reason: String },
}

/// A checked table, defaults filled in: what `build` makes a sink from.
#[derive(Debug, Clone)]
pub(crate) enum SinkSettings {
    Http(Box<HttpSettings>),
    File(FileSettings),
    Noop(Limits),
    Plugin(PluginSettings),
}

/// The `[sink]` table: where delivered records go, and how the drain batches
/// and retries them. Hot-reloadable. Checked once, when made (see the
/// module documentation).
#[derive(Clone)]
pub struct SinkConfig {
    sink: TypeConfig,
    drain: DrainConfig,
    /// What checking `sink` and `drain` found: the settings to build from,
    /// or the first problem.
    checked: Result<SinkSettings, SinkConfigError>,
}

impl SinkConfig {
    /// A table of `sink`'s type with its keys and the drain's; checks it.
    pub fn new(sink: TypeConfig, drain: DrainConfig) -> SinkConfig {
        SinkConfig::with_unused_key(sink, drain, None)
    }

    /// As [`SinkConfig::new`], for a table that also set `unused_key`, a key
    /// of another type (the first one found).
    fn with_unused_key(
        sink: TypeConfig,
        drain: DrainConfig,
        unused_key: Option<&'static str>,
    ) -> SinkConfig {
        let checked = check(&sink, &drain, unused_key);
        SinkConfig {
            sink,
            drain,
            checked,
        }
    }

    pub fn kind(&self) -> SinkKind {
        self.sink.kind()
    }

    /// `type` and the keys of that type.
    pub fn type_config(&self) -> &TypeConfig {
        &self.sink
    }

    /// The drain's batching and retry keys.
    pub fn drain(&self) -> &DrainConfig {
        &self.drain
    }

    /// The plugin's shared library, for `type = "plugin"` with a `path`.
    pub fn plugin_path(&self) -> Option<&Path> {
        match &self.sink {
            TypeConfig::Plugin(plugin) => plugin.path.as_deref(),
            _ => None,
        }
    }

    /// `Ok` if the table can be used, else the first problem its check
    /// found: a range, a required key, or a key the type does not use. The
    /// check ran when the table was made and touched neither the
    /// environment, the network nor the file system (`build` does).
    pub fn validate(&self) -> Result<(), SinkConfigError> {
        self.checked.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// The checked settings, or the first problem.
    pub(crate) fn settings(&self) -> Result<&SinkSettings, &SinkConfigError> {
        self.checked.as_ref()
    }
}

/// Two tables are equal when the user wrote the same keys: the same type
/// keys, drain keys and (for tables that cannot be used) problem. The
/// settings follow from those.
impl PartialEq for SinkConfig {
    fn eq(&self, other: &Self) -> bool {
        self.sink == other.sink
            && self.drain == other.drain
            && self.checked.as_ref().err() == other.checked.as_ref().err()
    }
}

impl Default for SinkConfig {
    /// A file sink at `spillway-data/delivered.ndjson`: works anywhere with
    /// no outside service.
    fn default() -> Self {
        let file = FileConfig {
            path: Some(PathBuf::from(DEFAULT_FILE_PATH)),
            ..FileConfig::default()
        };
        SinkConfig::new(TypeConfig::File(file), DrainConfig::default())
    }
}

/// The type's keys (whose own `Debug` hides secrets), the drain's, and the
/// problem if any; not the settings, which hold header values.
impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkConfig")
            .field("sink", &self.sink)
            .field("drain", &self.drain)
            .field("problem", &self.checked.as_ref().err())
            .finish()
    }
}

/// The one check of a table: keys of another type first, then the type's
/// own keys, then the drain's.
fn check(
    sink: &TypeConfig,
    drain: &DrainConfig,
    unused_key: Option<&'static str>,
) -> Result<SinkSettings, SinkConfigError> {
    let kind = sink.kind();
    if let Some(key) = unused_key {
        let users: Vec<String> = SinkKind::ALL
            .iter()
            .filter(|k| k.keys().contains(&key))
            .map(|k| format!("\"{k}\""))
            .collect();
        return Err(SinkConfigError::NotApplicable {
            key,
            kind,
            hint: format!(" (only by type = {})", users.join(" or ")),
        });
    }
    let settings = match sink {
        TypeConfig::Http(http) => SinkSettings::Http(Box::new(http.check(drain)?)),
        TypeConfig::File(file) => SinkSettings::File(file.check(drain)?),
        TypeConfig::Noop => SinkSettings::Noop(drain.limits()),
        TypeConfig::Plugin(plugin) => SinkSettings::Plugin(plugin.check()?),
    };
    drain.check()?;
    Ok(settings)
}

/// `value` must lie in `range`; `human` follows the range in the error
/// (e.g. `" (1 KiB..=64 MiB)"`).
pub(crate) fn check_range<T: Copy + Into<u64>>(
    key: &'static str,
    value: T,
    range: &RangeInclusive<T>,
    human: &str,
) -> Result<(), SinkConfigError> {
    let (value, start, end) = (value.into(), (*range.start()).into(), (*range.end()).into());
    if (start..=end).contains(&value) {
        return Ok(());
    }
    Err(SinkConfigError::OutOfRange {
        key,
        value,
        allowed: format!("{start}..={end}{human}"),
    })
}

/// `path`, required for `kind` and naming a file (`what` says which kind of
/// file, for the error). The file and plugin types share this key.
pub(crate) fn required_path<'a>(
    path: &'a Option<PathBuf>,
    kind: SinkKind,
    what: &str,
) -> Result<&'a PathBuf, SinkConfigError> {
    let Some(path) = path else {
        return Err(SinkConfigError::Missing { key: "path", kind });
    };
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(SinkConfigError::Invalid {
            key: "path".into(),
            reason: format!("{path:?} does not name {what}"),
        });
    }
    Ok(path)
}

// ---- reading the table -------------------------------------------------------

/// Every key a `[sink]` table may hold, in the order serde's "expected one
/// of" lists them: `type`, each type's keys, the drain's.
fn table_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = vec!["type"];
        for kind in SinkKind::ALL {
            for &key in kind.keys() {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys.extend_from_slice(DrainConfig::KEYS);
        keys
    })
}

/// Every type's keys as read so far: `type` may come after the keys of its
/// type, so all are read, and the keys of the types not chosen are then
/// reported by the check.
#[derive(Default)]
struct AllTypeKeys {
    http: HttpConfig,
    file: FileConfig,
    plugin: PluginConfig,
    /// The type-specific keys the table set.
    written: Vec<&'static str>,
}

impl AllTypeKeys {
    /// Reads the value of `key`, a key of some type, into that type's keys.
    fn read_key<'de, A: MapAccess<'de>>(
        &mut self,
        key: &'static str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        if key == "path" {
            // The file sink's output or a plugin's library: one value, kept
            // for both until `type` is known.
            self.file.read_key(key, map)?;
            self.plugin.path.clone_from(&self.file.path);
        } else if HttpConfig::KEYS.contains(&key) {
            self.http.read_key(key, map)?;
        } else if FileConfig::KEYS.contains(&key) {
            self.file.read_key(key, map)?;
        } else {
            self.plugin.read_key(key, map)?;
        }
        self.written.push(key);
        Ok(())
    }

    /// The keys of `kind`, and the first key written that `kind` does not
    /// use.
    fn into_type(self, kind: SinkKind) -> (TypeConfig, Option<&'static str>) {
        // The order keys of another type are looked for in.
        const OWNERS: [SinkKind; 3] = [SinkKind::Http, SinkKind::Plugin, SinkKind::File];
        let unused_key = OWNERS
            .iter()
            .flat_map(|owner| owner.keys())
            .find(|key| self.written.contains(key) && !kind.keys().contains(key))
            .copied();
        let sink = match kind {
            SinkKind::Http => TypeConfig::Http(self.http),
            SinkKind::File => TypeConfig::File(self.file),
            SinkKind::Noop => TypeConfig::Noop,
            SinkKind::Plugin => TypeConfig::Plugin(self.plugin),
        };
        (sink, unused_key)
    }
}

/// Reads the table key by key, so that each value is read by the type that
/// owns the key and a TOML error still points at the value.
impl<'de> Deserialize<'de> for SinkConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("SinkConfig", table_keys(), TableVisitor)
    }
}

struct TableVisitor;

impl<'de> Visitor<'de> for TableVisitor {
    type Value = SinkConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct SinkConfig")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SinkConfig, A::Error> {
        let mut kind: Option<SinkKind> = None;
        let mut type_keys = AllTypeKeys::default();
        let mut drain = DrainConfig::default();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key == "type" {
                kind = Some(map.next_value()?);
            } else if DrainConfig::KEYS.contains(&key) {
                drain.read_key(key, &mut map)?;
            } else {
                type_keys.read_key(key, &mut map)?;
            }
        }
        let kind = kind.ok_or_else(|| de::Error::missing_field("type"))?;
        let (sink, unused_key) = type_keys.into_type(kind);
        Ok(SinkConfig::with_unused_key(sink, drain, unused_key))
    }
}

/// A key of the table: one of [`table_keys`], else an "unknown field" error
/// at that key.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<&'static str, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<&'static str, E> {
        let keys = table_keys();
        match keys.iter().find(|&&known| known == key) {
            Some(known) => Ok(known),
            None => Err(E::unknown_field(key, keys)),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The `[sink]` table of `toml_text`, or the TOML error.
    pub(crate) fn parse(toml_text: &str) -> Result<SinkConfig, String> {
        #[derive(Deserialize)]
        struct Root {
            sink: SinkConfig,
        }
        toml::from_str::<Root>(toml_text)
            .map(|r| r.sink)
            .map_err(|e| e.to_string())
    }

    /// The message `cfg` is rejected with.
    pub(crate) fn err(cfg: &SinkConfig) -> String {
        cfg.validate()
            .expect_err("config should be rejected")
            .to_string()
    }

    /// The default file sink with `drain`'s keys.
    fn with_drain(drain: DrainConfig) -> SinkConfig {
        SinkConfig::new(SinkConfig::default().type_config().clone(), drain)
    }

    #[test]
    fn default_is_a_valid_file_sink() {
        let cfg = SinkConfig::default();
        assert_eq!(cfg.kind(), SinkKind::File);
        let TypeConfig::File(file) = cfg.type_config() else {
            panic!("{cfg:?}")
        };
        assert_eq!(
            file.path.as_deref(),
            Some(std::path::Path::new("spillway-data/delivered.ndjson"))
        );
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.drain().max_retry_duration(), None);
    }

    #[test]
    fn unknown_key_is_an_error() {
        let e = parse("[sink]\ntype = \"noop\"\nurll = \"x\"\n").unwrap_err();
        assert!(e.contains("unknown field `urll`"), "{e}");
    }

    #[test]
    fn bad_type_lists_the_allowed_ones() {
        let e = parse("[sink]\ntype = \"kafka\"\n").unwrap_err();
        assert!(e.contains("`http`, `file`, `noop`"), "{e}");
    }

    #[test]
    fn missing_type_is_an_error() {
        let e = parse("[sink]\npath = \"x\"\n").unwrap_err();
        assert!(e.contains("missing field `type`"), "{e}");
    }

    #[test]
    fn keys_of_another_type_are_errors() {
        let cfg = parse("[sink]\ntype = \"file\"\npath = \"x\"\nurl = \"http://a/\"\n").unwrap();
        assert_eq!(
            err(&cfg),
            "sink.url is not used by type = \"file\" (only by type = \"http\")"
        );
        let cfg = parse("[sink]\nfsync = false\ntype = \"http\"\nurl = \"http://a/\"\n").unwrap();
        assert_eq!(
            err(&cfg),
            "sink.fsync is not used by type = \"http\" (only by type = \"file\")"
        );
        let cfg = parse("[sink]\ntype = \"noop\"\npath = \"x\"\n").unwrap();
        assert!(err(&cfg).starts_with("sink.path is not used by type = \"noop\""));
    }

    /// A value of the right shape for each type-specific key.
    fn sample_value(key: &str) -> &'static str {
        match key {
            "url" => "\"http://a/\"",
            "delivery" => "\"batched\"",
            "method" => "\"POST\"",
            "headers" => "{}",
            "bearer_token_env" => "\"T\"",
            "gzip" => "true",
            "timeout_ms" => "1000",
            "concurrency" => "1",
            "encoding" => "\"ndjson\"",
            "path" => "\"p\"",
            "format" => "\"ndjson\"",
            "rotate_bytes" => "1048576",
            "fsync" => "true",
            "options" => "{}",
            other => panic!("test does not know key {other}"),
        }
    }

    #[test]
    fn every_type_specific_key_is_checked() {
        // Setting each key on a type that does not use it must fail and
        // name that key.
        let keys: Vec<&str> = table_keys()
            .iter()
            .copied()
            .filter(|k| *k != "type" && !DrainConfig::KEYS.contains(k))
            .collect();
        for key in keys {
            let one = parse(&format!(
                "[sink]\ntype = \"noop\"\n{key} = {}\n",
                sample_value(key)
            ))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(
                err(&one).starts_with(&format!("sink.{key} is not used by type = \"noop\"")),
                "{key}"
            );
        }
    }

    #[test]
    fn a_noop_sink_needs_no_keys() {
        assert_eq!(
            SinkConfig::new(TypeConfig::Noop, DrainConfig::default()).validate(),
            Ok(())
        );
    }

    #[test]
    fn drain_range_errors_name_the_key_and_the_range() {
        let d = DrainConfig::default;
        let cases: Vec<(DrainConfig, &str)> = vec![
            (DrainConfig { max_records: 0, ..d() }, "sink.max_records = 0 is out of range: allowed 1..=100000"),
            (DrainConfig { max_records: 100_001, ..d() }, "sink.max_records = 100001"),
            (DrainConfig { max_bytes: 1023, ..d() }, "sink.max_bytes = 1023 is out of range: allowed 1024..=67108864 (1 KiB..=64 MiB)"),
            (DrainConfig { max_bytes: 64 * MIB + 1, ..d() }, "sink.max_bytes = "),
            (DrainConfig { linger_ms: 10_001, ..d() }, "sink.linger_ms = 10001 is out of range: allowed 0..=10000"),
            (DrainConfig { retry_initial_ms: 0, ..d() }, "sink.retry_initial_ms = 0 is out of range: allowed 1..=60000"),
            (DrainConfig { retry_initial_ms: 60_001, retry_max_ms: 70_000, ..d() }, "sink.retry_initial_ms = 60001"),
            (DrainConfig { retry_initial_ms: 5, retry_max_ms: 9, ..d() }, "sink.retry_max_ms = 9 is out of range: allowed 10..=3600000"),
            (DrainConfig { retry_max_ms: 3_600_001, ..d() }, "sink.retry_max_ms = 3600001"),
            (
                DrainConfig { retry_initial_ms: 500, retry_max_ms: 400, ..d() },
                "sink.retry_max_ms: 400 is less than sink.retry_initial_ms = 500",
            ),
            (
                DrainConfig { max_retry_duration_ms: 999, ..d() },
                "sink.max_retry_duration_ms = 999 is out of range: allowed 0 (retry forever) or 1000..=604800000",
            ),
            (DrainConfig { max_retry_duration_ms: 604_800_001, ..d() }, "sink.max_retry_duration_ms = 604800001"),
            (DrainConfig { build_timeout_ms: 99, ..d() }, "sink.build_timeout_ms = 99 is out of range: allowed 100..=600000"),
            (DrainConfig { build_timeout_ms: 600_001, ..d() }, "sink.build_timeout_ms = 600001"),
        ];
        for (drain, want) in cases {
            let got = err(&with_drain(drain));
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn drain_range_bounds_are_inclusive() {
        let ok = [
            DrainConfig {
                max_records: 100_000,
                max_bytes: 64 * MIB,
                linger_ms: 0,
                ..DrainConfig::default()
            },
            DrainConfig {
                retry_initial_ms: 10,
                retry_max_ms: 10,
                ..DrainConfig::default()
            },
            DrainConfig {
                max_retry_duration_ms: 1000,
                ..DrainConfig::default()
            },
            DrainConfig {
                max_retry_duration_ms: 604_800_000,
                ..DrainConfig::default()
            },
        ];
        for drain in ok {
            let cfg = with_drain(drain);
            assert_eq!(cfg.validate(), Ok(()), "{cfg:?}");
        }
    }

    #[test]
    fn every_key_is_documented() {
        let docs = include_str!("../../docs/sinks.md");
        for key in table_keys() {
            assert!(
                docs.contains(&format!("\n| `{key}` | ")),
                "docs/sinks.md has no table row for {key}"
            );
        }
    }
}
