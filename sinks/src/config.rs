//! A sink table of spillway's configuration file (`[sink]`, or
//! `[sinks.NAME]`): `type`, that type's own keys, and the delivery keys
//! (batching, retries, where to start, lag, batches in flight), which
//! every type has.
//!
//! This module is the shared vocabulary only. Each sink type owns its keys:
//! their documentation, defaults, ranges and checks live in the sink's
//! folder, which describes the type to the [`registry`](crate::registry)
//! in one place. Here a table is read by looking `type` up in the
//! registry; the delivery keys ([`DeliveryConfig`]) are read and checked
//! here; keys set for a type that does not use them are reported here.
//!
//! A table is checked once, when it is made ([`SinkConfig::new`], which
//! reading it from TOML and [`Default`] go through): ranges, required keys,
//! keys that do not apply to the chosen type. The outcome is kept with the
//! table; [`SinkConfig::validate`] reports it and [`crate::build`] builds
//! from the checked settings, so a start or a reload checks the table
//! exactly once. Reading only checks shapes (a string where a string
//! belongs, a known enum value, no unknown key) and reports them as TOML
//! errors.
//!
//! Every error names the key with its table and says what is allowed. The
//! table is `sink` unless the config is told otherwise with
//! [`SinkConfig::with_table`]: a table read from `[sinks.warehouse]` is
//! given `"sinks.warehouse"`, and then reports
//! `sinks.warehouse.batch_records_max = 0 is out of range ...` where `[sink]`
//! reports `sink.batch_records_max = 0 ...`. The check does not depend on the
//! table; only the messages do.
//!
//! Adding a sink type: its folder (a `config` module with the keys, a
//! `TYPE` describing it) and one line in [`crate::registry::SINK_TYPES`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::file::FileConfig;
use crate::registry::{self, CheckedSink, SinkType, TypeKeys, SINK_TYPES};

pub use crate::error::{KeyProblem, SinkConfigError, DEFAULT_TABLE};
pub use crate::keys::*;

/// The file the built-in default config delivers to.
pub const DEFAULT_FILE_PATH: &str = "spillway-data/delivered.ndjson";

/// `type` and the keys of that type, as the user wrote them.
pub struct TypeConfig(Box<dyn TypeKeys>);

impl TypeConfig {
    /// A table of the type `keys` belong to.
    pub fn new(keys: impl TypeKeys) -> TypeConfig {
        TypeConfig(Box::new(keys))
    }

    /// The type's registry entry.
    pub fn sink_type(&self) -> &'static SinkType {
        self.0.sink_type()
    }

    /// The keys, if they are of type `T` (e.g. `HttpConfig`).
    pub fn keys<T: TypeKeys>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

impl Clone for TypeConfig {
    fn clone(&self) -> Self {
        TypeConfig(self.0.clone_box())
    }
}

impl PartialEq for TypeConfig {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_as(other.0.as_ref())
    }
}

impl fmt::Debug for TypeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A sink table: where delivered records go, and how the drain batches
/// and retries them. Hot-reloadable. Checked once, when made (see the
/// module documentation).
#[derive(Clone)]
pub struct SinkConfig {
    sink: TypeConfig,
    delivery: DeliveryConfig,
    /// The table errors name keys in: `sink`, or `sinks.NAME`.
    table: String,
    /// What checking `sink` and `delivery` found: the settings to build
    /// from, or the first problem.
    checked: Result<Arc<dyn CheckedSink>, KeyProblem>,
}

impl SinkConfig {
    /// A table of `sink`'s type with its keys and the delivery keys;
    /// checks it.
    pub fn new(sink: TypeConfig, delivery: DeliveryConfig) -> SinkConfig {
        SinkConfig::with_unused_key(sink, delivery, None)
    }

