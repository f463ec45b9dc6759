//! A config key described once: its name, its default, the values it
//! takes and what it means. One description checks a value (the error
//! names the key and the range), gives the struct its default, and renders
//! the reference (the tables in docs/configuration.md and the man page
//! `spillway.toml(5)`), so the check, the default and the documentation
//! cannot drift apart.

use crate::units::{GIB, KIB, MIB};

/// What an integer key counts, for its range's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A plain count.
    Count,
    /// Bytes (shown as KiB/MiB/GiB where exact).
    Bytes,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
}

impl Unit {
    /// The suffix an error message puts after a range.
    fn suffix(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Bytes => " bytes",
            Unit::Ms => " ms",
            Unit::Us => " µs",
        }
    }
}

/// A key's default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultValue {
    /// An integer.
    Int(u64),
    /// `true` or `false`.
    Bool(bool),
    /// A TOML string, shown quoted (`"0600"`).
    Str(&'static str),
    /// A path, shown as it is written.
    Path(&'static str),
    /// The key is unset by default; the text says what that means.
    Unset(&'static str),
    /// The key must be given (when its table is).
    Required,
}

/// The values a key takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// An integer in `min..=max`.
    Range { min: u64, max: u64, unit: Unit },
    /// 0, which means `zero` ("no limit"), or an integer in `min..=max`.
    ZeroOrRange {
        zero: &'static str,
        min: u64,
        max: u64,
        unit: Unit,
    },
    /// An integer in `min..=max`, or one of the strings `or` (e.g.
    /// `batches_in_flight`: `1..=64` or `"adaptive"`).
    RangeOr {
        min: u64,
        max: u64,
        unit: Unit,
        or: &'static [&'static str],
    },
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// A value of another shape (a list, a table, a string or an integer),
    /// said in words (markdown) and as a JSON Schema fragment, which
    /// `spillway schema` publishes for editors.
    Shaped {
        text: &'static str,
        schema: &'static str,
    },
    /// Anything else, said in words (markdown): a string, or a boolean
    /// when its default is one.
    Text(&'static str),
}

/// One key of the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// The full dotted name: `server.connections_max`.
    pub name: &'static str,
    pub default: DefaultValue,
    pub allowed: Allowed,
    /// A rule across keys the range column adds (markdown), or "".
    pub also: &'static str,
    /// What the key does (markdown).
    pub meaning: &'static str,
}

impl Key {
    /// The name within its table: `connections_max`.
    pub fn short(&self) -> &'static str {
        self.name.rsplit('.').next().unwrap_or(self.name)
    }

    /// The integer default. A key whose default is not an integer is a
    /// mistake in the table, caught by the first test that builds a default
    /// config.
    pub const fn int(&self) -> u64 {
        match self.default {
            DefaultValue::Int(n) => n,
            _ => panic!("this key's default is not an integer"),
        }
    }

    /// The boolean default.
    pub const fn flag(&self) -> bool {
        match self.default {
            DefaultValue::Bool(b) => b,
            _ => panic!("this key's default is not a boolean"),
        }
    }

    /// The string or path default.
    pub const fn text(&self) -> &'static str {
        match self.default {
            DefaultValue::Str(s) | DefaultValue::Path(s) => s,
            _ => panic!("this key's default is not a string"),
        }
    }

    /// `Ok` when `value` is in the key's range (or the key has none);
    /// otherwise what is allowed, as every error message says it: the
    /// range with its unit (`1..=65536`, `100..=600000 ms`, bytes also in
    /// KiB/MiB/GiB/TiB: `1048576..=1073741824 (1 MiB..=1 GiB)`), what 0
    /// means where it is allowed, and the strings allowed beside it.
    pub fn check(&self, value: u64) -> Result<(), String> {
        let (zero, min, max, unit, or) = match self.allowed {
            Allowed::Range { min, max, unit } => (None, min, max, unit, &[][..]),
            Allowed::RangeOr { min, max, unit, or } => (None, min, max, unit, or),
            Allowed::ZeroOrRange {
                zero,
                min,
                max,
                unit,
            } => (Some(zero), min, max, unit, &[][..]),
            Allowed::OneOf(_) | Allowed::Shaped { .. } | Allowed::Text(_) => return Ok(()),
        };
        if (min..=max).contains(&value) || (zero.is_some() && value == 0) {
            return Ok(());
        }
        let unit = match (unit, exact(min, unit), exact(max, unit)) {
            (Unit::Bytes, Some(low), Some(high)) => format!(" ({low}..={high})"),
            (unit, ..) => unit.suffix().to_string(),
        };
        let zero = zero.map_or(String::new(), |z| format!("0 ({z}) or "));
        let or: String = or.iter().map(|s| format!(" or \"{s}\"")).collect();
        Err(format!("{zero}{min}..={max}{unit}{or}"))
    }

    /// The default as the reference shows it (markdown).
    pub fn default_text(&self) -> String {
        let unit = match self.allowed {
            Allowed::Range { unit, .. }
            | Allowed::ZeroOrRange { unit, .. }
            | Allowed::RangeOr { unit, .. } => unit,
            Allowed::OneOf(_) | Allowed::Shaped { .. } | Allowed::Text(_) => Unit::Count,
        };
        if let (DefaultValue::Int(0), Allowed::ZeroOrRange { zero, .. }) =
            (self.default, self.allowed)
        {
            return format!("`0` ({zero})");
        }
        match self.default {
            DefaultValue::Int(n) => match exact(n, unit) {
                Some(plain) if plain != n.to_string() => format!("`{n}` ({plain})"),
                _ => format!("`{n}`"),
            },
            DefaultValue::Bool(b) => format!("`{b}`"),
            DefaultValue::Str(s) => format!("`\"{s}\"`"),
            DefaultValue::Path(p) => format!("`{p}`"),
            DefaultValue::Unset("") => "unset".into(),
            DefaultValue::Unset(why) => format!("unset ({why})"),
            DefaultValue::Required => "(required)".into(),
        }
    }

    /// The allowed values as the reference shows them (markdown).
    pub fn allowed_text(&self) -> String {
        let range = |min: u64, max: u64, unit| match unit {
            Unit::Bytes => {
                let show = |n| exact(n, Unit::Bytes).unwrap_or_else(|| n.to_string());
                format!("{}..={}", show(min), show(max))
            }
            _ => format!("{min}..={max}"),
        };
        let values = match self.allowed {
            Allowed::Range { min, max, unit } => range(min, max, unit),
            Allowed::ZeroOrRange {
                zero,
                min,
                max,
                unit,
            } => format!("0 ({zero}), or {}", range(min, max, unit)),
            Allowed::RangeOr { min, max, unit, or } => {
                format!("{}, or {}", range(min, max, unit), quoted(or))
            }
            Allowed::OneOf(names) => quoted(names),
            Allowed::Shaped { text, .. } | Allowed::Text(text) => text.to_string(),
        };
        if self.also.is_empty() {
            values
        } else {
            format!("{values}, {}", self.also)
        }
    }
}

