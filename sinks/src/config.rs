//! The `[sink]` table of spillway's configuration file.
//!
//! [`SinkConfig`] is what the user writes; its doc comments are the user
//! documentation of every key (mirrored in `docs/sinks.md`). It is a flat
//! struct: `type` picks the sink, the HTTP and file keys are optional and
//! may only be set for the type that uses them, and the drain's batching and
//! retry keys apply to every type.
//!
//! Parsing (serde) only checks shapes: a string where a string belongs, a
//! known enum value, no unknown key. [`SinkConfig::validate`] checks ranges,
//! required keys and keys that do not apply to the chosen type, and names
//! the offending key as `sink.<key>` with what is allowed.
//!
//! Adding a sink type: add a [`SinkKind`] variant, its keys as `Option`
//! fields, a row per key in [`SinkConfig::type_specific_keys`], and an arm in
//! `lib.rs`'s `build`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

pub const DEFAULT_FILE_PATH: &str = "spillway-data/delivered.ndjson";

pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
pub const TIMEOUT_MS_RANGE: RangeInclusive<u64> = 100..=600_000;
pub const DEFAULT_CONCURRENCY: u32 = 8;
pub const CONCURRENCY_RANGE: RangeInclusive<u32> = 1..=256;

pub const DEFAULT_ROTATE_BYTES: u64 = 256 * MIB;
pub const ROTATE_BYTES_RANGE: RangeInclusive<u64> = MIB..=64 * GIB;

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
    /// The value the user writes for `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Http => "http",
            SinkKind::File => "file",
            SinkKind::Noop => "noop",
            SinkKind::Plugin => "plugin",
        }
    }
}

impl fmt::Display for SinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the HTTP sink maps records to requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// One request per batch, the body framed by `encoding`.
    #[default]
    Batched,
    /// One request per record, the raw payload as the body.
    PerRecord,
}

/// HTTP method of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum HttpMethod {
    #[default]
    #[serde(rename = "POST")]
    Post,
    #[serde(rename = "PUT")]
    Put,
    #[serde(rename = "PATCH")]
    Patch,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
        }
    }
}

/// Body framing of a batched HTTP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpEncoding {
    /// Each payload followed by `\n` (`application/x-ndjson`).
    #[default]
    Ndjson,
    /// `[p1,p2,...]`; every payload must be a JSON value (`application/json`).
    JsonArray,
    /// Each payload as u32 little-endian length + bytes
    /// (`application/octet-stream`).
    LengthPrefixed,
}

impl HttpEncoding {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpEncoding::Ndjson => "ndjson",
            HttpEncoding::JsonArray => "json_array",
            HttpEncoding::LengthPrefixed => "length_prefixed",
        }
    }
}

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

