//! The daemon's configuration: TOML, every key with a default, a range and
//! an error that names the key; unknown keys are errors.
//!
//! `spillway run` with no `--config` uses [`DEFAULT_CONFIG`], which needs no
//! outside service: socket and data live under `./spillway-data/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use spillway_actors::SocketAccess;
use spillway_sinks::SinkConfig;

use crate::logging::LogFormat;

mod door;
mod explain;
mod keys;
mod renamed;
pub mod units;
pub use door::{DoorConfig, HttpIngestConfig, NetworkDoorConfig, TcpDoorConfig};
pub use keys::{AdminConfig, HttpKeys, LogConfig, ServerConfig, TcpKeys, WabConfig, TABLES};

/// The embedded default configuration (also `configs/default.toml`).
pub const DEFAULT_CONFIG: &str = include_str!("../../../configs/default.toml");

use sink_sdk::declare::{KeyDefault, OutOfRange};
use sink_sdk::keys::Key;
use sink_sdk::units::MIB;

/// A configuration that could not be used, naming the key and the rule.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{key} = {value} is out of range: allowed {allowed}")]
    Range {
        key: &'static str,
        value: String,
        allowed: String,
    },
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("{0}")]
    Sink(String),
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub wab: WabConfig,
    #[serde(default)]
    pub log: LogConfig,
    /// `[sink]`: one sink, named `default`; read into `sinks`. See
    /// docs/sinks.md.
    #[serde(default, rename = "sink")]
    single_sink: Option<SinkConfig>,
    /// Where delivered records go: every `[sinks.NAME]` table (or the one
    /// `[sink]`, as `default`; the embedded default file sink when neither
    /// is set), by name; hot-reloadable. See docs/sinks.md.
    #[serde(default)]
    pub sinks: BTreeMap<String, SinkConfig>,
    #[serde(default)]
    pub admin: AdminConfig,
}

impl ServerConfig {
    /// The network doors configured: `[server.http]`, then `[server.tcp]`.
    pub fn network_doors(&self) -> impl Iterator<Item = &DoorConfig> {
        let http = self.http.as_ref().map(|d| &d.door);
        http.into_iter().chain(self.tcp.as_ref().map(|d| &d.door))
    }
}

/// `server.socket_mode`: the producer socket's permission bits, written as
/// a string of octal digits (`"0660"`). A string, not a TOML integer: an
/// integer invites `660`, which is decimal (0o1224) and means something
/// else entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMode(pub u32);

impl SocketMode {
    /// Only the daemon's user (and root) can connect.
    pub const PRIVATE: SocketMode = SocketMode(0o600);

    fn parse(text: &str) -> Result<SocketMode, String> {
        let bad = |why: &str| {
            format!("server.socket_mode = {text:?}: {why}; write the mode as octal digits, such as \"0600\" or \"0660\"")
        };
        let octal = text.bytes().all(|b| (b'0'..=b'7').contains(&b));
        if !(3..=4).contains(&text.len()) || !octal {
            return Err(bad("not three or four octal digits"));
        }
        let mode = u32::from_str_radix(text, 8).map_err(|_| bad("not octal"))?;
        if mode > 0o777 {
            return Err(bad("only the permission bits (0000..=0777) may be set; setuid, setgid and sticky mean nothing on a socket"));
        }
        if mode & 0o600 != 0o600 {
            return Err(bad(
                "the owner (the daemon's user) must keep read and write (0600)",
            ));
        }
        Ok(SocketMode(mode))
    }
}

impl<'de> Deserialize<'de> for SocketMode {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SocketMode;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string of octal digits such as \"0660\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SocketMode, E> {
                SocketMode::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SocketMode, E> {
                Err(E::custom(format!(
                    "server.socket_mode = {v}: write the mode as a quoted string of octal digits, such as \"0660\" (a TOML integer is easily decimal by mistake)"
                )))
            }
        }
        de.deserialize_any(Visitor)
    }
}

/// `server.socket_group`: the group the producer socket is given, by name
/// or numeric gid. Looked up when the daemon starts (not by `check`, which
/// may run on another machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketGroup {
    Name(String),
    Gid(u32),
}

impl std::fmt::Display for SocketGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            SocketGroup::Name(n) => write!(f, "{n:?}"),
            SocketGroup::Gid(g) => write!(f, "{g}"),
        }
    }
}

