//! JSON fields into typed columns: `[sink.options.columns]`.
//!
//! ```toml
//! [sink.options.columns]
//! user_id = { from = "/user/id", type = "bigint" }
//! at = { from = "ts", type = "timestamptz" }
//! active = { from = "active", type = "boolean", required = false }
//! ```
//!
//! Each column takes one value from the record's JSON payload: `from` is a
//! top-level field name, or a JSON pointer (RFC 6901) when it starts with
//! `/`. A record that is not JSON, lacks a required field (or has it
//! `null`), or has it of another type is rejected (to the dead letters)
//! naming the field and the column; the rest of its batch is written. The
//! raw `payload` column is written as always.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::sql;

/// The columns every row has (none of them may be mapped again).
pub const BUILT_IN: [&str; 6] = ["instance", "shard", "seq", "tier", "arrival_us", "payload"];

/// One `[sink.options.columns]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnOption {
    /// A top-level field name, or a JSON pointer (`/user/id`).
    pub from: String,
    /// The column's type.
    #[serde(rename = "type")]
    pub kind: ColumnType,
    /// A record without the field (or with `null`) is rejected; with
    /// `false` the column is NULL. Default true.
    #[serde(default = "yes")]
    pub required: bool,
}

fn yes() -> bool {
    true
}

/// What a column holds, and what JSON it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// A JSON string.
    Text,
    /// A JSON integer that fits 64 bits, signed.
    Bigint,
    /// A JSON number.
    Double,
    /// `true` or `false`.
    Boolean,
    /// A JSON string the server reads as a timestamp (RFC 3339, e.g.
    /// `2026-12-06T10:00:00Z`; one it cannot read is rejected with its
    /// error).
    Timestamptz,
    /// Any JSON value, stored as `jsonb`.
    Json,
}

impl ColumnType {
    /// The column's SQL type.
    pub fn sql_type(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Bigint => "bigint",
            ColumnType::Double => "double precision",
            ColumnType::Boolean => "boolean",
            ColumnType::Timestamptz => "timestamptz",
            ColumnType::Json => "jsonb",
        }
    }

    /// The array type its values are sent as, and the cast from an
    /// element of it to the column's type (if any).
    pub fn array_and_cast(self) -> (&'static str, &'static str) {
        match self {
            ColumnType::Text => ("text[]", ""),
            ColumnType::Bigint => ("bigint[]", ""),
            ColumnType::Double => ("float8[]", ""),
            ColumnType::Boolean => ("boolean[]", ""),
            ColumnType::Timestamptz => ("text[]", "::timestamptz"),
            ColumnType::Json => ("text[]", "::jsonb"),
        }
    }
}

/// A checked column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// As the user wrote it (for messages).
    pub from: String,
    /// `from` as a JSON pointer.
    pointer: String,
    pub kind: ColumnType,
    pub required: bool,
}

/// One value taken from a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// Checks the `[sink.options.columns]` table: names are lowercase
/// identifiers and not a built-in column's, `from` is not empty.
pub fn check(columns: &BTreeMap<String, ColumnOption>) -> Result<Vec<Column>, String> {
    columns
        .iter()
        .map(|(name, c)| {
            sql::identifier(name).map_err(|e| format!("options.columns.{name}: {e}"))?;
            if BUILT_IN.contains(&name.as_str()) {
                return Err(format!(
                    "options.columns.{name}: `{name}` is a column every row has already"
                ));
            }
            let pointer = match c.from.as_str() {
                "" => return Err(format!("options.columns.{name}.from is empty")),
                p if p.starts_with('/') => p.to_string(),
                field => format!("/{}", field.replace('~', "~0").replace('/', "~1")),
            };
            Ok(Column {
                name: name.clone(),
                from: c.from.clone(),
                pointer,
                kind: c.kind,
                required: c.required,
            })
        })
        .collect()
}

/// The JSON kind of `v`, for messages.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The cells of one record, one per column; the error (the record's
/// rejection) names the field and the column.
pub fn extract(columns: &[Column], payload: &[u8]) -> Result<Vec<Cell>, String> {
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let json: Value = serde_json::from_slice(payload)
        .map_err(|e| format!("the record is not JSON ({e}), so its fields cannot fill columns"))?;
    columns
        .iter()
        .map(|c| {
            let value = match json.pointer(&c.pointer) {
                None | Some(Value::Null) if c.required => {
                    return Err(format!(
                        "field {:?} (column {}) is missing or null",
                        c.from, c.name
                    ))
                }
                None | Some(Value::Null) => return Ok(Cell::Null),
                Some(v) => v,
            };
            let wrong = |want: &str| {
                format!(
                    "field {:?} (column {}, {}) is {}, not {want}",
                    c.from,
                    c.name,
                    c.kind.sql_type(),
                    kind_of(value)
                )
            };
            Ok(match c.kind {
                ColumnType::Text | ColumnType::Timestamptz => {
                    Cell::Text(value.as_str().ok_or_else(|| wrong("a string"))?.to_string())
                }
                ColumnType::Bigint => Cell::Int(
                    value
                        .as_i64()
                        .ok_or_else(|| wrong("an integer that fits 64 bits"))?,
                ),
                ColumnType::Double => Cell::Float(value.as_f64().ok_or_else(|| wrong("a number"))?),
                ColumnType::Boolean => {
                    Cell::Bool(value.as_bool().ok_or_else(|| wrong("a boolean"))?)
                }
                ColumnType::Json => Cell::Text(value.to_string()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(toml_text: &str) -> Result<Vec<Column>, String> {
        let table: BTreeMap<String, ColumnOption> = toml::from_str(toml_text).unwrap();
        check(&table)
    }

    #[test]
    fn fields_and_pointers_become_cells_or_name_the_field() {
        let cols = columns(
            "id = { from = \"/user/id\", type = \"bigint\" }\n\
             name = { from = \"a/b\", type = \"text\", required = false }\n\
             ok = { from = \"ok\", type = \"boolean\" }\n\
             extra = { from = \"/extra\", type = \"json\", required = false }",
        )
        .unwrap();
        // BTreeMap order: extra, id, name, ok.
        assert_eq!(
            extract(
                &cols,
                br#"{"user":{"id":7},"a/b":"x","ok":true,"extra":[1]}"#
            )
            .unwrap(),
            [
                Cell::Text("[1]".into()),
                Cell::Int(7),
                Cell::Text("x".into()),
                Cell::Bool(true)
            ]
        );
        assert_eq!(
            extract(&cols, br#"{"user":{"id":7},"ok":false}"#).unwrap(),
            [Cell::Null, Cell::Int(7), Cell::Null, Cell::Bool(false)]
        );
        assert_eq!(
            extract(&cols, br#"{"user":{},"ok":true}"#).unwrap_err(),
            "field \"/user/id\" (column id) is missing or null"
        );
        assert_eq!(
            extract(&cols, br#"{"user":{"id":"7"},"ok":true}"#).unwrap_err(),
            "field \"/user/id\" (column id, bigint) is a string, not an integer that fits 64 bits"
        );
        assert!(extract(&cols, b"not json")
            .unwrap_err()
            .starts_with("the record is not JSON"));
    }

    #[test]
    fn bad_columns_are_refused_naming_them() {
        assert!(columns("seq = { from = \"s\", type = \"bigint\" }")
            .unwrap_err()
            .contains("options.columns.seq"));
        assert!(columns("Bad = { from = \"s\", type = \"bigint\" }")
            .unwrap_err()
            .starts_with("options.columns.Bad: "));
        assert!(columns("x = { from = \"\", type = \"text\" }")
            .unwrap_err()
            .contains("from is empty"));
    }
}
