//! JSON fields into typed columns: `[sink.options.columns]`: the option's
//! shape, its check, and taking the values out of a record. Each plugin
//! maps a [`ColumnType`] to its server's SQL type.
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

/// `[sink.options.columns]` in words, for a plugin's declaration of its
/// options (`Allowed::Shaped`).
pub const OPTION_TEXT: &str = "a table of `NAME = { from = \"field\" or \"/json/pointer\", type = \"text\" | \"bigint\" | \"double\" | \"boolean\" | \"timestamptz\" | \"json\", required = true }`";

/// `[sink.options.columns]` as a JSON Schema fragment (`Allowed::Shaped`):
/// what `spillway schema --config` checks in an editor.
pub const OPTION_SCHEMA: &str = r#"{"type": "object", "additionalProperties": {"type": "object", "additionalProperties": false, "required": ["from", "type"], "properties": {"from": {"type": "string"}, "type": {"type": "string", "enum": ["text", "bigint", "double", "boolean", "timestamptz", "json"]}, "required": {"type": "boolean"}}}}"#;

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
    /// A JSON string holding an RFC 3339 timestamp, e.g.
    /// `2026-12-06T10:00:00Z` (PostgreSQL reads more forms, and rejects
    /// what it cannot read with its error; see [`utc_datetime`]).
    Timestamptz,
    /// Any JSON value, stored as `jsonb`.
    Json,
}

impl ColumnType {
    /// As the user writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Bigint => "bigint",
            ColumnType::Double => "double",
            ColumnType::Boolean => "boolean",
            ColumnType::Timestamptz => "timestamptz",
            ColumnType::Json => "json",
        }
    }
}

/// An RFC 3339 timestamp (`2026-12-06T10:00:00.5+01:00`, `Z` or an
/// offset, `T` or a space) as the UTC `YYYY-MM-DD HH:MM:SS.ffffff` a
/// `DATETIME(6)` column takes; `None` when `text` is not one.
pub fn utc_datetime(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let mut at = 19;
    let mut micros = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        let frac = &text[at + 1..at + 1 + digits];
        let six: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        micros = six.parse().ok()?;
        at += 1 + digits;
    }
    let offset_minutes = match &text[at..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':' =>
        {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (num(at + 1, 2)? * 60 + num(at + 4, 2)?)
        }
        _ => return None,
    };
    let days_in = |y: i64, m: i64| match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if !(1..=12).contains(&month)
        || !(1..=days_in(year, month)).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // Days from 1970-01-01 (Howard Hinnant's days_from_civil), then back.
    let days = {
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (month + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    };
    let total = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59) - offset_minutes * 60;
    let (days, secs) = (total.div_euclid(86_400), total.rem_euclid(86_400));
    let (y, m, d) = {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        (yoe + era * 400 + i64::from(m <= 2), m, d)
    };
    if !(1000..=9999).contains(&y) {
        return None;
    }
    Some(format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{micros:06}",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    ))
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

/// Checks the `[sink.options.columns]` table: names pass `identifier`
/// (the plugin's rule) and are not a built-in column's, `from` is not
/// empty. Errors name the option.
pub fn check(
    columns: &BTreeMap<String, ColumnOption>,
    identifier: fn(&str) -> Result<String, String>,
) -> Result<Vec<Column>, String> {
    columns
        .iter()
        .map(|(name, c)| {
            identifier(name).map_err(|e| format!("options.columns.{name}: {e}"))?;
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
                    c.kind.as_str(),
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

    /// The declared shape names every column type, and nothing else.
    #[test]
    fn the_option_schema_lists_every_column_type() {
        let schema: Value = serde_json::from_str(OPTION_SCHEMA).unwrap();
        let listed = &schema["additionalProperties"]["properties"]["type"]["enum"];
        let all = [
            ColumnType::Text,
            ColumnType::Bigint,
            ColumnType::Double,
            ColumnType::Boolean,
            ColumnType::Timestamptz,
            ColumnType::Json,
        ];
        let names: Vec<&str> = all.iter().map(|t| t.as_str()).collect();
        assert_eq!(listed, &serde_json::json!(names));
        for name in names {
            assert!(OPTION_TEXT.contains(&format!("\"{name}\"")), "{name}");
        }
    }

    fn lowercase(name: &str) -> Result<String, String> {
        match name.bytes().all(|c| c.is_ascii_lowercase() || c == b'_') {
            true => Ok(name.to_string()),
            false => Err(format!("{name:?} is not lowercase")),
        }
    }

    fn columns(toml_text: &str) -> Result<Vec<Column>, String> {
        let table: BTreeMap<String, ColumnOption> = toml::from_str(toml_text).unwrap();
        check(&table, lowercase)
    }

    #[test]
    fn rfc3339_to_utc() {
        assert_eq!(
            utc_datetime("2026-12-06T10:00:00Z").as_deref(),
            Some("2026-12-06 10:00:00.000000")
        );
        assert_eq!(
            utc_datetime("2026-12-06T00:30:00.25+01:00").as_deref(),
            Some("2026-12-05 23:30:00.250000")
        );
        assert_eq!(
            utc_datetime("2024-02-29 23:00:00-02:00").as_deref(),
            Some("2024-03-01 01:00:00.000000")
        );
        assert_eq!(
            utc_datetime("2026-12-31T23:59:59.1234567-00:30").as_deref(),
            Some("2027-01-01 00:29:59.123456")
        );
        for bad in [
            "2026-12-06",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-12-06T10:00:00",
            "2026-12-06T10:00:00+0100",
            "yesterday-ish-and-more",
            "2026-12-06T24:00:00Z",
        ] {
            assert_eq!(utc_datetime(bad), None, "{bad}");
        }
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