    /// As [`SinkConfig::new`], for a table that also set `unused_key`, a key
    /// of another type (the first one found).
    fn with_unused_key(
        sink: TypeConfig,
        delivery: DeliveryConfig,
        unused_key: Option<&'static str>,
    ) -> SinkConfig {
        let checked = check(&sink, &delivery, unused_key);
        SinkConfig {
            sink,
            delivery,
            table: DEFAULT_TABLE.to_owned(),
            checked,
        }
    }

    /// The same config, its errors naming keys in `table` (e.g.
    /// `"sinks.warehouse"` for a table read from `[sinks.warehouse]`;
    /// `"sink"` until told). Checks nothing again.
    pub fn with_table(self, table: &str) -> SinkConfig {
        SinkConfig {
            table: table.to_owned(),
            ..self
        }
    }

    /// The table errors name keys in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The type's registry entry (its name is what the user wrote for
    /// `type`).
    pub fn sink_type(&self) -> &'static SinkType {
        self.sink.sink_type()
    }

    /// `type` and the keys of that type.
    pub fn type_config(&self) -> &TypeConfig {
        &self.sink
    }

    /// The delivery keys: batching, retries, start, lag, batches in flight.
    pub fn delivery(&self) -> &DeliveryConfig {
        &self.delivery
    }

    /// The shared library this table loads (a plugin's `path`), if any.
    pub fn plugin_path(&self) -> Option<&Path> {
        self.sink.0.library_path()
    }

    /// `Ok` if the table can be used, else the first problem its check
    /// found: a range, a required key, or a key the type does not use,
    /// named in this config's table. The check ran when the table was made
    /// and touched neither the environment, the network nor the file
    /// system (`build` does).
    pub fn validate(&self) -> Result<(), SinkConfigError> {
        match &self.checked {
            Ok(_) => Ok(()),
            Err(problem) => Err(SinkConfigError::from(problem.clone()).in_table(&self.table)),
        }
    }

    /// The checked settings, or the first problem (in this table).
    pub(crate) fn settings(&self) -> Result<&dyn CheckedSink, SinkConfigError> {
        self.validate()?;
        Ok(self
            .checked
            .as_deref()
            .expect("validate returned Ok, so the check passed"))
    }
}

/// Two tables are equal when the user wrote the same keys in the same
/// table: the same type keys, delivery keys, table name and (for tables
/// that cannot be used) problem. The settings follow from those.
impl PartialEq for SinkConfig {
    fn eq(&self, other: &Self) -> bool {
        self.sink == other.sink
            && self.delivery == other.delivery
            && self.table == other.table
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
        SinkConfig::new(TypeConfig::new(file), DeliveryConfig::default())
    }
}

/// The type's keys (whose own `Debug` hides secrets), the delivery keys,
/// and the problem if any; not the settings, which hold header values.
impl fmt::Debug for SinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkConfig")
            .field("table", &self.table)
            .field("sink", &self.sink)
            .field("delivery", &self.delivery)
            .field("problem", &self.checked.as_ref().err())
            .finish()
    }
}

/// The one check of a table: keys of another type first, then the type's
/// own keys, then the delivery keys.
fn check(
    sink: &TypeConfig,
    delivery: &DeliveryConfig,
    unused_key: Option<&'static str>,
) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
    if let Some(key) = unused_key {
        let users: Vec<String> = SINK_TYPES
            .iter()
            .filter(|t| t.has_key(key))
            .map(|t| format!("\"{t}\""))
            .collect();
        return Err(KeyProblem::NotApplicable {
            key,
            kind: sink.sink_type().name,
            hint: format!(" (only by type = {})", users.join(" or ")),
        });
    }
    let settings = sink.0.check(delivery)?;
    crate::keys::check(delivery)?;
    Ok(settings)
}

// ---- reading the table -------------------------------------------------------

/// Every key a sink table may hold, in the order serde's "expected one
/// of" lists them: `type`, each type's keys, the delivery keys.
fn table_keys() -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = vec!["type"];
        for sink_type in SINK_TYPES {
            for key in sink_type.keys() {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys.extend(DeliveryConfig::keys());
        keys
    })
}

