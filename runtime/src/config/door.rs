//! `[server.tcp]` and `[server.http]`: a network door is a value. What
//! every network door has (an address, a connection cap, TLS) is one
//! [`DoorConfig`], read, checked and turned into TLS files here; what a
//! door has of its own ([`TcpKeys`], [`HttpKeys`]) beside it in a
//! [`NetworkDoorConfig`]. [`super::ServerConfig::network_doors`] lists the
//! doors configured, for what treats them all alike (the descriptor count,
//! `check`, the rule against clear text beside peer ids).

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use sink_sdk::keys::Key;

use super::keys::*;
use super::{in_range, ConfigError};

/// What every network door has.
#[derive(Debug, Clone, PartialEq)]
pub struct DoorConfig {
    /// The door's table, `"server.tcp"` or `"server.http"` (its keys' prefix).
    pub table: &'static str,
    /// `ip:port` to listen on.
    pub listen: String,
    /// TLS on (the default: `cert_file` and `key_file` needed); `false` only
    /// on a loopback address.
    pub tls: bool,
    /// PEM certificate chain (the server's first).
    pub cert_file: Option<PathBuf>,
    /// PEM private key.
    pub key_file: Option<PathBuf>,
    /// PEM CA certificate(s): every client must present a certificate
    /// chaining to one (mutual TLS).
    pub ca_file: Option<PathBuf>,
    /// With `ca_file`: DNS names or IPs of which a client certificate must
    /// carry one among its subject alternative names.
    pub allowed_names: Option<Vec<String>>,
    /// This door's connections open at once; past it a new one is closed.
    pub connections_max: u32,
}

/// A network door's table as read: the door, and the keys of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkDoorConfig<K> {
    pub door: DoorConfig,
    pub own: K,
}

/// `[server.tcp]`: the wire protocol over TCP, with TLS (docs/ingest.md).
pub type TcpDoorConfig = NetworkDoorConfig<TcpKeys>;
/// `[server.http]`: `POST /v1/records` on a TCP address, answered once the
/// records are durable (docs/ingest.md).
pub type HttpIngestConfig = NetworkDoorConfig<HttpKeys>;

/// The keys every network door has ([`DoorConfig`]'s), as described.
const DOOR_FIELDS: [&str; 7] = short_names(&SERVER_TCP_DOOR);

/// The keys a kind of network door has of its own (a
/// [`sink_sdk::key_table!`], read by serde).
pub trait DoorKeys: Sized + Default + serde::de::DeserializeOwned {
    /// The door's table.
    const TABLE: &'static str;
    /// Every key of the table (the door's and its own), for serde's
    /// unknown-field error.
    const FIELDS: &'static [&'static str];
    /// The keys every door has, as described for this table (their
    /// defaults and ranges).
    const TLS: Key;
    const CONNECTIONS_MAX: Key;
    /// The door's own keys.
    const OWN: &'static [Key];
    fn validate(&self) -> Result<(), ConfigError>;
}

/// The short names of `keys` (their names within their table).
const fn short_names<const N: usize>(keys: &[Key]) -> [&'static str; N] {
    assert!(N == keys.len());
    let mut names = [""; N];
    let mut i = 0;
    while i < N {
        names[i] = short_name(keys[i].name);
        i += 1;
    }
    names
}

/// `name` past its last dot (a key's name within its table).
const fn short_name(name: &'static str) -> &'static str {
    let bytes = name.as_bytes();
    let mut i = bytes.len();
    while i > 0 {
        if bytes[i - 1] == b'.' {
            let (_, short) = name.split_at(i);
            return short;
        }
        i -= 1;
    }
    name
}

impl DoorKeys for TcpKeys {
    const TABLE: &'static str = "server.tcp";
    const FIELDS: &'static [&'static str] =
        &concat::<_, 8>(&DOOR_FIELDS, &short_names::<1>(TcpKeys::KEYS));
    const TLS: Key = SERVER_TCP_TLS;
    const CONNECTIONS_MAX: Key = SERVER_TCP_CONNECTIONS_MAX;
    const OWN: &'static [Key] = TcpKeys::KEYS;

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(self.check_ranges()?)
    }
}

impl DoorKeys for HttpKeys {
    const TABLE: &'static str = "server.http";
    const FIELDS: &'static [&'static str] =
        &concat::<_, 11>(&DOOR_FIELDS, &short_names::<4>(HttpKeys::KEYS));
    const TLS: Key = SERVER_HTTP_TLS;
    const CONNECTIONS_MAX: Key = SERVER_HTTP_CONNECTIONS_MAX;
    const OWN: &'static [Key] = HttpKeys::KEYS;

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(var) = &self.token_env {
            if !spillway_sinks::keys::is_env_var_name(var) {
                return door_invalid(
                    "server.http.token_env",
                    format!("{var:?} is not an environment variable name"),
                );
            }
        }
        Ok(self.check_ranges()?)
    }
}

impl HttpKeys {
    /// The bearer token from `token_env`'s variable; an unset or empty
    /// variable is an error naming the key and the variable.
    pub fn token(&self) -> Result<Option<String>, ConfigError> {
        let Some(var) = &self.token_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Ok(Some(v.trim().to_string())),
            _ => Err(ConfigError::Invalid {
                key: "server.http.token_env",
                message: format!("the environment variable {var} is unset or empty"),
            }),
        }
    }
}