/// The `[sink]` table: where delivered records go, and how the drain batches
/// and retries them. Hot-reloadable.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// Which sink: `"http"`, `"file"` or `"noop"`. Required.
    #[serde(rename = "type")]
    pub kind: SinkKind,

    // ---- type = "http" ----
    /// HTTP: the endpoint, an `http://` or `https://` URL. Required for
    /// `type = "http"`.
    pub url: Option<String>,
    /// HTTP: `"batched"` (default: one request per batch) or `"per_record"`
    /// (one request per record, raw payload body).
    pub delivery: Option<Delivery>,
    /// HTTP: `"POST"` (default), `"PUT"` or `"PATCH"`.
    pub method: Option<HttpMethod>,
    /// HTTP: extra headers sent with every request, a table of name = value
    /// strings. Names and values must be valid HTTP header names and values;
    /// `Content-Type` may be overridden, headers spillway sets itself
    /// (`Idempotency-Key`, `Spillway-*`, `Content-Encoding`, `Content-Length`,
    /// `Transfer-Encoding`, `Host`, and `Authorization` when
    /// `bearer_token_env` is set) may not.
    pub headers: Option<BTreeMap<String, String>>,
    /// HTTP: name of an environment variable holding a bearer token, sent as
    /// `Authorization: Bearer <token>`. The variable must be set when the
    /// sink is built (start and reload). Default: no token.
    pub bearer_token_env: Option<String>,
    /// HTTP: compress request bodies with gzip and send
    /// `Content-Encoding: gzip`. Default false.
    pub gzip: Option<bool>,
    /// HTTP: time limit of one request, connect to last response byte, in
    /// milliseconds. Default 10000, range 100..=600000.
    pub timeout_ms: Option<u64>,
    /// HTTP, `delivery = "per_record"` only: requests in flight at once.
    /// Default 8, range 1..=256.
    pub concurrency: Option<u32>,
    /// HTTP, `delivery = "batched"` only: body framing, `"ndjson"` (default),
    /// `"json_array"` or `"length_prefixed"`.
    pub encoding: Option<HttpEncoding>,

    // ---- type = "file" ----
    /// File: the file records are appended to. Required for `type = "file"`.
    /// Its folder is created (mode 0700) if missing; the file is mode 0600.
    pub path: Option<PathBuf>,
    /// File: `"ndjson"` (default) or `"length_prefixed"`.
    pub format: Option<FileFormat>,
    /// File: when an append would make the file larger than this many
    /// bytes, it is renamed to `<path>.<unix_ms>` and a new file started.
    /// Default 268435456 (256 MiB), range 1 MiB..=64 GiB.
    pub rotate_bytes: Option<u64>,
    /// File: fsync (fdatasync) the file after every batch before reporting
    /// it delivered. Default true.
    pub fsync: Option<bool>,

    // ---- type = "plugin" (`path` is the plugin's shared library) ----
    /// Plugin: the `[sink.options]` table, handed to the plugin's `create`
    /// as TOML text; the plugin validates it. Default: empty.
    pub options: Option<toml::Table>,

    // ---- every type: the drain's batching and retries ----
    /// Most records in one batch. Default 1000, range 1..=100000.
    #[serde(default = "default_max_records")]
    pub max_records: u32,
    /// Most payload bytes in one batch (a single larger record is still sent
    /// alone). Default 4194304 (4 MiB), range 1 KiB..=64 MiB.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// How long the drain waits for more records before sending a batch that
    /// is not full, in milliseconds. Default 5, range 0..=10000.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
    /// First backoff after a transient failure, in milliseconds; it doubles
    /// (with jitter) on each further failure. Default 100, range 1..=60000.
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    /// Longest backoff between two attempts, in milliseconds. Default 30000,
    /// range 10..=3600000, and at least `retry_initial_ms`.
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
    /// After a batch has failed transiently for this long, in milliseconds,
    /// it is dead-lettered. Default 0: retry forever. Otherwise
    /// 1000..=604800000 (7 days).
    #[serde(default)]
    pub max_retry_duration_ms: u64,
}

fn default_max_records() -> u32 {
    DEFAULT_MAX_RECORDS
}
fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}
fn default_linger_ms() -> u64 {
    DEFAULT_LINGER_MS
}
fn default_retry_initial_ms() -> u64 {
    DEFAULT_RETRY_INITIAL_MS
}
fn default_retry_max_ms() -> u64 {
    DEFAULT_RETRY_MAX_MS
}

impl Default for SinkConfig {
    /// A file sink at `spillway-data/delivered.ndjson`: works anywhere with
    /// no outside service.
    fn default() -> Self {
        SinkConfig {
            path: Some(PathBuf::from(DEFAULT_FILE_PATH)),
            ..SinkConfig::empty(SinkKind::File)
        }
    }
}

/// Debug without header values: they often hold API keys.
impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Option<Vec<&String>> = self.headers.as_ref().map(|h| h.keys().collect());
        f.debug_struct("SinkConfig")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("delivery", &self.delivery)
            .field("method", &self.method)
            .field("headers (values redacted)", &header_names)
            .field("bearer_token_env", &self.bearer_token_env)
            .field("gzip", &self.gzip)
            .field("timeout_ms", &self.timeout_ms)
            .field("concurrency", &self.concurrency)
            .field("encoding", &self.encoding)
            .field("path", &self.path)
            .field("format", &self.format)
            .field("rotate_bytes", &self.rotate_bytes)
            .field("fsync", &self.fsync)
            .field(
                "options (values redacted)",
                &self.options.as_ref().map(|t| t.keys().collect::<Vec<_>>()),
            )
            .field("max_records", &self.max_records)
            .field("max_bytes", &self.max_bytes)
            .field("linger_ms", &self.linger_ms)
            .field("retry_initial_ms", &self.retry_initial_ms)
            .field("retry_max_ms", &self.retry_max_ms)
            .field("max_retry_duration_ms", &self.max_retry_duration_ms)
            .finish()
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