/// Every type's keys as read so far: `type` may come after the keys of its
/// type, so each key is read by every type that has it (`path` by file
/// and plugin), and the keys of the types not chosen are then reported by
/// the check.
struct AllTypeKeys {
    /// One per registered type, in registry order.
    types: Vec<Box<dyn TypeKeys>>,
    /// The type-specific keys the table set.
    written: Vec<&'static str>,
}

impl AllTypeKeys {
    fn new() -> AllTypeKeys {
        AllTypeKeys {
            types: SINK_TYPES.iter().map(|t| (t.unset)()).collect(),
            written: Vec::new(),
        }
    }

    /// Reads the value of `key`, a key of some type, into every type that
    /// has it.
    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        for keys in &mut self.types {
            if keys.sink_type().has_key(key) {
                keys.read_key(key, value.clone())?;
            }
        }
        self.written.push(key);
        Ok(())
    }

    /// The keys of `chosen`, and the first key written that `chosen` does
    /// not use (looked for in registry order).
    fn into_type(self, chosen: &'static SinkType) -> (TypeConfig, Option<&'static str>) {
        let unused_key = SINK_TYPES
            .iter()
            .flat_map(|t| t.keys())
            .find(|key| self.written.contains(key) && !chosen.has_key(key));
        let keys = self
            .types
            .into_iter()
            .find(|keys| keys.sink_type() == chosen)
            .expect("every registered type has its keys here");
        (TypeConfig(keys), unused_key)
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
        let mut sink_type: Option<&'static SinkType> = None;
        let mut type_keys = AllTypeKeys::new();
        let mut delivery = DeliveryConfig::default();
        // An unknown key is reported with the keys of the table's type when
        // that is known (the usual `type` first): at the key itself; when
        // `type` comes later, at the end of the table.
        let mut unknown: Option<String> = None;
        while let Some(key) = map.next_key_seed(KeySeed { sink_type })? {
            let key = match key {
                TableKey::Known(key) => key,
                TableKey::Unknown(key) => {
                    map.next_value::<de::IgnoredAny>()?;
                    unknown.get_or_insert(key);
                    continue;
                }
            };
            if key == "type" {
                sink_type = Some(map.next_value_seed(TypeSeed)?);
            } else if DeliveryConfig::keys().any(|k| k == key) {
                crate::keys::read_key(&mut delivery, key, &mut map)?;
            } else {
                map.next_value_seed(TypeKeySeed {
                    key,
                    into: &mut type_keys,
                })?;
            }
        }
        if let Some(key) = unknown {
            let keys = match sink_type {
                Some(t) => type_table_keys(t),
                None => table_keys(),
            };
            return Err(de::Error::unknown_field(&key, keys));
        }
        let sink_type = sink_type.ok_or_else(|| de::Error::missing_field("type"))?;
        let (sink, unused_key) = type_keys.into_type(sink_type);
        Ok(SinkConfig::with_unused_key(sink, delivery, unused_key))
    }
}

/// The keys a table of type `t` may hold: `type`, the type's keys, the
/// delivery keys (what an unknown key's error lists once the type is known).
fn type_table_keys(t: &'static SinkType) -> &'static [&'static str] {
    static KEYS: OnceLock<Vec<(&'static str, Vec<&'static str>)>> = OnceLock::new();
    let all = KEYS.get_or_init(|| {
        SINK_TYPES
            .iter()
            .map(|t| {
                let mut keys = vec!["type"];
                keys.extend(t.keys());
                keys.extend(DeliveryConfig::keys());
                (t.name, keys)
            })
            .collect()
    });
    all.iter()
        .find(|(name, _)| *name == t.name)
        .map_or(table_keys(), |(_, keys)| keys.as_slice())
}

/// A key as read: one of [`table_keys`], or not.
enum TableKey {
    Known(&'static str),
    Unknown(String),
}

/// A key of the table. Not one of [`table_keys`]: an "unknown field" error
/// at that key listing the keys of `sink_type` when it is known already,
/// else [`TableKey::Unknown`] (reported once the table is read and its
/// type known).
struct KeySeed {
    sink_type: Option<&'static SinkType>,
}

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = TableKey;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<TableKey, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = TableKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<TableKey, E> {
        if let Some(known) = table_keys().iter().find(|&&known| known == key) {
            return Ok(TableKey::Known(known));
        }
        match self.sink_type {
            Some(t) => Err(E::unknown_field(key, type_table_keys(t))),
            None => Ok(TableKey::Unknown(key.to_string())),
        }
    }
}

/// The value of `type`: a registered type's name, else an "unknown
/// variant" error listing them.
struct TypeSeed;

impl<'de> DeserializeSeed<'de> for TypeSeed {
    type Value = &'static SinkType;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for TypeSeed {
    type Value = &'static SinkType;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sink type")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
        registry::find(name).ok_or_else(|| E::unknown_variant(name, registry::names()))
    }
}