/// TOML strings as the reference shows them: `"a"`, `"b"`.
fn quoted(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().map(|n| format!("`\"{n}\"`")).collect();
    shown.join(", ")
}

/// `n` in the largest binary unit that divides it (bytes), or in minutes
/// or seconds (milliseconds of a second or more); `None` when nothing
/// reads better than the number.
pub fn exact(n: u64, unit: Unit) -> Option<String> {
    match unit {
        Unit::Bytes => [
            (1024 * GIB, "TiB"),
            (GIB, "GiB"),
            (MIB, "MiB"),
            (KIB, "KiB"),
        ]
        .into_iter()
        .find(|(size, _)| n >= *size && n.is_multiple_of(*size))
        .map(|(size, name)| format!("{} {name}", n / size)),
        Unit::Ms if n >= 60_000 && n.is_multiple_of(60_000) => Some(format!("{} min", n / 60_000)),
        Unit::Ms if n >= 1_000 && n.is_multiple_of(1_000) => Some(format!("{} s", n / 1_000)),
        _ => None,
    }
}

/// `keys` as JSON, the way a plugin describes its options to the daemon
/// (the `describe_options` function of the ABI's extension; the format is
/// in docs/plugins.md): an array of objects, one per key, in order, each
/// with the key's name within its table and the rest of the [`Key`] as it
/// is declared. Written by hand: the SDK has no dependencies.
pub fn describe(keys: &[Key]) -> String {
    let items: Vec<String> = keys.iter().map(Key::describe).collect();
    format!("[{}]", items.join(","))
}

impl Key {
    /// This key as one object of [`describe`]'s array.
    fn describe(&self) -> String {
        let default = match self.default {
            DefaultValue::Int(n) => format!("{{\"int\":{n}}}"),
            DefaultValue::Bool(b) => format!("{{\"bool\":{b}}}"),
            DefaultValue::Str(s) => format!("{{\"str\":{}}}", json_string(s)),
            DefaultValue::Path(p) => format!("{{\"path\":{}}}", json_string(p)),
            DefaultValue::Unset(why) => format!("{{\"unset\":{}}}", json_string(why)),
            DefaultValue::Required => "\"required\"".to_string(),
        };
        let range = |min: u64, max: u64, unit: Unit| {
            format!("\"min\":{min},\"max\":{max},\"unit\":\"{}\"", unit.name())
        };
        let allowed = match self.allowed {
            Allowed::Range { min, max, unit } => {
                format!("{{\"range\":{{{}}}}}", range(min, max, unit))
            }
            Allowed::ZeroOrRange {
                zero,
                min,
                max,
                unit,
            } => format!(
                "{{\"zero_or_range\":{{\"zero\":{},{}}}}}",
                json_string(zero),
                range(min, max, unit)
            ),
            Allowed::RangeOr { min, max, unit, or } => format!(
                "{{\"range_or\":{{{},\"or\":{}}}}}",
                range(min, max, unit),
                json_strs(or)
            ),
            Allowed::OneOf(names) => format!("{{\"one_of\":{}}}", json_strs(names)),
            Allowed::Shaped { text, schema } => format!(
                "{{\"shaped\":{{\"text\":{},\"schema\":{}}}}}",
                json_string(text),
                json_string(schema)
            ),
            Allowed::Text(text) => format!("{{\"text\":{}}}", json_string(text)),
        };
        format!(
            "{{\"name\":{},\"default\":{default},\"allowed\":{allowed},\"also\":{},\"meaning\":{}}}",
            json_string(self.short()),
            json_string(self.also),
            json_string(self.meaning)
        )
    }
}