impl<'de> Deserialize<'de> for SocketGroup {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SocketGroup;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a group name (\"spillway\") or a numeric gid (1001)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SocketGroup, E> {
                if v.trim().is_empty() || v.contains('\0') {
                    return Err(E::custom(format!(
                        "server.socket_group = {v:?}: not a group name; use a group name or a numeric gid"
                    )));
                }
                Ok(SocketGroup::Name(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SocketGroup, E> {
                // u32::MAX is (gid_t)-1, which chown reads as "leave unchanged".
                match u32::try_from(v) {
                    Ok(gid) if gid != u32::MAX => Ok(SocketGroup::Gid(gid)),
                    _ => Err(E::custom(format!(
                        "server.socket_group = {v} is out of range: allowed 0..=4294967294"
                    ))),
                }
            }
        }
        de.deserialize_any(Visitor)
    }
}

impl ServerConfig {
    /// Which peers may push over the Unix socket (`allowed_uids`,
    /// `allowed_gids`); `None`: any the socket's mode lets in.
    pub fn peer_filter(&self) -> Option<spillway_actors::PeerFilter> {
        if self.allowed_uids.is_none() && self.allowed_gids.is_none() {
            return None;
        }
        Some(spillway_actors::PeerFilter {
            uids: self.allowed_uids.clone().unwrap_or_default(),
            gids: self.allowed_gids.clone().unwrap_or_default(),
        })
    }