impl<'de, K: DoorKeys> Deserialize<'de> for NetworkDoorConfig<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DoorVisitor<K>(PhantomData<K>);

        impl<'de, K: DoorKeys> Visitor<'de> for DoorVisitor<K> {
            type Value = NetworkDoorConfig<K>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "the table [{}]", K::TABLE)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut listen = None;
                let mut door = DoorConfig {
                    table: K::TABLE,
                    listen: String::new(),
                    tls: K::TLS.flag(),
                    cert_file: None,
                    key_file: None,
                    ca_file: None,
                    allowed_names: None,
                    connections_max: K::CONNECTIONS_MAX.int() as u32,
                };
                let mut own = toml::Table::new();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "listen" => listen = Some(map.next_value()?),
                        "tls" => door.tls = map.next_value()?,
                        "cert_file" => door.cert_file = Some(map.next_value()?),
                        "key_file" => door.key_file = Some(map.next_value()?),
                        "ca_file" => door.ca_file = Some(map.next_value()?),
                        "allowed_names" => door.allowed_names = Some(map.next_value()?),
                        "connections_max" => door.connections_max = map.next_value()?,
                        other if K::OWN.iter().any(|k| k.short() == other) => {
                            own.insert(key, map.next_value()?);
                        }
                        other => return Err(de::Error::unknown_field(other, K::FIELDS)),
                    }
                }
                door.listen = listen.ok_or_else(|| de::Error::missing_field("listen"))?;
                let own = own_keys::<K>(own).map_err(de::Error::custom)?;
                Ok(NetworkDoorConfig { door, own })
            }
        }

        deserializer.deserialize_map(DoorVisitor(PhantomData))
    }
}

/// A door's own keys from what its table set of them; a value of the
/// wrong shape is an error naming its key (read one by one first, so the
/// message says which).
fn own_keys<K: DoorKeys>(own: toml::Table) -> Result<K, String> {
    for (key, value) in &own {
        let one = toml::Table::from_iter([(key.clone(), value.clone())]);
        if let Err(e) = K::deserialize(one) {
            return Err(format!("{}.{key}: {}", K::TABLE, e.message().trim()));
        }
    }
    K::deserialize(own).map_err(|e| format!("[{}]: {}", K::TABLE, e.message().trim()))
}

impl<K: DoorKeys> NetworkDoorConfig<K> {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.door.check()?;
        in_range(&K::CONNECTIONS_MAX, u64::from(self.door.connections_max))?;
        self.own.validate()
    }
}

pub(super) fn door_invalid<T>(key: &'static str, message: String) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid { key, message })
}

impl DoorConfig {
    /// The full name of the door's key `key`, as the key table has it.
    pub fn key(&self, key: &str) -> &'static str {
        TABLES
            .iter()
            .filter(|t| t.name == self.table)
            .flat_map(|t| t.keys)
            .find(|k| k.short() == key)
            .map_or(self.table, |k| k.name)
    }

    /// The address to bind; an error names the key.
    pub fn address(&self) -> Result<std::net::SocketAddr, ConfigError> {
        self.listen.parse().map_err(|e| ConfigError::Invalid {
            key: self.key("listen"),
            message: format!(
                "{:?} is not ip:port ({e}); write it as \"127.0.0.1:7070\" or \"[::]:7070\"",
                self.listen
            ),
        })
    }

    /// Clear text only on loopback, a pair with TLS, names only with a CA.
    fn check(&self) -> Result<(), ConfigError> {
        let addr = self.address()?;
        let k = |key| self.key(key);
        if !self.tls && !addr.ip().is_loopback() {
            return door_invalid(
                k("tls"),
                format!("false on {addr}, which is not a loopback address: records would cross the network in clear; set cert_file and key_file, or listen on 127.0.0.1 / [::1]"),
            );
        }
        if self.tls {
            for (key, v) in [("cert_file", &self.cert_file), ("key_file", &self.key_file)] {
                if v.is_none() {
                    return door_invalid(k(key), "is required with TLS (the default); or set tls = false on a loopback address".into());
                }
            }
        } else {
            for (key, set) in [
                ("cert_file", self.cert_file.is_some()),
                ("key_file", self.key_file.is_some()),
                ("ca_file", self.ca_file.is_some()),
            ] {
                if set {
                    return door_invalid(
                        k(key),
                        "is set but tls = false: remove one of the two".into(),
                    );
                }
            }
        }
        if self.allowed_names.is_some() && self.ca_file.is_none() {
            return door_invalid(
                k("allowed_names"),
                format!(
                    "needs {} (names are read from verified client certificates)",
                    k("ca_file")
                ),
            );
        }
        if self.allowed_names.as_ref().is_some_and(|n| n.is_empty()) {
            return door_invalid(k("allowed_names"), format!("is empty, which would refuse every client; remove the key to let in any certificate {} verifies", k("ca_file")));
        }
        Ok(())
    }

    /// The TLS files, when TLS is on.
    pub fn tls_files(&self) -> Option<spillway_actors::TlsFiles> {
        if !self.tls {
            return None;
        }
        Some(spillway_actors::TlsFiles {
            key_prefix: self.table.into(),
            cert: self.cert_file.clone()?,
            key: self.key_file.clone()?,
            client_ca: self.ca_file.clone(),
            allowed_names: self.allowed_names.clone().unwrap_or_default(),
            listen: self.address().ok().map(|a| a.ip()),
        })
    }
}
