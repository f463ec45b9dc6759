//! What a sink type is to spillway: its name and keys ([`SinkType`]), its
//! keys as written ([`TypeKeys`]) and its checked settings
//! ([`CheckedSink`]). Each sink folder implements these and describes
//! itself with a `TYPE`; the [`registry`](crate::registry) lists the
//! `TYPE`s.

use std::any::Any;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::error::{KeyProblem, SinkError};
use crate::keys::DeliveryConfig;
use crate::SinkFactory;

/// One sink type: what the registry knows of it.
pub struct SinkType {
    /// The value the user writes for `type`.
    pub name: &'static str,
    /// One line for the user: what this type does with the records.
    pub about: &'static str,
    /// The keys of this type (the delivery keys, which every type has,
    /// aside), described for the check's errors and the reference
    /// (docs/sinks.md, `spillway.toml(5)`): name, default, allowed values,
    /// meaning.
    pub reference: &'static [sink_sdk::keys::Key],
    /// The type's keys with none set, ready to be read.
    pub unset: fn() -> Box<dyn TypeKeys>,
}

impl SinkType {
    /// This type's keys, as the user writes them.
    pub fn keys(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.reference.iter().map(sink_sdk::keys::Key::short)
    }

    /// Whether `key` is one of this type's keys.
    pub fn has_key(&self, key: &str) -> bool {
        self.keys().any(|k| k == key)
    }
}

/// Two entries are the same type when they have the same name (names are
/// unique: a test checks it).
impl PartialEq for SinkType {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for SinkType {}

impl fmt::Debug for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SinkType({})", self.name)
    }
}

impl fmt::Display for SinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// One type's keys as the user wrote them (unset keys are `None`), read
/// key by key and checked once.
pub trait TypeKeys: KeysValue + fmt::Debug + Send + Sync {
    /// The registry entry of this type.
    fn sink_type(&self) -> &'static SinkType;

    /// Reads the value of `key`, one of the type's keys. An error says what
    /// shape was expected; the caller places it at the value in the file.
    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error>;

    /// Checks every key and resolves them, with the delivery keys, into the
    /// settings the sink is built from. Touches neither the environment,
    /// the network nor the file system. Reports the first problem.
    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem>;

    /// The shared library this table loads, for a type that loads one (a
    /// reload notices when the file changed).
    fn library_path(&self) -> Option<&Path> {
        None
    }
}

/// What a sink is built with besides its keys: facts of the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkEnv {
    /// The daemon's instance id: random, made once and kept in the data
    /// folder (`instance-id`), so a record's `(shard, seq)` with it is
    /// unique across hosts and stable across restarts (the NATS sink's
    /// message id).
    pub instance_id: String,
}

impl SinkEnv {
    /// For `spillway check`, tests and benches: no data folder.
    pub fn detached() -> SinkEnv {
        SinkEnv {
            instance_id: "unset".into(),
        }
    }

    /// What the sink of `table` (`sink`, `sinks.NAME`) is told about who
    /// delivers: this instance id and the sink's name (`default` for a
    /// lone `[sink]`, as its cursor files are named).
    pub fn context(&self, table: &str) -> sink_sdk::SinkContext {
        let name = table.strip_prefix("sinks.").unwrap_or("default");
        sink_sdk::SinkContext::new(self.instance_id.clone(), name)
    }
}

/// A type's checked settings, defaults filled in: what a sink is built
/// from. `table` is where the keys came from (`sink`, `sinks.NAME`), for
/// the errors and warnings.
pub trait CheckedSink: fmt::Debug + Send + Sync {
    /// Makes the factory the drains ask for instances: reads what the
    /// settings refer to (a token variable, a file, a library).
    fn build(&self, table: &str, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError>;

    /// What `spillway check` asks, short of building: an error names the
    /// key; `Ok` carries warnings (a sink the daemon would start and
    /// retry) and notes. Leaves nothing behind.
    fn preflight(&self, table: &str) -> Result<Preflight, SinkError>;

    /// `spillway ctl sink tail`: the last `limit` records the sink's
    /// downstream holds, oldest first, read without changing anything
    /// there. `None`: this type cannot be read back by spillway (the
    /// answer says what to use instead).
    fn read_back(&self, table: &str, limit: usize) -> Option<Result<Vec<ReadBack>, SinkError>> {
        let _ = (table, limit);
        None
    }
}

/// One record as a sink's downstream keeps it ([`CheckedSink::read_back`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBack {
    /// Where the downstream keeps it, in its own words (a nats sink's:
    /// `ORDERS:42 orders.0`, the stream, its sequence number, the subject).
    pub at: String,
    /// The spillway record it is, when the downstream kept that: (shard,
    /// seq).
    pub record: Option<(u32, u64)>,
    pub payload: Vec<u8>,
}

/// What a preflight found in a sink that would start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preflight {
    /// Something the operator should hear of (a sink the daemon would
    /// start and retry), naming the key.
    pub warnings: Vec<String>,
    /// What `check` shows besides (a plugin's options as it declares them),
    /// one line each.
    pub notes: Vec<String>,
}

impl From<Vec<String>> for Preflight {
    fn from(warnings: Vec<String>) -> Self {
        Preflight {
            warnings,
            notes: Vec::new(),
        }
    }
}

/// What every [`TypeKeys`] has for free when it is `Clone + PartialEq`:
/// copies, comparison and a look at the concrete type.
pub trait KeysValue: Any {
    fn clone_box(&self) -> Box<dyn TypeKeys>;
    fn same_as(&self, other: &dyn TypeKeys) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<T: TypeKeys + Clone + PartialEq> KeysValue for T {
    fn clone_box(&self) -> Box<dyn TypeKeys> {
        Box::new(self.clone())
    }

    fn same_as(&self, other: &dyn TypeKeys) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