impl Unit {
    /// Its name in [`describe`]'s text.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Count => "count",
            Unit::Bytes => "bytes",
            Unit::Ms => "ms",
            Unit::Us => "us",
        }
    }

    /// The unit [`Unit::name`] names.
    pub fn from_name(name: &str) -> Option<Unit> {
        [Unit::Count, Unit::Bytes, Unit::Ms, Unit::Us]
            .into_iter()
            .find(|u| u.name() == name)
    }
}

/// `s` as a JSON string literal (the SDK writes its JSON by hand: it has
/// no dependencies; the daemon's HTTP door uses it for its error bodies).
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON array of strings.
fn json_strs(items: &[&str]) -> String {
    let items: Vec<String> = items.iter().map(|s| json_string(s)).collect();
    format!("[{}]", items.join(","))
}

/// A table of keys: `[server]` and its keys, in the order the reference
/// lists them.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    /// The TOML table: `server`, `server.http`.
    pub name: &'static str,
    pub keys: &'static [Key],
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key = Key {
        name: "a.b.size_max",
        default: DefaultValue::Int(16 * MIB),
        allowed: Allowed::Range {
            min: 64 * KIB,
            max: GIB,
            unit: Unit::Bytes,
        },
        also: "≥ `x`",
        meaning: "",
    };

    #[test]
    fn a_range_is_checked_inclusively_and_its_error_says_the_range() {
        assert_eq!(K.check(64 * KIB), Ok(()));
        assert_eq!(K.check(GIB), Ok(()));
        let allowed = "65536..=1073741824 (64 KiB..=1 GiB)";
        assert_eq!(K.check(64 * KIB - 1), Err(allowed.into()));
        assert_eq!(K.check(GIB + 1), Err(allowed.into()));
        let odd = Key {
            allowed: Allowed::Range {
                min: 1000,
                max: 5000,
                unit: Unit::Bytes,
            },
            ..K
        };
        assert_eq!(odd.check(1), Err("1000..=5000 bytes".into()));
        let ms = Key {
            allowed: Allowed::RangeOr {
                min: 1,
                max: 64,
                unit: Unit::Ms,
                or: &["adaptive"],
            },
            ..K
        };
        assert_eq!(ms.check(65), Err("1..=64 ms or \"adaptive\"".into()));
    }

    #[test]
    fn the_reference_shows_units_where_they_read_better() {
        assert_eq!(K.short(), "size_max");
        assert_eq!(K.default_text(), "`16777216` (16 MiB)");
        assert_eq!(K.allowed_text(), "64 KiB..=1 GiB, ≥ `x`");
        let ms = Key {
            default: DefaultValue::Int(300_000),
            allowed: Allowed::Range {
                min: 100,
                max: 1_500,
                unit: Unit::Ms,
            },
            also: "",
            ..K
        };
        assert_eq!(ms.default_text(), "`300000` (5 min)");
        assert_eq!(ms.allowed_text(), "100..=1500");
        assert_eq!(
            Key {
                default: DefaultValue::Int(10_000),
                ..ms
            }
            .default_text(),
            "`10000` (10 s)"
        );
        assert_eq!(
            Key {
                default: DefaultValue::Int(5),
                ..ms
            }
            .default_text(),
            "`5`"
        );
        let lag = Key {
            default: DefaultValue::Int(0),
            allowed: Allowed::ZeroOrRange {
                zero: "no limit",
                min: MIB,
                max: 1024 * GIB,
                unit: Unit::Bytes,
            },
            also: "",
            ..K
        };
        assert_eq!(lag.default_text(), "`0` (no limit)");
        assert_eq!(lag.allowed_text(), "0 (no limit), or 1 MiB..=1 TiB");
        assert_eq!(lag.check(0), Ok(()));
        assert_eq!(lag.check(MIB), Ok(()));
        assert_eq!(
            lag.check(MIB - 1),
            Err("0 (no limit) or 1048576..=1099511627776 (1 MiB..=1 TiB)".into())
        );
    }
}