impl SinkConfig {
    /// A config of `kind` with no type-specific key set and the drain's
    /// defaults.
    pub fn empty(kind: SinkKind) -> Self {
        SinkConfig {
            kind,
            url: None,
            delivery: None,
            method: None,
            headers: None,
            bearer_token_env: None,
            gzip: None,
            timeout_ms: None,
            concurrency: None,
            encoding: None,
            path: None,
            format: None,
            rotate_bytes: None,
            fsync: None,
            options: None,
            max_records: DEFAULT_MAX_RECORDS,
            max_bytes: DEFAULT_MAX_BYTES,
            linger_ms: DEFAULT_LINGER_MS,
            retry_initial_ms: DEFAULT_RETRY_INITIAL_MS,
            retry_max_ms: DEFAULT_RETRY_MAX_MS,
            max_retry_duration_ms: 0,
        }
    }

    /// Every type-specific key: its name, whether it is set, and the types
    /// that use it. The one place that says which key belongs to which type.
    fn type_specific_keys(&self) -> [(&'static str, bool, &'static [SinkKind]); 14] {
        const HTTP: &[SinkKind] = &[SinkKind::Http];
        const FILE: &[SinkKind] = &[SinkKind::File];
        const FILE_OR_PLUGIN: &[SinkKind] = &[SinkKind::File, SinkKind::Plugin];
        const PLUGIN: &[SinkKind] = &[SinkKind::Plugin];
        [
            ("url", self.url.is_some(), HTTP),
            ("delivery", self.delivery.is_some(), HTTP),
            ("method", self.method.is_some(), HTTP),
            ("headers", self.headers.is_some(), HTTP),
            ("bearer_token_env", self.bearer_token_env.is_some(), HTTP),
            ("gzip", self.gzip.is_some(), HTTP),
            ("timeout_ms", self.timeout_ms.is_some(), HTTP),
            ("concurrency", self.concurrency.is_some(), HTTP),
            ("encoding", self.encoding.is_some(), HTTP),
            ("path", self.path.is_some(), FILE_OR_PLUGIN),
            ("options", self.options.is_some(), PLUGIN),
            ("format", self.format.is_some(), FILE),
            ("rotate_bytes", self.rotate_bytes.is_some(), FILE),
            ("fsync", self.fsync.is_some(), FILE),
        ]
    }

    /// Checks ranges, required keys and keys that do not apply to `type`.
    /// Reports the first problem found. Does not touch the environment, the
    /// network or the file system (`build` does).
    pub fn validate(&self) -> Result<(), SinkConfigError> {
        for (key, is_set, kinds) in self.type_specific_keys() {
            if is_set && !kinds.contains(&self.kind) {
                let users: Vec<String> = kinds.iter().map(|k| format!("\"{k}\"")).collect();
                return Err(SinkConfigError::NotApplicable {
                    key,
                    kind: self.kind,
                    hint: format!(" (only by type = {})", users.join(" or ")),
                });
            }
        }
        match self.kind {
            SinkKind::Http => self.validate_http()?,
            SinkKind::File => self.validate_file()?,
            SinkKind::Plugin => self.validate_plugin()?,
            SinkKind::Noop => {}
        }
        self.validate_drain()
    }