    /// Who may connect to the producer socket: `socket_mode`, and
    /// `socket_group` looked up in this machine's group database. An unknown
    /// group is an error naming the key.
    pub fn socket_access(&self) -> Result<SocketAccess, ConfigError> {
        let gid = match &self.socket_group {
            None => None,
            Some(group) => {
                let found = match group {
                    SocketGroup::Name(name) => spillway_actors::group_by_name(name),
                    SocketGroup::Gid(gid) => spillway_actors::group_by_gid(*gid),
                };
                match found {
                    Ok(Some(gid)) => Some(gid),
                    Ok(None) => {
                        return Err(ConfigError::Invalid {
                            key: "server.socket_group",
                            message: format!(
                                "{group}: no such group on this machine (see /etc/group or `getent group`)"
                            ),
                        })
                    }
                    Err(e) => {
                        return Err(ConfigError::Invalid {
                            key: "server.socket_group",
                            message: format!("{group}: looking the group up failed: {e}"),
                        })
                    }
                }
            }
        };
        Ok(SocketAccess {
            mode: self.socket_mode.0,
            gid,
        })
    }
}

/// `value` against `key`'s range in the key table; the error names both.
fn in_range(key: &'static Key, value: u64) -> Result<(), ConfigError> {
    Ok(sink_sdk::declare::in_range(key, value)?)
}

/// A key of a declared table set outside its range.
impl From<OutOfRange> for ConfigError {
    fn from(o: OutOfRange) -> Self {
        ConfigError::Range {
            key: o.key.name,
            value: o.value.to_string(),
            allowed: o.allowed,
        }
    }
}

/// `server.socket_mode`'s declared default.
impl KeyDefault for SocketMode {
    fn key_default(key: &Key) -> Self {
        SocketMode::parse(key.text()).expect("the declared socket_mode")
    }
}

/// `log.format`'s declared default.
impl KeyDefault for LogFormat {
    fn key_default(key: &Key) -> Self {
        LogFormat::try_from(key.text().to_string()).expect("the declared log.format")
    }
}

/// Largest config file read, in bytes: a real one is a few KiB; the cap
/// keeps `check` and a reload from reading a device or a huge file whole.
pub const CONFIG_BYTES_MAX: u64 = 4 * MIB;

/// Deepest nesting of arrays and inline tables a config may have. spillway's
/// own keys go three deep; the TOML parser's time grows faster than the
/// depth (100,000 levels took over 20 s), so a deeper file is refused
/// before it is parsed.
pub const CONFIG_NESTING_MAX: usize = 64;

/// Refuses text whose arrays and inline tables nest deeper than
/// [`CONFIG_NESTING_MAX`], naming the line. Brackets inside strings and
/// comments do not count; a table header (`[a]`, `[[a]]`) opens and closes
/// on its line, so it never adds up.
fn check_nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let mut line = 1usize;
    let mut chars = text.chars().peekable();
    // The quote that opened the current string, and whether it is tripled.
    let mut string: Option<(char, bool)> = None;
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
        }
        if let Some((quote, multi)) = string {
            if c == '\\' && quote == '"' {
                if chars.next() == Some('\n') {
                    line += 1;
                }
            } else if c == quote {
                if !multi {
                    string = None;
                } else if chars.peek() == Some(&quote) {
                    chars.next();
                    if chars.peek() == Some(&quote) {
                        chars.next();
                        string = None;
                    }
                }
            } else if c == '\n' && !multi {
                string = None;
            }
            continue;
        }
        match c {
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '"' | '\'' => {
                let mut multi = false;
                if chars.peek() == Some(&c) {
                    chars.next();
                    if chars.peek() != Some(&c) {
                        continue; // an empty string: "" or ''
                    }
                    chars.next();
                    multi = true;
                }
                string = Some((c, multi));
            }
            '[' | '{' => {
                depth += 1;
                if depth > CONFIG_NESTING_MAX {
                    return Err(format!(
                        "line {line}: arrays and inline tables nest more than \
                         {CONFIG_NESTING_MAX} deep"
                    ));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

impl Config {
    /// Parse and validate TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        check_nesting(text).map_err(|message| ConfigError::Parse {
            origin: origin.to_string(),
            message,
        })?;
        let parse = |message: String| ConfigError::Parse {
            origin: origin.to_string(),
            message,
        };
        // `${VAR}`, sizes and durations with units: rewritten in place.
        let rewritten = units::rewrite(text, &|name| std::env::var(name).ok()).map_err(parse)?;
        let text = rewritten.as_str();
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| parse(explain::explain(&e, text)))?;
        if let Some(message) = renamed::old_spelling(&doc) {
            return Err(parse(message));
        }
        // Read from the text again (not from `doc`): serde's errors then
        // carry the line and column.
        let mut cfg: Config =
            toml::from_str(text).map_err(|e| parse(explain::explain(&e, text)))?;
        cfg.resolve_sinks()?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let bytes = spillway_sinks::regular_file::read_capped(path, CONFIG_BYTES_MAX, "a config")
            .map_err(read)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            read(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not UTF-8 text (the byte at offset {} is invalid)",
                    e.utf8_error().valid_up_to()
                ),
            ))
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    pub fn embedded_default() -> Config {
        Config::parse(DEFAULT_CONFIG, "embedded default config")
            .expect("the embedded default config is valid")
    }

    /// `[sink]` becomes the sink named `default`; with neither `[sink]`
    /// nor `[sinks.*]`, the default file sink is `default`.
    fn resolve_sinks(&mut self) -> Result<(), ConfigError> {
        match self.single_sink.take() {
            Some(_) if !self.sinks.is_empty() => {
                let names: Vec<String> =
                    self.sinks.keys().map(|n| format!("[sinks.{n}]")).collect();
                Err(ConfigError::Invalid {
                    key: "sink",
                    message: format!(
                        "both [sink] and {} are set: use [sinks.NAME] tables only (a single \
                         [sink] is the same as [sinks.{DEFAULT_SINK}])",
                        names.join(", ")
                    ),
                })
            }
            Some(one) => {
                self.sinks.insert(DEFAULT_SINK.to_string(), one);
                Ok(())
            }
            None => {
                // Each table names itself in its errors.
                let named = std::mem::take(&mut self.sinks);
                self.sinks = named
                    .into_iter()
                    .map(|(n, s)| {
                        let table = format!("sinks.{n}");
                        (n, s.with_table(&table))
                    })
                    .collect();
                if self.sinks.is_empty() {
                    self.sinks
                        .insert(DEFAULT_SINK.to_string(), SinkConfig::default());
                }
                Ok(())
            }
        }
    }

    /// Check every range and cross-key rule, table by table (the first
    /// problem found is the one reported).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_server()?;
        self.validate_wab()?;
        self.validate_admin()?;
        for (name, sink) in &self.sinks {
            check_sink_name(name)?;
            sink.validate()
                .map_err(|e| ConfigError::Sink(e.to_string()))?;
        }
        crate::logging::check_level(&self.log.level).map_err(|message| ConfigError::Invalid {
            key: "log.level",
            message,
        })?;
        Ok(())
    }

    /// `[server]`, its doors, and who may use them.
    fn validate_server(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        if s.socket_path.as_os_str().is_empty() {
            return Err(ConfigError::Invalid {
                key: "server.socket_path",
                message: "must not be empty".into(),
            });
        }
        if s.socket_path.as_os_str().len() > 107 {
            return Err(ConfigError::Invalid {
                key: "server.socket_path",
                message: format!(
                    "{} is longer than the 107 bytes a Unix socket path may have",
                    s.socket_path.display()
                ),
            });
        }
        if s.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Invalid {
                key: "server.data_dir",
                message: "must not be empty".into(),
            });
        }
        for (key, ids) in [
            ("server.allowed_uids", &s.allowed_uids),
            ("server.allowed_gids", &s.allowed_gids),
        ] {
            match ids.as_deref() {
                Some([]) => {
                    return Err(ConfigError::Invalid {
                        key,
                        message: "is empty, which would refuse every producer; remove the key to let in anyone the socket's mode allows".into(),
                    })
                }
                Some(ids) if ids.contains(&u32::MAX) => {
                    return Err(ConfigError::Invalid {
                        key,
                        message: "4294967295 is not an id (it means \"none\" to the kernel); allowed 0..=4294967294".into(),
                    })
                }
                _ => {}
            }
        }
        if let Some(http) = &s.http {
            http.validate()?;
        }
        if let Some(tcp) = &s.tcp {
            tcp.validate()?;
        }
        self.check_plaintext_doors_against_peer_ids()?;
        s.check_ranges()?;
        if s.read_buffer_bytes_max < s.payload_bytes_max {
            return Err(ConfigError::Invalid {
                key: "server.read_buffer_bytes_max",
                message: format!(
                    "{} is smaller than server.payload_bytes_max ({}); the largest frame could never arrive",
                    s.read_buffer_bytes_max, s.payload_bytes_max
                ),
            });
        }
        Ok(())
    }

    /// `[wab]`.
    fn validate_wab(&self) -> Result<(), ConfigError> {
        let w = &self.wab;
        w.check_ranges()?;
        if w.wab_bytes_max < w.segment_bytes_max {
            return Err(ConfigError::Invalid {
                key: "wab.wab_bytes_max",
                message: format!(
                    "{} is smaller than wab.segment_bytes_max ({}); the buffer must hold at least one segment",
                    w.wab_bytes_max, w.segment_bytes_max
                ),
            });
        }
        Ok(())
    }

    /// `[admin]`.
    fn validate_admin(&self) -> Result<(), ConfigError> {
        self.admin.check_ranges()?;
        if self.admin.socket_path.as_os_str().is_empty()
            || self.admin.socket_path == self.server.socket_path
        {
            return Err(ConfigError::Invalid {
                key: "admin.socket_path",
                message: "must be set and differ from server.socket_path".into(),
            });
        }
        Ok(())
    }

    /// `allowed_uids` / `allowed_gids` are read from SO_PEERCRED, which
    /// only the Unix socket has: beside a plaintext loopback door (TCP or
    /// HTTP, `tls = false`) any local user refused on the socket could push
    /// through the door instead (issue 39), so the two are not taken
    /// together. A TLS door answers to its own check (client certificates).
    fn check_plaintext_doors_against_peer_ids(&self) -> Result<(), ConfigError> {
        let s = &self.server;
        let list = match (&s.allowed_uids, &s.allowed_gids) {
            (Some(_), _) => "server.allowed_uids",
            (None, Some(_)) => "server.allowed_gids",
            (None, None) => return Ok(()),
        };
        let plaintext = s
            .network_doors()
            .find(|d| !d.tls)
            .map(|d| (d.table, d.listen.as_str()));
        match plaintext {
            None => Ok(()),
            Some((door, listen)) => Err(ConfigError::Invalid {
                key: list,
                message: format!(
                    "is set, but [{door}] listens on {listen} with {door}.tls = false: the uid/gid check applies only to the Unix socket (the kernel's peer credentials), so a process it refuses could push through that door instead. Turn TLS on there with client certificates ({door}.tls = true with cert_file, key_file and ca_file), or remove [{door}]"
                ),
            }),
        }
    }

    /// Shards to run: the configured count, or one per core.
    pub fn shard_count(&self) -> u32 {
        if self.server.shards > 0 {
            self.server.shards
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1)
        }
    }

    /// `server.data_dir` must hold nothing spillway did not make; the
    /// sockets this config puts in it (and their `.lock` files) are
    /// spillway's too.
    pub fn check_data_dir(&self) -> Result<(), String> {
        let data_dir = &self.server.data_dir;
        let mut ours = Vec::new();
        for socket in [&self.server.socket_path, &self.admin.socket_path] {
            if socket.parent() == Some(data_dir.as_path()) {
                if let Some(name) = socket.file_name() {
                    let name = name.to_string_lossy().into_owned();
                    ours.push(format!("{name}.lock"));
                    ours.push(name);
                }
            }
        }
        let foreign: Vec<String> = spillway_wab::foreign_entries(data_dir)
            .map_err(|e| format!("server.data_dir: reading {}: {e}", data_dir.display()))?
            .into_iter()
            .filter(|name| !ours.contains(name))
            .collect();
        spillway_wab::refuse_foreign(data_dir, &foreign)
            .map_err(|e| format!("server.data_dir: {e}"))
    }

    /// Producer connections the doors may hold together: the Unix
    /// socket's `connections_max`, and each network door's.
    pub fn producer_connections_max(&self) -> u64 {
        u64::from(self.server.connections_max)
            + self
                .server
                .network_doors()
                .map(|d| u64::from(d.connections_max))
                .sum::<u64>()
    }

    /// The keys [`Config::producer_connections_max`] adds up, for a
    /// message (`server.connections_max` alone when no network door is on).
    pub fn producer_connections_keys(&self) -> String {
        let mut keys = vec!["server.connections_max"];
        keys.extend(
            self.server
                .network_doors()
                .map(|d| d.key("connections_max")),
        );
        keys.join(" + ")
    }

    /// Connections the admin listeners may hold together: the admin
    /// socket's, and the metrics address's when it is set.
    pub fn admin_connections_reserved(&self) -> u64 {
        let listeners = 1 + u64::from(self.admin.metrics_address.is_some());
        listeners * u64::from(self.admin.connections_max)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.server.connection_idle_timeout_ms)
    }

    /// How long a connection must be idle before a new one may evict it at
    /// `connections_max`; `None` when eviction is off.
    pub fn evict_idle_after(&self) -> Option<Duration> {
        self.server
            .evict_idle_connections
            .then(|| Duration::from_millis(self.server.evict_idle_after_ms))
    }

    pub fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.server.connection_read_timeout_ms)
    }

    /// The sink `name`, if configured.
    pub fn sink(&self, name: &str) -> Option<&SinkConfig> {
        self.sinks.get(name)
    }
}

