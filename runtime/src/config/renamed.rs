//! Keys that have a new name: one spelling per concept across every table
//! (`cert_file`, `key_file`, `ca_file`, `token_env`, `..._max` for limits).
//! A config that still uses an old name is refused with a message naming
//! the new one, at `run`, `check` and a reload alike (all read the file
//! through [`super::Config::parse`]), rather than with serde's bare
//! "unknown field".

use toml::{Table, Value};

/// (table, old name, new name). `sinks.*` stands for every `[sinks.NAME]`.
const RENAMED: &[(&str, &str, &str)] = &[
    ("server", "max_connections", "connections_max"),
    ("server.tcp", "max_connections", "connections_max"),
    ("server.tcp", "cert", "cert_file"),
    ("server.tcp", "key", "key_file"),
    ("server.tcp", "client_ca", "ca_file"),
    ("server.http", "max_connections", "connections_max"),
    ("server.http", "cert", "cert_file"),
    ("server.http", "key", "key_file"),
    ("server.http", "client_ca", "ca_file"),
    ("sink", "bearer_token_env", "token_env"),
    ("sinks.*", "bearer_token_env", "token_env"),
    ("sink", "max_records", "batch_records_max"),
    ("sinks.*", "max_records", "batch_records_max"),
    ("sink", "max_bytes", "batch_bytes_max"),
    ("sinks.*", "max_bytes", "batch_bytes_max"),
    ("sink", "max_retry_duration_ms", "retry_duration_max_ms"),
    ("sinks.*", "max_retry_duration_ms", "retry_duration_max_ms"),
];

/// The first key of `doc` that has a new name, as the message that says
/// so: `server.tcp.cert is now server.tcp.cert_file ...`.
pub(super) fn old_spelling(doc: &Table) -> Option<String> {
    for &(table, old, new) in RENAMED {
        for (name, t) in tables_named(doc, table) {
            if t.contains_key(old) && !t.contains_key(new) {
                return Some(format!(
                    "{name}.{old} is now called {name}.{new} (one spelling per concept, see \
                     docs/configuration.md#renamed-keys): rename the key, the value stays the same"
                ));
            }
            if t.contains_key(old) {
                return Some(format!(
                    "{name}.{old} is the old name of {name}.{new}, which is set too: remove {name}.{old}"
                ));
            }
        }
    }
    None
}

/// The tables of `doc` that `pattern` names, with their full names.
fn tables_named<'a>(doc: &'a Table, pattern: &str) -> Vec<(String, &'a Table)> {
    if let Some(parent) = pattern.strip_suffix(".*") {
        let Some(Value::Table(all)) = doc.get(parent) else {
            return Vec::new();
        };
        return all
            .iter()
            .filter_map(|(n, v)| Some((format!("{parent}.{n}"), v.as_table()?)))
            .collect();
    }
    let mut at = doc;
    for part in pattern.split('.') {
        match at.get(part) {
            Some(Value::Table(t)) => at = t,
            _ => return Vec::new(),
        }
    }
    vec![(pattern.to_string(), at)]
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    /// Every old name is refused with a message naming the new one, in
    /// every table it was used in.
    #[test]
    fn an_old_spelling_is_refused_naming_the_new_key() {
        for (text, old, new) in [
            ("[server]\nmax_connections = 5\n", "server.max_connections", "server.connections_max"),
            (
                "[server.tcp]\nlisten = \"127.0.0.1:1\"\ncert = \"c\"\nkey_file = \"k\"\n",
                "server.tcp.cert",
                "server.tcp.cert_file",
            ),
            (
                "[server.http]\nlisten = \"127.0.0.1:1\"\nkey = \"k\"\n",
                "server.http.key",
                "server.http.key_file",
            ),
            (
                "[server.http]\nlisten = \"127.0.0.1:1\"\nclient_ca = \"k\"\n",
                "server.http.client_ca",
                "server.http.ca_file",
            ),
            (
                "[sink]\ntype = \"http\"\nurl = \"http://h/\"\nbearer_token_env = \"T\"\n",
                "sink.bearer_token_env",
                "sink.token_env",
            ),
            (
                "[sinks.warehouse]\ntype = \"http\"\nurl = \"http://h/\"\nbearer_token_env = \"T\"\n",
                "sinks.warehouse.bearer_token_env",
                "sinks.warehouse.token_env",
            ),
            (
                "[sink]\ntype = \"noop\"\nmax_records = 5\n",
                "sink.max_records",
                "sink.batch_records_max",
            ),
            (
                "[sinks.a]\ntype = \"noop\"\nmax_bytes = 5000\n",
                "sinks.a.max_bytes",
                "sinks.a.batch_bytes_max",
            ),
            (
                "[sink]\ntype = \"noop\"\nmax_retry_duration_ms = 5000\n",
                "sink.max_retry_duration_ms",
                "sink.retry_duration_max_ms",
            ),
        ] {
            let err = Config::parse(text, "t").unwrap_err().to_string();
            assert!(
                err.starts_with("t: ") && err.contains(&format!("{old} is now called {new}")),
                "{text:?}: {err}"
            );
        }
        let both = "[server]\nmax_connections = 5\nconnections_max = 5\n";
        let err = Config::parse(both, "t").unwrap_err().to_string();
        assert!(err.contains("remove server.max_connections"), "{err}");
        // A key of the same name in a table where it was never renamed is
        // serde's to judge (the sink's `key` is no key at all).
        let err = Config::parse("[admin]\ncert = 1\n", "t")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `cert`"), "{err}");
    }
}