    fn validate_http(&self) -> Result<(), SinkConfigError> {
        let Some(url) = &self.url else {
            return Err(SinkConfigError::Missing {
                key: "url",
                kind: self.kind,
            });
        };
        check_http_url(url)?;
        let delivery = self.delivery.unwrap_or_default();
        if delivery == Delivery::PerRecord && self.encoding.is_some() {
            return Err(SinkConfigError::NotApplicable {
                key: "encoding",
                kind: self.kind,
                hint: " with delivery = \"per_record\" (each body is the raw payload)".into(),
            });
        }
        if delivery == Delivery::Batched && self.concurrency.is_some() {
            return Err(SinkConfigError::NotApplicable {
                key: "concurrency",
                kind: self.kind,
                hint: " with delivery = \"batched\" (one request per batch at a time)".into(),
            });
        }
        if let Some(v) = self.timeout_ms {
            check_range("timeout_ms", v, &TIMEOUT_MS_RANGE, "")?;
        }
        if let Some(v) = self.concurrency {
            check_range("concurrency", u64::from(v), &widen(&CONCURRENCY_RANGE), "")?;
        }
        if let Some(name) = &self.bearer_token_env {
            check_env_var_name(name)?;
        }
        if let Some(headers) = &self.headers {
            for (name, value) in headers {
                check_header(name, value, self.bearer_token_env.is_some())?;
            }
        }
        Ok(())
    }

    /// `path`, required and naming a file (`what` says which kind, for the error).
    fn required_path(&self, what: &str) -> Result<&PathBuf, SinkConfigError> {
        let Some(path) = &self.path else {
            return Err(SinkConfigError::Missing {
                key: "path",
                kind: self.kind,
            });
        };
        if path.as_os_str().is_empty() || path.file_name().is_none() {
            return Err(SinkConfigError::Invalid {
                key: "path".into(),
                reason: format!("{path:?} does not name {what}"),
            });
        }
        Ok(path)
    }

    fn validate_file(&self) -> Result<(), SinkConfigError> {
        self.required_path("a file")?;
        if let Some(v) = self.rotate_bytes {
            check_range("rotate_bytes", v, &ROTATE_BYTES_RANGE, " (1 MiB..=64 GiB)")?;
        }
        Ok(())
    }

    fn validate_plugin(&self) -> Result<(), SinkConfigError> {
        self.required_path("a shared library (e.g. target/release/libmy_sink.so)")?;
        Ok(())
    }

    /// The `[sink.options]` table as TOML text for a plugin's `create`.
    pub fn options_toml(&self) -> String {
        self.options
            .as_ref()
            .map(|t| toml::to_string(t).unwrap_or_default())
            .unwrap_or_default()
    }

    fn validate_drain(&self) -> Result<(), SinkConfigError> {
        check_range(
            "max_records",
            u64::from(self.max_records),
            &widen(&MAX_RECORDS_RANGE),
            "",
        )?;
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

fn widen(range: &RangeInclusive<u32>) -> RangeInclusive<u64> {
    u64::from(*range.start())..=u64::from(*range.end())
}

fn check_range(
    key: &'static str,
    value: u64,
    range: &RangeInclusive<u64>,
    human: &str,
) -> Result<(), SinkConfigError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(SinkConfigError::OutOfRange {
        key,
        value,
        allowed: format!("{}..={}{human}", range.start(), range.end()),
    })
}

/// The URL must parse and be http(s) with a host.
pub(crate) fn check_http_url(url: &str) -> Result<reqwest::Url, SinkConfigError> {
    let invalid = |reason: String| SinkConfigError::Invalid {
        key: "url".into(),
        reason,
    };
    let parsed =
        reqwest::Url::parse(url).map_err(|e| invalid(format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "{url:?} has scheme \"{}\"; allowed: http:// or https://",
            parsed.scheme()
        )));
    }
    if !matches!(parsed.host_str(), Some(host) if !host.is_empty()) {
        return Err(invalid(format!("{url:?} has no host")));
    }
    Ok(parsed)
}

fn check_env_var_name(name: &str) -> Result<(), SinkConfigError> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(SinkConfigError::Invalid {
            key: "bearer_token_env".into(),
            reason: format!("{name:?} is not an environment variable name"),
        });
    }
    Ok(())
}