/// The name `[sink]` gives its one sink (and the single-sink data layout's
/// checkpoint and dead letters belong to).
pub const DEFAULT_SINK: &str = "default";

/// Longest sink name.
pub const SINK_NAME_BYTES_MAX: usize = 32;

/// A sink name is 1-32 of `a-z 0-9 _ -`: it names a file in every shard
/// folder and a folder of its own.
fn check_sink_name(name: &str) -> Result<(), ConfigError> {
    let bad = name
        .bytes()
        .find(|b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-'));
    let why = if name.is_empty() || name.len() > SINK_NAME_BYTES_MAX {
        format!(
            "is {} bytes long; a sink name has 1 to {SINK_NAME_BYTES_MAX}",
            name.len()
        )
    } else if let Some(b) = bad {
        format!(
            "holds {:?}; a sink name has only a-z, 0-9, _ and -",
            b as char
        )
    } else {
        return Ok(());
    };
    Err(ConfigError::Sink(format!(
        "[sinks.{name:?}]: the name {why}"
    )))
}

impl Config {
    pub fn buffered_flush_interval(&self) -> Duration {
        Duration::from_millis(self.wab.buffered_flush_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_deeper_than_the_cap_is_refused_before_parsing() {
        let deep = format!("x = {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = Config::parse(&deep, "deep.toml").unwrap_err().to_string();
        assert!(
            err.contains("line 1") && err.contains("nest more than 64"),
            "{err}"
        );
        let inline = format!("\n\ny = {}{}\n", "{a = ".repeat(65), "}".repeat(65));
        let err = Config::parse(&inline, "t").unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        // Brackets in strings and comments, and table headers, do not count.
        let fine = format!(
            "# {open}\n[server]\nsocket_path = \"{open}\"\n[[x]]\ny = '''{open}'''\nz = \"a\\\"{open}\"\nw = ''\n",
            open = "[".repeat(100)
        );
        assert_eq!(check_nesting(&fine), Ok(()));
        let ok = format!("x = {}1{}\n", "[".repeat(64), "]".repeat(64));
        assert_eq!(check_nesting(&ok), Ok(()));
    }

    #[test]
    fn embedded_default_is_valid_and_matches_struct_defaults() {
        let cfg = Config::embedded_default();
        assert_eq!(
            cfg.server.socket_path,
            PathBuf::from("spillway-data/spillway.sock")
        );
        assert_eq!(cfg.wab, WabConfig::default());
        let empty = Config::parse("", "empty").unwrap();
        assert_eq!(empty.server, ServerConfig::default());
    }

    #[test]
    fn example_configs_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        }
    }

    /// The bench cannot link this parser, so its configs are checked here.
    #[cfg(feature = "bench")]
    #[test]
    fn every_config_the_bench_writes_is_accepted() {
        let texts = spillway_bench::written_configs();
        assert!(texts.len() >= 5, "{texts:?}");
        for text in texts {
            Config::parse(&text, "bench").unwrap_or_else(|e| panic!("{e}\n{text}"));
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::parse("[server]\nsockett_path = \"x\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sockett_path"), "{err}");
        let err = Config::parse("[bogus]\n", "t").unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn range_errors_name_key_and_range() {
        let err = Config::parse("[wab]\nsegment_bytes_max = 1000\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("wab.segment_bytes_max") && err.contains("1048576..="),
            "{err}"
        );
        let err = Config::parse("[server]\nconnections_max = 0\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.connections_max") && err.contains("1..=65536"),
            "{err}"
        );
        let err = Config::parse("[server]\nevict_idle_after_ms = 3600001\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.evict_idle_after_ms") && err.contains("0..=3600000"),
            "{err}"
        );
        let err = Config::parse("[server]\npayload_bytes_max = 20000000\n", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.payload_bytes_max"), "{err}");
        let err = Config::parse(
            "[wab]\nwab_bytes_max = 8388608\nsegment_bytes_max = 16777216\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("wab.wab_bytes_max"), "{err}");
    }

    #[test]
    fn bad_log_level_is_named() {
        let err = Config::parse("[log]\nlevel = \"verbose!!\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("log.level: ") && err.contains("verbose!!"),
            "{err}"
        );
    }

    #[test]
    fn log_format_is_checked() {
        let cfg = Config::parse("[log]\nformat = \"json\"\n", "t").unwrap();
        assert_eq!(cfg.log.format, LogFormat::Json);
        let err = Config::parse("[log]\nformat = \"xml\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("log.format") && err.contains("\"text\" or \"json\""),
            "{err}"
        );
    }

    #[test]
    fn socket_mode_is_octal_text_with_owner_rw() {
        let mode = |v: &str| {
            Config::parse(&format!("[server]\nsocket_mode = {v}\n"), "t")
                .map(|c| c.server.socket_mode.0)
                .map_err(|e| e.to_string())
        };
        assert_eq!(mode("\"0660\""), Ok(0o660));
        assert_eq!(mode("\"600\""), Ok(0o600));
        assert_eq!(mode("\"0666\""), Ok(0o666));
        for (bad, why) in [
            ("\"0640x\"", "octal digits"),
            ("\"0680\"", "octal digits"),
            ("\"60\"", "octal digits"),
            ("\"4660\"", "only the permission bits"),
            ("\"0460\"", "must keep read and write"),
            ("\"0060\"", "must keep read and write"),
            ("432", "quoted string"),
        ] {
            let err = mode(bad).unwrap_err();
            assert!(
                err.contains("server.socket_mode") && err.contains(why),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn socket_group_is_a_name_or_a_gid() {
        let group = |v: &str| {
            Config::parse(&format!("[server]\nsocket_group = {v}\n"), "t")
                .map(|c| c.server.socket_group)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            group("\"spillway\""),
            Ok(Some(SocketGroup::Name("spillway".into())))
        );
        assert_eq!(group("1001"), Ok(Some(SocketGroup::Gid(1001))));
        assert!(group("-1").unwrap_err().contains("server.socket_group"));
        assert!(group("\"\"").unwrap_err().contains("server.socket_group"));
        // The name is looked up at start, not when the file is read.
        let cfg =
            Config::parse("[server]\nsocket_group = \"no-such-group-spillway\"\n", "t").unwrap();
        let err = cfg.server.socket_access().unwrap_err().to_string();
        assert!(
            err.starts_with("server.socket_group: ") && err.contains("no such group"),
            "{err}"
        );
        let cfg = Config::parse(
            "[server]\nsocket_group = \"root\"\nsocket_mode = \"0660\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(
            cfg.server.socket_access().unwrap(),
            SocketAccess {
                mode: 0o660,
                gid: Some(0)
            }
        );
    }

    #[test]
    fn wrong_type_is_named() {
        let err = Config::parse("[server]\nshards = \"four\"\n", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("shards"), "{err}");
    }
}
