//! The sink layer's errors: [`SinkConfigError`], a table that parses but
//! cannot be used (found when it is read), and [`SinkError`], a sink that
//! cannot be built, preflighted or instantiated.
//!
//! Every message names the key and says what is allowed. A key is named
//! with its table: `sink.batch_records_max` for the single `[sink]` table,
//! `sinks.warehouse.batch_records_max` for `[sinks.warehouse]`. The checks find a
//! [`KeyProblem`], which knows the key but not the table; the table is
//! added when the problem is reported ([`SinkConfigError::in_table`],
//! which `SinkConfig::validate` applies with the table the config was
//! given by `SinkConfig::with_table`).

use std::fmt;
use std::path::{Path, PathBuf};

/// The table a `[sink]` config is reported as unless told otherwise.
pub const DEFAULT_TABLE: &str = "sink";

/// What is wrong with a key, without the table it sits in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblem {
    /// `<key> = <value> is out of range: allowed <allowed>`.
    OutOfRange {
        key: &'static str,
        value: u64,
        allowed: String,
    },
    /// `<key> is required for type = "<kind>"`.
    Missing {
        key: &'static str,
        kind: &'static str,
    },
    /// `<key> is not used by type = "<kind>"<hint>`.
    NotApplicable {
        key: &'static str,
        kind: &'static str,
        hint: String,
    },
    /// `<key>: <reason>`.
    Invalid { key: String, reason: String },
    /// A key judged against another key of the same table:
    /// `<key><head><other><tail>`, both keys named with the table.
    AgainstKey {
        key: String,
        head: String,
        other: &'static str,
        tail: String,
    },
}

/// A key set outside the range it declares (the check every declared key
/// table makes, [`sink_sdk::key_table!`]).
impl From<sink_sdk::declare::OutOfRange> for KeyProblem {
    fn from(o: sink_sdk::declare::OutOfRange) -> Self {
        KeyProblem::OutOfRange {
            key: o.key.short(),
            value: o.value,
            allowed: o.allowed,
        }
    }
}

impl KeyProblem {
    /// The message, keys named in `table`.
    fn render(&self, table: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyProblem::OutOfRange {
                key,
                value,
                allowed,
            } => write!(
                f,
                "{table}.{key} = {value} is out of range: allowed {allowed}"
            ),
            KeyProblem::Missing { key, kind } => {
                write!(f, "{table}.{key} is required for type = \"{kind}\"")
            }
            KeyProblem::NotApplicable { key, kind, hint } => {
                write!(f, "{table}.{key} is not used by type = \"{kind}\"{hint}")
            }
            KeyProblem::Invalid { key, reason } => write!(f, "{table}.{key}: {reason}"),
            KeyProblem::AgainstKey {
                key,
                head,
                other,
                tail,
            } => write!(f, "{table}.{key}{head}{table}.{other}{tail}"),
        }
    }
}

/// A sink table that parses but cannot be used: its [`KeyProblem`], and
/// the table it is reported in (`sink` unless [`in_table`] said otherwise).
///
/// [`in_table`]: SinkConfigError::in_table
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SinkConfigError {
    table: String,
    problem: KeyProblem,
}

impl SinkConfigError {
    /// The same problem, its keys named in `table` (e.g. `sinks.warehouse`).
    pub fn in_table(self, table: &str) -> SinkConfigError {
        SinkConfigError {
            table: table.to_owned(),
            ..self
        }
    }

    /// The table the keys are named in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// What is wrong, without the table.
    pub fn problem(&self) -> &KeyProblem {
        &self.problem
    }
}

impl From<KeyProblem> for SinkConfigError {
    fn from(problem: KeyProblem) -> Self {
        SinkConfigError {
            table: DEFAULT_TABLE.to_owned(),
            problem,
        }
    }
}

impl fmt::Display for SinkConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.render(&self.table, f)
    }
}

/// Why a sink could not be built, preflighted or given a new instance.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The table failed its check when it was read.
    #[error(transparent)]
    Config(#[from] SinkConfigError),
    /// A key that checked fine but cannot be used now: a token variable
    /// unset, a URL's host that does not resolve, a path that cannot be
    /// appended to, plugin options the plugin refuses.
    #[error("{table}.{key}: {reason}")]
    Key {
        table: String,
        key: String,
        reason: String,
    },
    /// A file a key names that cannot be opened.
    #[error("{table}.{key}: cannot open {}: {source}", path.display())]
    Io {
        table: String,
        key: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A plugin that cannot be loaded or refuses to make an instance (the
    /// message names the plugin).
    #[error("{reason}")]
    Plugin { reason: String },
    /// The sink's own machinery failed (a runtime, a client): nothing the
    /// configuration can change.
    #[error("{reason}")]
    Build { reason: String },
}

impl SinkError {
    /// A problem with `table.key`.
    pub fn key(table: &str, key: impl Into<String>, reason: impl Into<String>) -> SinkError {
        SinkError::Key {
            table: table.to_owned(),
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// `path`, which `table.key` names, opens for reading (a certificate,
    /// a key); the error says which key and why not.
    pub(crate) fn readable(table: &str, key: &'static str, path: &Path) -> Result<(), SinkError> {
        std::fs::File::open(path)
            .map(drop)
            .map_err(|source| SinkError::Io {
                table: table.to_string(),
                key,
                path: path.to_path_buf(),
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_a_parameter_of_the_message() {
        let e = SinkConfigError::from(KeyProblem::AgainstKey {
            key: "retry_max_ms".into(),
            head: ": 400 is less than ".into(),
            other: "retry_initial_ms",
            tail: " = 500".into(),
        });
        assert_eq!(
            e.to_string(),
            "sink.retry_max_ms: 400 is less than sink.retry_initial_ms = 500"
        );
        let e = e.in_table("sinks.warehouse");
        assert_eq!(
            e.to_string(),
            "sinks.warehouse.retry_max_ms: 400 is less than sinks.warehouse.retry_initial_ms = 500"
        );
        assert_eq!(e.table(), "sinks.warehouse");
    }
}
