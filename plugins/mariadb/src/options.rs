//! The `[sink.options]` of the MySQL / MariaDB plugin: this type is its
//! user documentation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use mysql::{Opts, OptsBuilder, SslOpts};
use serde::Deserialize;
use sink_sdk::keys::{Allowed, Unit};

use spillway_sql_common::columns::{self, Column, ColumnOption};

use crate::sql::TableName;

/// Default of [`MariadbOptions::table`].
pub const DEFAULT_TABLE: &str = "spillway_records";
/// Default of [`MariadbOptions::connect_timeout_ms`]: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Default of [`MariadbOptions::statement_timeout_ms`]: 30 s.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 30_000;

/// What every session runs first: strict mode, so a value that does not
/// fit its column is an error (dead-lettered with the server's message),
/// never silently truncated or zeroed.
pub const SQL_MODE: &str = "SET SESSION sql_mode = \
    'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";

sink_sdk::key_table! {
    /// Options of the MySQL / MariaDB plugin (`[sink.options]`), each
    /// declared once: the daemon checks a config against this declaration
    /// before `create` (unknown keys, types, ranges, each named), `spillway
    /// check` prints it, and [`MariadbOptions::settings`] checks the rest.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    pub struct MariadbOptions in "options" {
        url: String = Key {
            default: DefaultValue::Required,
            allowed: Allowed::Text(r#"`mysql://USER@HOST[:PORT]/DATABASE`, or `mysql://USER@localhost/DATABASE?socket=/run/mysqld/mysqld.sock`"#),
            also: "",
            meaning: r#"Where to connect. Put the password in `password_env`, not here."#,
        },
        password_env: Option<String> = Key {
            default: DefaultValue::Unset("no password"),
            allowed: Allowed::Text(r#"an environment variable's name"#),
            also: "",
            meaning: r#"The environment variable holding the password (read when the sink is built; unset or empty is an error naming it)."#,
        },
        table: String = Key {
            default: DefaultValue::Str(DEFAULT_TABLE),
            allowed: Allowed::Text(r#"a lowercase identifier, optionally `database.table`"#),
            also: "",
            meaning: r#"The table records go to."#,
        },
        create_table: bool = Key {
            default: DefaultValue::Bool(true),
            allowed: Allowed::Text(r#"`true` or `false`"#),
            also: "",
            meaning: r#"Create the table (`CREATE TABLE IF NOT EXISTS`) when connecting."#,
        },
        tls: bool = Key {
            default: DefaultValue::Bool(false),
            allowed: Allowed::Text(r#"`true` or `false`"#),
            also: "",
            meaning: r#"Connect with TLS (the server's certificate verified against the system's roots, or `ca_file`); refused with a Unix socket."#,
        },
        ca_file: Option<PathBuf> = Key {
            default: DefaultValue::Unset("the system's roots"),
            allowed: Allowed::Text(r#"a PEM file"#),
            also: "",
            meaning: r#"The CA that signed the server's certificate (with `tls = true`)."#,
        },
        connect_timeout_ms: u64 = Key {
            default: DefaultValue::Int(DEFAULT_CONNECT_TIMEOUT_MS),
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
            allowed: Allowed::Range {
                min: 100,
                max: 3_600_000,
                unit: Unit::Ms,
            },
            also: "",
            meaning: r#"Limit on waiting for the server's answer to one statement (the socket's read and write timeouts); a batch that takes longer is retried on a new connection."#,
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
    pub opts: Opts,
    pub table: TableName,
    pub create_table: bool,
    /// The mapped columns, in name order.
    pub columns: Vec<Column>,
}

impl MariadbOptions {
    /// Parses the options text; the error names the option.
    pub fn parse(options_toml: &str) -> Result<MariadbOptions, String> {
        let options: MariadbOptions =
            toml::from_str(options_toml).map_err(|e| format!("options: {}", e.message().trim()))?;
        if options.url.is_empty() {
            return Err("options.url: is required (mysql://USER@HOST/DATABASE)".into());
        }
        Ok(options)
    }

    /// Checks every option, reads `password_env`, and builds the
    /// connection options.
    pub fn settings(&self) -> Result<Settings, String> {
        let table =
            crate::sql::table_name(&self.table).map_err(|e| format!("options.table: {e}"))?;
        let url = Opts::from_url(&self.url).map_err(|e| format!("options.url: {e}"))?;
        let mut opts = OptsBuilder::from_opts(url.clone());
        if let Some(var) = &self.password_env {
            if url.get_pass().is_some() {
                return Err(
                    "options.url holds a password and options.password_env is set: give it in \
                     one place (password_env)"
                        .into(),
                );
            }
            let password = std::env::var(var).unwrap_or_default();
            if password.is_empty() {
                return Err(format!(
                    "options.password_env: the variable {var} is unset or empty"
                ));
            }
            opts = opts.pass(Some(password));
        }
        self.check_ranges().map_err(|e| e.to_string())?;
        let statement = Some(Duration::from_millis(self.statement_timeout_ms));
        opts = opts
            .tcp_connect_timeout(Some(Duration::from_millis(self.connect_timeout_ms)))
            .read_timeout(statement)
            .write_timeout(statement)
            .prefer_socket(false)
            .init(vec![SQL_MODE]);
        match (self.tls, &self.ca_file) {
            (false, Some(_)) => {
                return Err("options.ca_file is set but options.tls is false".into());
            }
            (true, _) if url.get_socket().is_some() => {
                return Err(
                    "options.tls: a Unix socket (options.url's socket=) does not take TLS".into(),
                );
            }
            (true, ca) => {
                let mut ssl = SslOpts::default();
                if let Some(ca) = ca {
                    if !ca.is_file() {
                        return Err(format!(
                            "options.ca_file: {} is not a readable file",
                            ca.display()
                        ));
                    }
                    ssl = ssl.with_root_cert_path(Some(ca.clone()));
                }
                opts = opts.ssl_opts(ssl);
            }
            (false, None) => {}
        }
        Ok(Settings {
            opts: opts.into(),
            table,
            create_table: self.create_table,
            columns: columns::check(&self.columns, crate::sql::identifier)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors_name_the_option() {
        let o = MariadbOptions::parse("url = \"mysql://u@h/db\"").unwrap();
        assert_eq!(
            (o.table.as_str(), o.create_table, o.tls),
            ("spillway_records", true, false)
        );
        assert_eq!(
            (o.connect_timeout_ms, o.statement_timeout_ms),
            (5_000, 30_000)
        );
        assert!(o.settings().is_ok());
        assert_eq!(
            MariadbOptions::parse("").unwrap_err(),
            "options.url: is required (mysql://USER@HOST/DATABASE)"
        );
        let e = MariadbOptions::parse("url = \"mysql://u@h/db\"\ntabel = \"x\"").unwrap_err();
        assert!(e.starts_with("options: unknown field `tabel`"), "{e}");
        let o = MariadbOptions::parse("url = \"mysql://u@h/db\"\nconnect_timeout_ms = 5").unwrap();
        assert_eq!(
            o.settings().unwrap_err(),
            "options.connect_timeout_ms = 5 is out of range: allowed 100..=600000 ms"
        );
    }
}
