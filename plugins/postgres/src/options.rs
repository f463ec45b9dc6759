//! The `[sink.options]` of the PostgreSQL plugin: this type is its user
//! documentation.

use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use sink_sdk::keys::{Allowed, Unit};

use std::collections::BTreeMap;

use crate::sql::TableName;
use spillway_sql_common::columns::{self, Column, ColumnOption};

/// Default of [`PostgresOptions::table`].
pub const DEFAULT_TABLE: &str = "spillway_records";
/// Default of [`PostgresOptions::connect_timeout_ms`]: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default of [`PostgresOptions::statement_timeout_ms`]: 30 s.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 30_000;
/// Largest [`PostgresOptions::statement_timeout_ms`]: 1 hour.
pub const STATEMENT_TIMEOUT_MS_MAX: u64 = 3_600_000;
/// `application_name` the plugin's sessions carry unless the conninfo
/// names one (to find them in `pg_stat_activity`).
pub const DEFAULT_APPLICATION_NAME: &str = "spillway";

sink_sdk::key_table! {
    /// Options of the PostgreSQL plugin (`[sink.options]`), each declared
    /// once: the daemon checks a config against this declaration before
    /// `create` (unknown keys, types, ranges, each named), `spillway check`
    /// prints it, and [`PostgresOptions::settings`] checks the rest.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct PostgresOptions in "options" {
        conninfo: String = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"a libpq `key=value` string or a `postgresql://` URL"#),
            also: "",
            meaning: r#"How to connect, e.g. `host=/var/run/postgresql user=spillway dbname=events`. `sslmode=require` is refused (no TLS)."#,
        },
        table: String = Key {
            default: DefaultValue::Str(DEFAULT_TABLE),
            allowed: Allowed::Text(r#"a lowercase SQL identifier, optionally schema-qualified"#),
            also: "",
            meaning: r#"The table records go to (`events.spillway_records`)."#,
        },
        create_table: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true` or `false`"#),
            also: "",
            meaning: r#"Create the table (`CREATE TABLE IF NOT EXISTS`) when connecting; with false it must exist with the columns docs/plugins.md shows."#,
        },
        connect_timeout_ms: Option<u64> = Key {
            default: DefaultValue::Unset("the conninfo's `connect_timeout`, else 5000"),
            allowed: Allowed::Range {
                min: 100,
                max: 600_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Limit on establishing a connection."#,
        },
        statement_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_STATEMENT_TIMEOUT_MS),
            allowed: Allowed::ZeroOrRange {
                zero: "no limit",
                min: 1,
                max: STATEMENT_TIMEOUT_MS_MAX,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Limit on one statement on the server (`statement_timeout`); a batch that takes longer is retried."#,
        },
        columns: BTreeMap<String, ColumnOption> = Key {
            default: DefaultValue::Unset("none"),
            allowed: Allowed::Shaped {
                text: columns::OPTION_TEXT,
                schema: columns::OPTION_SCHEMA,
            },
            also: "",
            meaning: r#"JSON fields of the payload into typed columns of their own (`[sink.options.columns]`)."#,
        },
    }
}

/// Options turned into what the sink uses.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: postgres::Config,
    pub table: TableName,
    pub create_table: bool,
    pub statement_timeout_ms: u64,
    /// The mapped columns, in name order.
    pub columns: Vec<Column>,
}

impl PostgresOptions {
    /// Parses the options text; the error names the option.
    pub fn parse(options_toml: &str) -> Result<PostgresOptions, String> {
        let options: PostgresOptions =
            toml::from_str(options_toml).map_err(|e| format!("options: {}", e.message().trim()))?;
        if options.conninfo.is_empty() {
            return Err("options.conninfo: is required (a conninfo string)".into());
        }
        Ok(options)
    }

    /// Checks every option and builds the connection settings.
    pub fn settings(&self) -> Result<Settings, String> {
        let table =
            crate::sql::table_name(&self.table).map_err(|e| format!("options.table: {e}"))?;
        let mut config = postgres::Config::from_str(&self.conninfo)
            .map_err(|e| format!("options.conninfo: {e}"))?;
        if config.get_ssl_mode() == postgres::config::SslMode::Require {
            return Err("options.conninfo: sslmode=require is not supported (this plugin connects without TLS)".into());
        }
        self.check_ranges().map_err(|e| e.to_string())?;
        match self.connect_timeout_ms {
            Some(ms) => {
                config.connect_timeout(Duration::from_millis(ms));
            }
            None if config.get_connect_timeout().is_none() => {
                config.connect_timeout(Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS));
            }
            None => {}
        }
        if config.get_application_name().is_none() {
            config.application_name(DEFAULT_APPLICATION_NAME);
        }
        // A peer that vanished mid-batch is noticed in about a minute
        // instead of never (a statement_timeout needs a live server).
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
        Ok(Settings {
            config,
            table,
            create_table: self.create_table,
            statement_timeout_ms: self.statement_timeout_ms,
            columns: columns::check(&self.columns, crate::sql::identifier)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Result<Settings, String> {
        PostgresOptions::parse(text)?.settings()
    }

    #[test]
    fn defaults() {
        let o = PostgresOptions::parse("conninfo = \"host=/tmp user=u\"").unwrap();
        assert_eq!(o.table, "spillway_records");
        assert!(o.create_table);
        assert_eq!(o.statement_timeout_ms, 30_000);
        let s = o.settings().unwrap();
        assert_eq!(
            s.config.get_connect_timeout(),
            Some(&Duration::from_secs(5))
        );
        assert_eq!(s.config.get_application_name(), Some("spillway"));
        assert_eq!(s.table.quoted(), "\"spillway_records\"");
    }

    #[test]
    fn conninfo_values_are_kept_unless_an_option_overrides_them() {
        let s =
            settings("conninfo = \"host=h user=u connect_timeout=9 application_name=x\"").unwrap();
        assert_eq!(
            s.config.get_connect_timeout(),
            Some(&Duration::from_secs(9))
        );
        assert_eq!(s.config.get_application_name(), Some("x"));
        let s =
            settings("conninfo = \"host=h connect_timeout=9\"\nconnect_timeout_ms = 250").unwrap();
        assert_eq!(
            s.config.get_connect_timeout(),
            Some(&Duration::from_millis(250))
        );
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(
            settings("").unwrap_err(),
            "options.conninfo: is required (a conninfo string)"
        );
        let e = settings("conninfo = \"host=h\"\ntabel = \"x\"").unwrap_err();
        assert!(e.starts_with("options: unknown field `tabel`"), "{e}");
        let e = settings("conninfo = \"host=h port=notaport\"").unwrap_err();
        assert!(e.starts_with("options.conninfo: "), "{e}");
        let e = settings("conninfo = \"host=h sslmode=require\"").unwrap_err();
        assert!(
            e.starts_with("options.conninfo: sslmode=require is not supported"),
            "{e}"
        );
        assert_eq!(
            settings("conninfo = \"host=h\"\nconnect_timeout_ms = 5").unwrap_err(),
            "options.connect_timeout_ms = 5 is out of range: allowed 100..=600000 ms"
        );
        assert_eq!(
            settings("conninfo = \"host=h\"\nstatement_timeout_ms = 3600001").unwrap_err(),
            "options.statement_timeout_ms = 3600001 is out of range: allowed 0 (no limit) or 1..=3600000 ms"
        );
        let e = settings("conninfo = \"host=h\"\ntable = \"Records\"").unwrap_err();
        assert!(e.starts_with("options.table: "), "{e}");
    }
}
