//! # spillway-sql-common: what the SQL sink plugins share
//!
//! The postgres and mariadb plugins (`plugins/postgres`, `plugins/mariadb`)
//! write the same rows keyed by `(instance, shard, seq)`; what they take
//! from the config is checked here once: the table name ([`table`], with
//! each server's identifier rules as a [`table::Dialect`]) and the JSON
//! fields mapped into columns ([`columns`]).

pub mod columns;
pub mod table;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

/// Longest a start waits to look at the table's shape (a server that does
/// not answer by then is looked at again by every session).
pub const SHAPE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a table not keyed by `(instance, shard, seq)` is never written into.
pub const WRONG_KEY_WHY: &str = "rows of several daemons (or of a data folder made anew, whose \
     numbers start again) would collide there and be dropped, so nothing is written into it";

/// Whether this is the first look at the table `key` names in this
/// process: its shape is probed once at start (per connection and table),
/// not by every shard's instance.
pub fn first_probe(key: String) -> bool {
    static PROBED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut probed = PROBED.lock().unwrap_or_else(|p| p.into_inner());
    probed.get_or_insert_with(HashSet::new).insert(key)
}

pub use columns::{check, extract, utc_datetime, Cell, Column, ColumnOption, ColumnType};
pub use table::{Dialect, TableName};