/// Header names spillway sets itself (lower case). `authorization` is
/// reserved only when `bearer_token_env` is set.
const RESERVED_HEADERS: &[&str] = &[
    "idempotency-key",
    "content-encoding",
    "content-length",
    "transfer-encoding",
    "host",
];

fn check_header(name: &str, value: &str, has_bearer: bool) -> Result<(), SinkConfigError> {
    let invalid = |reason: String| SinkConfigError::Invalid {
        key: format!("headers.{name:?}"),
        reason,
    };
    let parsed = reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| invalid(format!("{name:?} is not a valid HTTP header name")))?;
    let lower = parsed.as_str();
    if RESERVED_HEADERS.contains(&lower) || lower.starts_with("spillway-") {
        return Err(invalid(format!(
            "{name} is set by spillway and cannot be overridden"
        )));
    }
    if has_bearer && lower == "authorization" {
        return Err(invalid(
            "Authorization is set from sink.bearer_token_env; set one or the other".into(),
        ));
    }
    reqwest::header::HeaderValue::from_str(value).map_err(|_| {
        invalid(
            "the value is not a valid HTTP header value (control characters or non-ASCII)".into(),
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<SinkConfig, String> {
        #[derive(Deserialize)]
        struct Root {
            sink: SinkConfig,
        }
        toml::from_str::<Root>(toml_text)
            .map(|r| r.sink)
            .map_err(|e| e.to_string())
    }

    fn http() -> SinkConfig {
        SinkConfig {
            url: Some("http://127.0.0.1:9/ingest".into()),
            ..SinkConfig::empty(SinkKind::Http)
        }
    }

    fn err(cfg: &SinkConfig) -> String {
        cfg.validate()
            .expect_err("config should be rejected")
            .to_string()
    }

    #[test]
    fn default_is_a_valid_file_sink() {
        let cfg = SinkConfig::default();
        assert_eq!(cfg.kind, SinkKind::File);
        assert_eq!(
            cfg.path.as_deref(),
            Some(std::path::Path::new("spillway-data/delivered.ndjson"))
        );
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.max_retry_duration(), None);
    }

    #[test]
    fn parse_minimal_http_gets_defaults() {
        let cfg = parse("[sink]\ntype = \"http\"\nurl = \"https://example.test/in\"\n").unwrap();
        assert_eq!(cfg.kind, SinkKind::Http);
        assert_eq!(cfg.delivery, None);
        assert_eq!(cfg.max_records, 1000);
        assert_eq!(cfg.max_bytes, 4 * 1024 * 1024);
        assert_eq!(cfg.linger_ms, 5);
        assert_eq!(cfg.retry_initial_ms, 100);
        assert_eq!(cfg.retry_max_ms, 30_000);
        assert_eq!(cfg.max_retry_duration_ms, 0);
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(
            cfg,
            SinkConfig {
                url: Some("https://example.test/in".into()),
                ..SinkConfig::empty(SinkKind::Http)
            }
        );
    }

    #[test]
    fn parse_full_http() {
        let cfg = parse(
            r#"
[sink]
type = "http"
url = "http://127.0.0.1:8080/x"
delivery = "per_record"
method = "PUT"
headers = { "X-Tenant" = "a1" }
gzip = true
timeout_ms = 2500
concurrency = 16
max_retry_duration_ms = 60000
"#,
        )
        .unwrap();
        assert_eq!(cfg.delivery, Some(Delivery::PerRecord));
        assert_eq!(cfg.method, Some(HttpMethod::Put));
        assert_eq!(cfg.headers.as_ref().unwrap()["X-Tenant"], "a1");
        assert_eq!(cfg.concurrency, Some(16));
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.max_retry_duration(), Some(Duration::from_secs(60)));
    }

    #[test]
    fn unknown_key_is_an_error() {
        let e = parse("[sink]\ntype = \"noop\"\nurll = \"x\"\n").unwrap_err();
        assert!(e.contains("unknown field `urll`"), "{e}");
    }

    #[test]
    fn bad_enum_value_lists_the_allowed_ones() {
        let e = parse("[sink]\ntype = \"kafka\"\n").unwrap_err();
        assert!(e.contains("`http`, `file`, `noop`"), "{e}");
        let e =
            parse("[sink]\ntype = \"http\"\nurl = \"http://a\"\nmethod = \"GET\"\n").unwrap_err();
        assert!(e.contains("`POST`, `PUT`, `PATCH`"), "{e}");
        let e =
            parse("[sink]\ntype = \"http\"\nurl = \"http://a\"\nencoding = \"csv\"\n").unwrap_err();
        assert!(
            e.contains("`ndjson`, `json_array`, `length_prefixed`"),
            "{e}"
        );
    }

    #[test]
    fn missing_type_is_an_error() {
        let e = parse("[sink]\npath = \"x\"\n").unwrap_err();
        assert!(e.contains("missing field `type`"), "{e}");
    }

    #[test]
    fn keys_of_another_type_are_errors() {
        let cfg = SinkConfig {
            url: Some("http://a/".into()),
            ..SinkConfig::default()
        };
        assert_eq!(
            err(&cfg),
            "sink.url is not used by type = \"file\" (only by type = \"http\")"
        );
        let cfg = SinkConfig {
            fsync: Some(false),
            ..http()
        };
        assert_eq!(
            err(&cfg),
            "sink.fsync is not used by type = \"http\" (only by type = \"file\")"
        );
        let cfg = SinkConfig {
            path: Some("x".into()),
            ..SinkConfig::empty(SinkKind::Noop)
        };
        assert!(err(&cfg).starts_with("sink.path is not used by type = \"noop\""));
        let cfg = SinkConfig {
            delivery: Some(Delivery::PerRecord),
            encoding: Some(HttpEncoding::Ndjson),
            ..http()
        };
        assert!(err(&cfg).starts_with(
            "sink.encoding is not used by type = \"http\" with delivery = \"per_record\""
        ));
        let cfg = SinkConfig {
            concurrency: Some(4),
            ..http()
        };
        assert!(err(&cfg).starts_with(
            "sink.concurrency is not used by type = \"http\" with delivery = \"batched\""
        ));
    }

    #[test]
    fn every_type_specific_key_is_checked() {
        // Setting each key on a type that does not use it must fail and
        // name that key.
        let mut all = SinkConfig::empty(SinkKind::Noop);
        all.url = Some("http://a/".into());
        all.delivery = Some(Delivery::Batched);
        all.method = Some(HttpMethod::Post);
        all.headers = Some(BTreeMap::new());
        all.bearer_token_env = Some("T".into());
        all.gzip = Some(true);
        all.timeout_ms = Some(1000);
        all.concurrency = Some(1);
        all.encoding = Some(HttpEncoding::Ndjson);
        all.path = Some("p".into());
        all.format = Some(FileFormat::Ndjson);
        all.rotate_bytes = Some(MIB);
        all.fsync = Some(true);
        all.options = Some(toml::Table::new());
        let keys = all.type_specific_keys();
        assert!(
            keys.iter().all(|(_, set, _)| *set),
            "a key is missing from type_specific_keys"
        );
        for (key, _, _) in keys {
            let mut one = SinkConfig::empty(SinkKind::Noop);
            match key {
                "url" => one.url = all.url.clone(),
                "delivery" => one.delivery = all.delivery,
                "method" => one.method = all.method,
                "headers" => one.headers = all.headers.clone(),
                "bearer_token_env" => one.bearer_token_env = all.bearer_token_env.clone(),
                "gzip" => one.gzip = all.gzip,
                "timeout_ms" => one.timeout_ms = all.timeout_ms,
                "concurrency" => one.concurrency = all.concurrency,
                "encoding" => one.encoding = all.encoding,
                "path" => one.path = all.path.clone(),
                "format" => one.format = all.format,
                "rotate_bytes" => one.rotate_bytes = all.rotate_bytes,
                "fsync" => one.fsync = all.fsync,
                "options" => one.options = all.options.clone(),
                other => panic!("test does not know key {other}"),
            }
            assert!(
                err(&one).starts_with(&format!("sink.{key} is not used by type = \"noop\"")),
                "{key}"
            );
        }
    }

    #[test]
    fn required_keys() {
        assert_eq!(
            err(&SinkConfig::empty(SinkKind::Http)),
            "sink.url is required for type = \"http\""
        );
        assert_eq!(
            err(&SinkConfig::empty(SinkKind::File)),
            "sink.path is required for type = \"file\""
        );
        assert_eq!(SinkConfig::empty(SinkKind::Noop).validate(), Ok(()));
    }

    #[test]
    fn url_must_be_http_or_https() {
        for bad in [
            "ftp://a/b",
            "not a url",
            "unix:/tmp/sock",
            "file:///etc/passwd",
        ] {
            let cfg = SinkConfig {
                url: Some(bad.into()),
                ..http()
            };
            assert!(err(&cfg).starts_with("sink.url: "), "{bad}: {}", err(&cfg));
        }
        let cfg = SinkConfig {
            url: Some("ftp://a/b".into()),
            ..http()
        };
        assert!(err(&cfg).contains("allowed: http:// or https://"));
        for good in [
            "http://localhost:8080/x",
            "https://example.test",
            "http://[::1]:9/a?b=c",
        ] {
            let cfg = SinkConfig {
                url: Some(good.into()),
                ..http()
            };
            assert_eq!(cfg.validate(), Ok(()), "{good}");
        }
    }

    #[test]
    fn range_errors_name_the_key_and_the_range() {
        let cases: Vec<(SinkConfig, &str)> = vec![
            (SinkConfig { timeout_ms: Some(99), ..http() }, "sink.timeout_ms = 99 is out of range: allowed 100..=600000"),
            (SinkConfig { timeout_ms: Some(600_001), ..http() }, "sink.timeout_ms = 600001"),
            (
                SinkConfig { delivery: Some(Delivery::PerRecord), concurrency: Some(0), ..http() },
                "sink.concurrency = 0 is out of range: allowed 1..=256",
            ),
            (
                SinkConfig { delivery: Some(Delivery::PerRecord), concurrency: Some(257), ..http() },
                "sink.concurrency = 257",
            ),
            (
                SinkConfig { rotate_bytes: Some(MIB - 1), ..SinkConfig::default() },
                "sink.rotate_bytes = 1048575 is out of range: allowed 1048576..=68719476736 (1 MiB..=64 GiB)",
            ),
            (SinkConfig { rotate_bytes: Some(64 * GIB + 1), ..SinkConfig::default() }, "sink.rotate_bytes = "),
            (SinkConfig { max_records: 0, ..SinkConfig::default() }, "sink.max_records = 0 is out of range: allowed 1..=100000"),
            (SinkConfig { max_records: 100_001, ..SinkConfig::default() }, "sink.max_records = 100001"),
            (SinkConfig { max_bytes: 1023, ..SinkConfig::default() }, "sink.max_bytes = 1023 is out of range: allowed 1024..=67108864 (1 KiB..=64 MiB)"),
            (SinkConfig { max_bytes: 64 * MIB + 1, ..SinkConfig::default() }, "sink.max_bytes = "),
            (SinkConfig { linger_ms: 10_001, ..SinkConfig::default() }, "sink.linger_ms = 10001 is out of range: allowed 0..=10000"),
            (SinkConfig { retry_initial_ms: 0, ..SinkConfig::default() }, "sink.retry_initial_ms = 0 is out of range: allowed 1..=60000"),
            (SinkConfig { retry_initial_ms: 60_001, retry_max_ms: 70_000, ..SinkConfig::default() }, "sink.retry_initial_ms = 60001"),
            (SinkConfig { retry_initial_ms: 5, retry_max_ms: 9, ..SinkConfig::default() }, "sink.retry_max_ms = 9 is out of range: allowed 10..=3600000"),
            (SinkConfig { retry_max_ms: 3_600_001, ..SinkConfig::default() }, "sink.retry_max_ms = 3600001"),
            (
                SinkConfig { retry_initial_ms: 500, retry_max_ms: 400, ..SinkConfig::default() },
                "sink.retry_max_ms: 400 is less than sink.retry_initial_ms = 500",
            ),
            (
                SinkConfig { max_retry_duration_ms: 999, ..SinkConfig::default() },
                "sink.max_retry_duration_ms = 999 is out of range: allowed 0 (retry forever) or 1000..=604800000",
            ),
            (SinkConfig { max_retry_duration_ms: 604_800_001, ..SinkConfig::default() }, "sink.max_retry_duration_ms = 604800001"),
        ];
        for (cfg, want) in cases {
            let got = err(&cfg);
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn range_bounds_are_inclusive() {
        let ok = [
            SinkConfig {
                timeout_ms: Some(100),
                ..http()
            },
            SinkConfig {
                timeout_ms: Some(600_000),
                ..http()
            },
            SinkConfig {
                delivery: Some(Delivery::PerRecord),
                concurrency: Some(256),
                ..http()
            },
            SinkConfig {
                rotate_bytes: Some(MIB),
                ..SinkConfig::default()
            },
            SinkConfig {
                rotate_bytes: Some(64 * GIB),
                ..SinkConfig::default()
            },
            SinkConfig {
                max_records: 100_000,
                max_bytes: 64 * MIB,
                linger_ms: 0,
                ..SinkConfig::default()
            },
            SinkConfig {
                retry_initial_ms: 10,
                retry_max_ms: 10,
                ..SinkConfig::default()
            },
            SinkConfig {
                max_retry_duration_ms: 1000,
                ..SinkConfig::default()
            },
            SinkConfig {
                max_retry_duration_ms: 604_800_000,
                ..SinkConfig::default()
            },
        ];
        for cfg in ok {
            assert_eq!(cfg.validate(), Ok(()), "{cfg:?}");
        }
    }

    #[test]
    fn header_names_and_values_are_checked() {
        let with = |name: &str, value: &str| SinkConfig {
            headers: Some(BTreeMap::from([(name.to_string(), value.to_string())])),
            ..http()
        };
        assert_eq!(with("X-Tenant", "blue").validate(), Ok(()));
        assert_eq!(with("Content-Type", "application/json").validate(), Ok(()));
        assert_eq!(with("Authorization", "Basic abc").validate(), Ok(()));
        assert!(
            err(&with("Bad Name", "x")).starts_with("sink.headers.\"Bad Name\": "),
            "{}",
            err(&with("Bad Name", "x"))
        );
        assert!(err(&with("X-Ok", "line\nbreak")).contains("not a valid HTTP header value"));
        assert!(err(&with("Idempotency-Key", "k")).contains("set by spillway"));
        assert!(err(&with("spillway-shard", "1")).contains("set by spillway"));
        assert!(err(&with("Content-Encoding", "br")).contains("set by spillway"));
        let both = SinkConfig {
            bearer_token_env: Some("TOKEN".into()),
            ..with("authorization", "x")
        };
        assert!(err(&both).contains("sink.bearer_token_env"));
    }

    #[test]
    fn bearer_env_name_is_checked() {
        let cfg = SinkConfig {
            bearer_token_env: Some("A=B".into()),
            ..http()
        };
        assert!(err(&cfg).starts_with("sink.bearer_token_env: "));
    }

    #[test]
    fn every_key_is_documented() {
        let docs = include_str!("../../docs/sinks.md");
        let type_keys = SinkConfig::default()
            .type_specific_keys()
            .map(|(key, _, _)| key);
        let drain_keys = [
            "type",
            "max_records",
            "max_bytes",
            "linger_ms",
            "retry_initial_ms",
            "retry_max_ms",
            "max_retry_duration_ms",
        ];
        for key in type_keys.iter().chain(&drain_keys) {
            assert!(
                docs.contains(&format!("\n| `{key}` | ")),
                "docs/sinks.md has no table row for {key}"
            );
        }
    }

    #[test]
    fn debug_redacts_header_values() {
        let cfg = SinkConfig {
            headers: Some(BTreeMap::from([(
                "X-Api-Key".to_string(),
                "s3cret".to_string(),
            )])),
            ..http()
        };
        let shown = format!("{cfg:?}");
        assert!(
            shown.contains("X-Api-Key") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
