//! The `[sink.options]` of the MySQL / MariaDB plugin: this type is its
//! user documentation.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use mysql::{Opts, OptsBuilder, SslOpts};
use serde::Deserialize;

use spillway_sql_common::columns::{self, Column, ColumnOption};

use crate::sql::TableName;

/// Default of [`MariadbOptions::table`].
pub const DEFAULT_TABLE: &str = "spillway_records";
/// Default of [`MariadbOptions::connect_timeout_ms`]: 5 s.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Range of [`MariadbOptions::connect_timeout_ms`].
pub const CONNECT_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=600_000;
/// Default of [`MariadbOptions::statement_timeout_ms`]: 30 s.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 30_000;
/// Range of [`MariadbOptions::statement_timeout_ms`].
pub const STATEMENT_TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=3_600_000;

/// What every session runs first: strict mode, so a value that does not
/// fit its column is an error (dead-lettered with the server's message),
/// never silently truncated or zeroed.
pub const SQL_MODE: &str = "SET SESSION sql_mode = \
    'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";

/// Options of the MySQL / MariaDB plugin (`[sink.options]`). Unknown keys
/// are an error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MariadbOptions {
    /// Where to connect: `mysql://USER@HOST[:PORT]/DATABASE`, or over a
    /// Unix socket `mysql://USER@localhost/DATABASE?socket=/run/mysqld/mysqld.sock`.
    /// Required. Put the password in `password_env`, not here.
    pub url: String,
    /// The environment variable holding the password (read when the sink
    /// is built; unset or empty is an error naming it).
    pub password_env: Option<String>,
    /// The table records go to: a lowercase identifier, optionally
    /// `database.table`. Default `spillway_records`.
    #[serde(default = "default_table")]
    pub table: String,
    /// Create the table (`CREATE TABLE IF NOT EXISTS`) when connecting.
    /// Default true.
    #[serde(default = "yes")]
    pub create_table: bool,
    /// Connect with TLS (the server's certificate verified against the
    /// system's roots, or `ca_file`). Default false; refused with a Unix
    /// socket.
    #[serde(default)]
    pub tls: bool,
    /// PEM file of the CA that signed the server's certificate (with
    /// `tls = true`).
    pub ca_file: Option<PathBuf>,
    /// Limit on establishing a connection, in milliseconds. Default 5000,
    /// range 100..=600000.
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Limit on waiting for the server's answer to one statement (the
    /// socket's read and write timeouts), in milliseconds; a batch that
    /// takes longer is retried on a new connection. Default 30000, range
    /// 100..=3600000.
    #[serde(default = "default_statement_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// JSON fields of the payload into typed columns of their own
    /// (`[sink.options.columns]`, see `spillway_sql_common::columns`). Default
    /// none.
    #[serde(default)]
    pub columns: BTreeMap<String, ColumnOption>,
}

fn default_table() -> String {
    DEFAULT_TABLE.to_string()
}

fn yes() -> bool {
    true
}

fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}

fn default_statement_timeout_ms() -> u64 {
    DEFAULT_STATEMENT_TIMEOUT_MS
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
        toml::from_str(options_toml).map_err(|e| format!("options: {}", e.message().trim()))
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
        for (key, ms, range) in [
            (
                "connect_timeout_ms",
                self.connect_timeout_ms,
                &CONNECT_TIMEOUT_MS_RANGE,
            ),
            (
                "statement_timeout_ms",
                self.statement_timeout_ms,
                &STATEMENT_TIMEOUT_MS_RANGE,
            ),
        ] {
            if !range.contains(&ms) {
                return Err(format!(
                    "options.{key}: {ms} is out of range {}..={}",
                    range.start(),
                    range.end()
                ));
            }
        }
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