/// The value of a type-specific key, read inside the value's own
/// deserializer so that a wrong shape is reported at the value.
struct TypeKeySeed<'a> {
    key: &'static str,
    into: &'a mut AllTypeKeys,
}

impl<'de> DeserializeSeed<'de> for TypeKeySeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let value = toml::Value::deserialize(deserializer)?;
        self.into
            .read_key(self.key, value)
            .map_err(|e| de::Error::custom(e.message()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::noop::NoopKeys;

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

    /// The default file sink with these delivery keys.
    fn with_delivery(delivery: DeliveryConfig) -> SinkConfig {
        SinkConfig::new(SinkConfig::default().type_config().clone(), delivery)
    }

    #[test]
    fn default_is_a_valid_file_sink() {
        let cfg = SinkConfig::default();
        assert_eq!(cfg.sink_type().name, "file");
        let file: &FileConfig = cfg.type_config().keys().expect("file keys");
        assert_eq!(
            file.path.as_deref(),
            Some(std::path::Path::new("spillway-data/delivered.ndjson"))
        );
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.delivery().retry_duration_max(), None);
    }

    #[test]
    fn unknown_key_is_an_error() {
        let e = parse("[sink]\ntype = \"noop\"\nurll = \"x\"\n").unwrap_err();
        assert!(e.contains("unknown field `urll`"), "{e}");
    }

    /// The error lists the keys of the type in use, not every type's, at
    /// the key when `type` came first, at the table when it came after.
    #[test]
    fn an_unknown_key_lists_the_keys_of_the_type_in_use() {
        for (text, line) in [
            (
                "[sink]\ntype = \"file\"\npath = \"/tmp/x\"\nurll = \"x\"\n",
                "line 4",
            ),
            (
                "[sink]\nurll = \"x\"\npath = \"/tmp/x\"\ntype = \"file\"\n",
                "",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains("unknown field `urll`"), "{e}");
            assert!(e.contains(line), "{e}");
            let expected = e.split("expected one of").nth(1).expect(&e);
            for own in [
                "`type`",
                "`path`",
                "`format`",
                "`batch_records_max`",
                "`on_lag`",
            ] {
                assert!(expected.contains(own), "{own} missing: {e}");
            }
            for other in ["`url`", "`servers`", "`subject`", "`options`"] {
                assert!(!expected.contains(other), "{other} is another type's: {e}");
            }
        }
    }

    #[test]
    fn bad_type_lists_the_allowed_ones() {
        let e = parse("[sink]\ntype = \"kinesis\"\n").unwrap_err();
        assert!(e.contains("`http`, `file`, `nats`, `kafka`, `noop`"), "{e}");
    }

    #[test]
    fn a_wrong_shape_is_reported_at_the_value() {
        let e = parse("[sink]\ntype = \"http\"\nurl = \"http://a/\"\n\ntimeout_ms = \"x\"\n")
            .unwrap_err();
        assert!(e.contains("line 5"), "{e}");
        assert!(
            e.contains("invalid type: string \"x\", expected u64"),
            "{e}"
        );
        let e = parse("[sink]\npath = 7\ntype = \"file\"\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e =
            parse("[sink]\ntype = \"http\"\nurl = \"http://a/\"\nmethod = \"GET\"\n").unwrap_err();
        assert!(
            e.contains("unknown variant `GET`, expected one of `POST`, `PUT`, `PATCH`"),
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
            "gzip" => "true",
            "timeout_ms" => "1000",
            "concurrency" => "1",
            "encoding" => "\"ndjson\"",
            "path" => "\"p\"",
            "format" => "\"ndjson\"",
            "rotate_bytes" => "1048576",
            "fsync" => "true",
            "options" => "{}",
            "servers" => "[\"nats://127.0.0.1:4222\"]",
            "subject" => "\"a.b\"",
            "stream" => "\"S\"",
            "token_env" | "password_env" => "\"T\"",
            "user" => "\"u\"",
            "creds_file" | "ca_file" | "cert_file" | "key_file" => "\"f\"",
            "ack_timeout_ms" | "connect_timeout_ms" => "1000",
            "publishes_in_flight" | "failover_after_ack_timeouts" => "4",
            "ping_interval_ms" => "1000",
            "server_sync_always" => "true",
            "brokers" => "[\"127.0.0.1:9092\"]",
            "topic" | "offsets_topic" => "\"t\"",
            "key" => "\"shard\"",
            "compression" => "\"lz4\"",
            "tls" | "offsets_topic_create" => "true",
            "sasl_mechanism" => "\"PLAIN\"",
            "transaction_timeout_ms" => "60000",
            "message_bytes_max" => "1000000",
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
            .filter(|k| *k != "type" && !DeliveryConfig::keys().any(|d| d == *k))
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
            SinkConfig::new(TypeConfig::new(NoopKeys), DeliveryConfig::default()).validate(),
            Ok(())
        );
    }

    #[test]
    fn delivery_range_errors_name_the_key_and_the_range() {
        let d = DeliveryConfig::default;
        let cases: Vec<(DeliveryConfig, &str)> = vec![
            (DeliveryConfig { batch_records_max: 0, ..d() }, "sink.batch_records_max = 0 is out of range: allowed 1..=100000"),
            (DeliveryConfig { batch_records_max: 100_001, ..d() }, "sink.batch_records_max = 100001"),
            (DeliveryConfig { batch_bytes_max: 1023, ..d() }, "sink.batch_bytes_max = 1023 is out of range: allowed 1024..=67108864 (1 KiB..=64 MiB)"),
            (DeliveryConfig { batch_bytes_max: 64 * MIB + 1, ..d() }, "sink.batch_bytes_max = "),
            (DeliveryConfig { linger_ms: 10_001, ..d() }, "sink.linger_ms = 10001 is out of range: allowed 0..=10000"),
            (DeliveryConfig { retry_initial_ms: 0, ..d() }, "sink.retry_initial_ms = 0 is out of range: allowed 1..=60000"),
            (DeliveryConfig { retry_initial_ms: 60_001, retry_max_ms: 70_000, ..d() }, "sink.retry_initial_ms = 60001"),
            (DeliveryConfig { retry_initial_ms: 5, retry_max_ms: 9, ..d() }, "sink.retry_max_ms = 9 is out of range: allowed 10..=3600000"),
            (DeliveryConfig { retry_max_ms: 3_600_001, ..d() }, "sink.retry_max_ms = 3600001"),
            (
                DeliveryConfig { retry_initial_ms: 500, retry_max_ms: 400, ..d() },
                "sink.retry_max_ms: 400 is less than sink.retry_initial_ms = 500",
            ),
            (
                DeliveryConfig { retry_duration_max_ms: 999, ..d() },
                "sink.retry_duration_max_ms = 999 is out of range: allowed 0 (retry forever) or 1000..=604800000",
            ),
            (DeliveryConfig { retry_duration_max_ms: 604_800_001, ..d() }, "sink.retry_duration_max_ms = 604800001"),
            (DeliveryConfig { build_timeout_ms: 99, ..d() }, "sink.build_timeout_ms = 99 is out of range: allowed 100..=600000"),
            (DeliveryConfig { build_timeout_ms: 600_001, ..d() }, "sink.build_timeout_ms = 600001"),
        ];
        for (delivery, want) in cases {
            let got = err(&with_delivery(delivery));
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn delivery_range_bounds_are_inclusive() {
        let ok = [
            DeliveryConfig {
                batch_records_max: 100_000,
                batch_bytes_max: 64 * MIB,
                linger_ms: 0,
                ..DeliveryConfig::default()
            },
            DeliveryConfig {
                retry_initial_ms: 10,
                retry_max_ms: 10,
                ..DeliveryConfig::default()
            },
            DeliveryConfig {
                retry_duration_max_ms: 1000,
                ..DeliveryConfig::default()
            },
            DeliveryConfig {
                retry_duration_max_ms: 604_800_000,
                ..DeliveryConfig::default()
            },
        ];
        for delivery in ok {
            let cfg = with_delivery(delivery);
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

    #[test]
    fn the_new_delivery_keys_are_read() {
        let cfg = parse(
            "[sink]\ntype = \"noop\"\nstart = \"oldest\"\nlag_bytes_max = 1048576\non_lag = \"skip\"\nbatches_in_flight = \"adaptive\"\nbatches_in_flight_max = 32\n",
        )
        .unwrap();
        assert_eq!(cfg.validate(), Ok(()));
        let d = cfg.delivery();
        assert_eq!(d.start(), StartAt::Oldest);
        assert_eq!(d.lag_bytes_max(), Some(MIB));
        assert_eq!(d.on_lag(), OnLag::Skip);
        assert_eq!(d.in_flight(), InFlight::Adaptive { max: 32 });

        let cfg = parse("[sink]\ntype = \"noop\"\nbatches_in_flight = 4\n").unwrap();
        assert_eq!(cfg.delivery().in_flight(), InFlight::Fixed(4));
        let d = SinkConfig::default().delivery().clone();
        assert_eq!(
            (d.start(), d.lag_bytes_max(), d.on_lag(), d.in_flight()),
            (StartAt::End, None, OnLag::Block, InFlight::Fixed(1))
        );
        let adaptive =
            parse("[sink]\ntype = \"noop\"\nbatches_in_flight = \"adaptive\"\n").unwrap();
        assert_eq!(
            adaptive.delivery().in_flight(),
            InFlight::Adaptive { max: 16 }
        );
    }

    #[test]
    fn the_new_delivery_keys_say_what_shapes_they_take() {
        let cases = [
            ("start = \"newest\"", "unknown variant `newest`, expected `end` or `oldest`"),
            ("on_lag = \"drop\"", "unknown variant `drop`, expected `block` or `skip`"),
            (
                "batches_in_flight = \"many\"",
                "invalid value: string \"many\", expected an integer 1..=64 or the string \"adaptive\"",
            ),
            (
                "batches_in_flight = -1",
                "invalid value: integer `-1`, expected an integer 1..=64 or the string \"adaptive\"",
            ),
            (
                "batches_in_flight = 1.5",
                "invalid type: floating point `1.5`, expected an integer 1..=64 or the string \"adaptive\"",
            ),
            ("lag_bytes_max = \"1 GiB\"", "invalid type: string \"1 GiB\", expected u64"),
        ];
        for (line, want) in cases {
            let e = parse(&format!("[sink]\ntype = \"noop\"\n{line}\n")).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn the_new_delivery_keys_are_checked() {
        let d = DeliveryConfig::default;
        let adaptive = InFlight::Adaptive { max: 16 };
        let cases: Vec<(DeliveryConfig, &str)> = vec![
            (
                DeliveryConfig { lag_bytes_max: MIB - 1, ..d() },
                "sink.lag_bytes_max = 1048575 is out of range: allowed 0 (no limit) or 1048576..=1099511627776 (1 MiB..=1 TiB)",
            ),
            (DeliveryConfig { lag_bytes_max: 1024 * GIB + 1, ..d() }, "sink.lag_bytes_max = 1099511627777 is out of range"),
            (
                DeliveryConfig { on_lag: OnLag::Skip, ..d() },
                "sink.on_lag = \"skip\" needs sink.lag_bytes_max (the lag to skip at); it is 0, no limit",
            ),
            (
                DeliveryConfig { batches_in_flight: InFlight::Fixed(0), ..d() },
                "sink.batches_in_flight = 0 is out of range: allowed 1..=64 or \"adaptive\"",
            ),
            (DeliveryConfig { batches_in_flight: InFlight::Fixed(65), ..d() }, "sink.batches_in_flight = 65 is out of range"),
            (
                DeliveryConfig { batches_in_flight: InFlight::Fixed(4), batches_in_flight_max: Some(8), ..d() },
                "sink.batches_in_flight_max is not used with sink.batches_in_flight = 4 (only with \"adaptive\")",
            ),
            (
                DeliveryConfig { batches_in_flight_max: Some(16), ..d() },
                "sink.batches_in_flight_max is not used with sink.batches_in_flight = 1",
            ),
            (
                DeliveryConfig { batches_in_flight: adaptive, batches_in_flight_max: Some(1), ..d() },
                "sink.batches_in_flight_max = 1 is out of range: allowed 2..=256",
            ),
            (
                DeliveryConfig { batches_in_flight: adaptive, batches_in_flight_max: Some(257), ..d() },
                "sink.batches_in_flight_max = 257 is out of range",
            ),
        ];
        for (delivery, want) in cases {
            let got = err(&with_delivery(delivery));
            assert!(got.starts_with(want), "got {got:?}, want prefix {want:?}");
        }
    }

    #[test]
    fn the_new_delivery_keys_bounds_are_inclusive() {
        let d = DeliveryConfig::default;
        let ok = [
            DeliveryConfig {
                lag_bytes_max: MIB,
                on_lag: OnLag::Skip,
                ..d()
            },
            DeliveryConfig {
                lag_bytes_max: 1024 * GIB,
                ..d()
            },
            DeliveryConfig {
                batches_in_flight: InFlight::Fixed(64),
                ..d()
            },
            DeliveryConfig {
                batches_in_flight: InFlight::Adaptive { max: 16 },
                batches_in_flight_max: Some(2),
                ..d()
            },
            DeliveryConfig {
                batches_in_flight: InFlight::Adaptive { max: 16 },
                batches_in_flight_max: Some(256),
                ..d()
            },
            DeliveryConfig {
                start: StartAt::Oldest,
                ..d()
            },
        ];
        for delivery in ok {
            let cfg = with_delivery(delivery);
            assert_eq!(cfg.validate(), Ok(()), "{cfg:?}");
        }
    }

    #[test]
    fn errors_name_the_table_the_config_came_from() {
        let bad = with_delivery(DeliveryConfig {
            batch_records_max: 0,
            ..DeliveryConfig::default()
        });
        assert_eq!(bad.table(), "sink");
        assert!(err(&bad).starts_with("sink.batch_records_max = 0 is out of range"));
        let named = bad.clone().with_table("sinks.warehouse");
        assert_eq!(
            err(&named),
            "sinks.warehouse.batch_records_max = 0 is out of range: allowed 1..=100000"
        );
        assert_ne!(named, bad, "the table is part of the config");
        let e = crate::build(&named, &crate::SinkEnv::detached())
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.starts_with("sinks.warehouse.batch_records_max = 0"),
            "{e}"
        );
        let cfg = parse("[sink]\ntype = \"file\"\npath = \"x\"\nurl = \"http://a/\"\n")
            .unwrap()
            .with_table("sinks.a-1");
        assert_eq!(
            err(&cfg),
            "sinks.a-1.url is not used by type = \"file\" (only by type = \"http\")"
        );
    }
}
