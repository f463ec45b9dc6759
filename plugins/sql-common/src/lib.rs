//! # spillway-sql-common: what the SQL sink plugins share
//!
//! The postgres and mariadb plugins (`plugins/postgres`, `plugins/mariadb`)
//! write the same rows keyed by `(instance, shard, seq)`; what they take
//! from the config is checked here once: the table name ([`table`], with
//! each server's identifier rules as a [`table::Dialect`]) and the JSON
//! fields mapped into columns ([`columns`]).

pub mod columns;
pub mod table;

pub use columns::{check, extract, utc_datetime, Cell, Column, ColumnOption, ColumnType};
pub use table::{Dialect, TableName};
