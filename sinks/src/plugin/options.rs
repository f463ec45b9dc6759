//! A plugin's options as the plugin describes them (the ABI's
//! `describe_options`: its [`Key`]s as JSON, `sink_sdk::keys::describe`),
//! and `[sink.options]` checked against them before any `create`: an
//! unknown key (with the closest known one), a required key missing, a
//! value of the wrong type, an integer out of its range, a string not
//! among the allowed ones, each naming `sink.options.KEY` in the words the
//! daemon uses for its own keys. A plugin that does not describe its
//! options is checked by its `create` alone, as before.
//!
//! The description is read once per loaded library, which stays mapped
//! for the rest of the process (see the module `plugin`): its keys are
//! leaked with it, so they are `&'static` like the daemon's own and every
//! renderer of keys (the reference tables, the JSON Schema) takes them.

use serde::Deserialize;
use sink_sdk::keys::{Allowed, DefaultValue, Key, Unit};

use crate::suggest::closest;
use crate::KeyProblem;

/// One key as the description writes it (the mirror of [`Key`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Described {
    name: String,
    default: DescribedDefault,
    allowed: DescribedAllowed,
    #[serde(default)]
    also: String,
    #[serde(default)]
    meaning: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum DescribedDefault {
    Int(u64),
    Bool(bool),
    Str(String),
    Path(String),
    Unset(String),
    Required,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescribedRange {
    min: u64,
    max: u64,
    unit: String,
    #[serde(default)]
    zero: Option<String>,
    #[serde(default)]
    or: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum DescribedAllowed {
    Range(DescribedRange),
    ZeroOrRange(DescribedRange),
    RangeOr(DescribedRange),
    OneOf(Vec<String>),
    Shaped { text: String, schema: String },
    Text(String),
}

/// Longest description of one option's name: a TOML bare key of the
/// kind every config uses.
const NAME_BYTES_MAX: usize = 64;

/// The keys `text` describes, named `options.NAME`, leaked for the life of
/// the process (read once per loaded library). The error says what is
/// wrong with the description (a plugin's bug, which `spillway plugin
/// test` also reports).
pub(crate) fn read_description(text: &str) -> Result<&'static [Key], String> {
    let described: Vec<Described> =
        serde_json::from_str(text).map_err(|e| format!("its options description: {e}"))?;
    let mut keys = Vec::with_capacity(described.len());
    for d in described {
        let key = to_key(d)?;
        if keys.iter().any(|k: &Key| k.name == key.name) {
            return Err(format!(
                "its options description lists {} twice",
                key.short()
            ));
        }
        keys.push(key);
    }
    Ok(Vec::leak(keys))
}

fn leak(s: String) -> &'static str {
    String::leak(s)
}

fn to_key(d: Described) -> Result<Key, String> {
    let bare = !d.name.is_empty()
        && d.name.len() <= NAME_BYTES_MAX
        && d.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !bare {
        return Err(format!(
            "its options description names an option {:?}: a name is 1 to {NAME_BYTES_MAX} of A-Z a-z 0-9 _ -",
            d.name
        ));
    }
    let whose = |what: &str| format!("its options description of {}: {what}", d.name);
    let unit = |r: &DescribedRange| {
        Unit::from_name(&r.unit).ok_or_else(|| whose(&format!("unknown unit {:?}", r.unit)))
    };
    let strings = |v: Vec<String>| -> &'static [&'static str] {
        Vec::leak(v.into_iter().map(leak).collect())
    };
    let allowed = match d.allowed {
        DescribedAllowed::Range(r) => Allowed::Range {
            min: r.min,
            max: r.max,
            unit: unit(&r)?,
        },
        DescribedAllowed::ZeroOrRange(r) => Allowed::ZeroOrRange {
            unit: unit(&r)?,
            zero: leak(
                r.zero
                    .ok_or_else(|| whose("zero_or_range without `zero`"))?,
            ),
            min: r.min,
            max: r.max,
        },
        DescribedAllowed::RangeOr(r) => Allowed::RangeOr {
            unit: unit(&r)?,
            or: strings(r.or.ok_or_else(|| whose("range_or without `or`"))?),
            min: r.min,
            max: r.max,
        },
        DescribedAllowed::OneOf(names) if names.is_empty() => {
            return Err(whose("one_of lists no value"))
        }
        DescribedAllowed::OneOf(names) => Allowed::OneOf(strings(names)),
        DescribedAllowed::Shaped { text, schema } => {
            let parsed: serde_json::Value = serde_json::from_str(&schema)
                .map_err(|e| whose(&format!("its schema is not JSON: {e}")))?;
            if !parsed.is_object() {
                return Err(whose("its schema is not a JSON object"));
            }
            Allowed::Shaped {
                text: leak(text),
                schema: leak(schema),
            }
        }
        DescribedAllowed::Text(text) => Allowed::Text(leak(text)),
    };
    if let Allowed::Range { min, max, .. }
    | Allowed::ZeroOrRange { min, max, .. }
    | Allowed::RangeOr { min, max, .. } = allowed
    {
        if min > max {
            return Err(whose(&format!("its range {min}..={max} is empty")));
        }
    }
    let default = match d.default {
        DescribedDefault::Int(n) => DefaultValue::Int(n),
        DescribedDefault::Bool(b) => DefaultValue::Bool(b),
        DescribedDefault::Str(s) => DefaultValue::Str(leak(s)),
        DescribedDefault::Path(p) => DefaultValue::Path(leak(p)),
        DescribedDefault::Unset(why) => DefaultValue::Unset(leak(why)),
        DescribedDefault::Required => DefaultValue::Required,
    };
    let key = Key {
        name: leak(format!("options.{}", d.name)),
        default,
        allowed,
        also: leak(d.also),
        meaning: leak(d.meaning),
    };
    // A default outside its own range is a mistake in the declaration.
    if let DefaultValue::Int(n) = key.default {
        key.check(n)
            .map_err(|range| whose(&format!("its default {n} is outside {range}")))?;
    }
    Ok(key)
}

/// What a TOML value is, in the words an error uses.
fn kind(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// The TOML kind a key's declaration asks for (as the JSON Schema says it:
/// `spillway schema`), or `None` when anything goes.
fn wanted(key: &Key) -> Option<&'static str> {
    match key.allowed {
        Allowed::Range { .. } | Allowed::ZeroOrRange { .. } => Some("an integer"),
        Allowed::RangeOr { .. } => None,
        Allowed::OneOf(_) => Some("a string"),
        Allowed::Text(_) => Some(match key.default {
            DefaultValue::Bool(_) => "a boolean",
            _ => "a string",
        }),
        Allowed::Shaped { schema, .. } => {
            let parsed: serde_json::Value = serde_json::from_str(schema).ok()?;
            match parsed.get("type")?.as_str()? {
                "string" => Some("a string"),
                "integer" => Some("an integer"),
                "boolean" => Some("a boolean"),
                "array" => Some("an array"),
                "object" => Some("a table"),
                _ => None,
            }
        }
    }
}

/// `options` against the keys `plugin` declares: the first problem, named
/// `options.KEY` (the caller adds the sink's table) and said as a
/// plugin's own refusal is (`plugin NAME: why`).
pub(crate) fn check(keys: &[Key], options: &toml::Table, plugin: &str) -> Result<(), KeyProblem> {
    problem(keys, options).map_err(|(key, why)| KeyProblem::Invalid {
        key: format!("options.{key}"),
        reason: format!("plugin {plugin}: {why}"),
    })
}

/// The first option `options` gets wrong, and why.
fn problem(keys: &[Key], options: &toml::Table) -> Result<(), (String, String)> {
    let names: Vec<&str> = keys.iter().map(Key::short).collect();
    for given in options.keys() {
        if names.contains(&given.as_str()) {
            continue;
        }
        let why = match (names.is_empty(), closest(given, &names)) {
            (true, _) => "takes no options".to_string(),
            (false, Some(near)) => format!(
                "no such option; did you mean `{near}`? (its options: {})",
                names.join(", ")
            ),
            (false, None) => format!("no such option (its options: {})", names.join(", ")),
        };
        return Err((given.clone(), why));
    }
    for key in keys {
        let fail = |why: String| Err((key.short().to_string(), why));
        let Some(value) = options.get(key.short()) else {
            if key.default == DefaultValue::Required {
                return fail("is required".into());
            }
            continue;
        };
        match (key.allowed, value) {
            (Allowed::RangeOr { or, .. }, toml::Value::String(s)) if !or.contains(&s.as_str()) => {
                return fail(not_one_of(s, or));
            }
            (Allowed::OneOf(names), toml::Value::String(s)) if !names.contains(&s.as_str()) => {
                return fail(not_one_of(s, names));
            }
            (
                Allowed::Range { .. } | Allowed::ZeroOrRange { .. } | Allowed::RangeOr { .. },
                toml::Value::Integer(n),
            ) => {
                let Ok(v) = u64::try_from(*n) else {
                    return fail(format!(
                        "{n} is negative: allowed {}",
                        plain(&key.allowed_text())
                    ));
                };
                if let Err(allowed) = key.check(v) {
                    return fail(format!("{n} is out of range: allowed {allowed}"));
                }
            }
            (Allowed::RangeOr { .. }, other) => {
                return fail(format!(
                    "expected an integer or a string, found {}",
                    kind(other)
                ));
            }
            (_, other) => match wanted(key) {
                Some(want) if want != kind(other) => {
                    return fail(format!("expected {want}, found {}", kind(other)));
                }
                _ => {}
            },
        }
    }
    Ok(())
}

/// What `spillway check` shows of a plugin's options: a head line, then
/// one line per declared option with the value the config gives it (or
/// its default) and what it allows. A string's value is not shown (it may
/// be a secret), only that it is set.
pub(crate) fn report(
    keys: Option<&'static [Key]>,
    options_toml: &str,
    table: &str,
    plugin: &str,
) -> Vec<String> {
    let Some(keys) = keys else {
        return vec![format!(
            "{table}.options: plugin {plugin} does not declare its options; its create accepted them"
        )];
    };
    if keys.is_empty() {
        return vec![format!("{table}.options: plugin {plugin} takes no options")];
    }
    let given: toml::Table = toml::from_str(options_toml).unwrap_or_default();
    let mut lines = vec![format!(
        "{table}.options, as plugin {plugin} declares them:"
    )];
    let values: Vec<String> = keys
        .iter()
        .map(|key| match given.get(key.short()) {
            Some(toml::Value::String(_)) => "(set)".to_string(),
            Some(v) => v.to_string(),
            None => format!("{} (default)", plain(&key.default_text())),
        })
        .collect();
    let name_width = keys.iter().map(|k| k.short().len()).max().unwrap_or(0);
    let value_width = values.iter().map(String::len).max().unwrap_or(0);
    for (key, value) in keys.iter().zip(values) {
        lines.push(format!(
            "  {:name_width$} = {value:value_width$}  {}",
            key.short(),
            plain(&key.allowed_text()),
        ));
    }
    lines
}

/// Markdown's code quotes taken out, for a terminal.
fn plain(text: &str) -> String {
    text.replace('`', "")
}

/// `"jsn" is not one of "ndjson", "json" (did you mean "json"?)`.
fn not_one_of(given: &str, names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let near = closest(given, names).map_or(String::new(), |n| format!(" (did you mean {n:?}?)"));
    format!("{given:?} is not one of {}{near}", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyProblem;

    /// The description of `keys` as a plugin writes it, read back.
    fn round_trip(keys: &[Key]) -> &'static [Key] {
        read_description(&sink_sdk::keys::describe(keys)).expect("a described table reads")
    }

    /// Every key the daemon declares survives the trip through a plugin's
    /// description: the SDK writes what the host reads, shape for shape.
    #[test]
    fn every_declared_key_round_trips_through_a_description() {
        let mut all: Vec<Key> = Vec::new();
        for table in crate::reference::reference_tables() {
            all.extend(table.keys.iter().copied());
        }
        all.extend(sink_sdk::delivery::DeliveryConfig::KEYS.iter().copied());
        assert!(all.len() > 40, "{}", all.len());
        for key in &all {
            let back = round_trip(std::slice::from_ref(key));
            let want = Key {
                name: back[0].name,
                ..*key
            };
            assert_eq!(back[0], want, "{}", key.name);
            assert_eq!(back[0].name, format!("options.{}", key.short()));
        }
    }

    fn demo() -> &'static [Key] {
        sink_sdk::key_table! {
            #[derive(Debug)]
            struct Demo in "options" {
                path: std::path::PathBuf = Key {
                    default: DefaultValue::Required,
                    allowed: Allowed::Text("a path"),
                    also: "",
                    meaning: "Where.",
                },
                fsync: bool = Key {
                    default: DefaultValue::Bool(true),
                    allowed: Allowed::Text("`true` or `false`"),
                    also: "",
                    meaning: "Whether to sync.",
                },
                rotate_bytes: u64 = Key {
                    default: DefaultValue::Int(256 * 1024 * 1024),
                    allowed: Allowed::Range {
                        min: 1024 * 1024,
                        max: 64 * 1024 * 1024 * 1024,
                        unit: Unit::Bytes,
                    },
                    also: "",
                    meaning: "When to rotate.",
                },
                format: String = Key {
                    default: DefaultValue::Str("ndjson"),
                    allowed: Allowed::OneOf(&["ndjson", "json"]),
                    also: "",
                    meaning: "How.",
                },
            }
        }
        round_trip(Demo::KEYS)
    }

    fn checked(text: &str) -> Result<(), String> {
        let table: toml::Table = toml::from_str(text).unwrap();
        check(demo(), &table, "demo").map_err(|p| {
            crate::SinkConfigError::from(p)
                .in_table("sinks.archive")
                .to_string()
        })
    }

    #[test]
    fn options_are_checked_against_the_declaration_naming_the_key() {
        assert_eq!(checked("path = \"/x\""), Ok(()));
        assert_eq!(
            checked("path = \"/x\"\nrotate_bytes = 1073741824\nfsync = false\nformat = \"json\""),
            Ok(())
        );
        let cases = [
            (
                "path = \"/x\"\nfsinc = false",
                "fsinc: plugin demo: no such option; did you mean `fsync`? (its options: path, fsync, rotate_bytes, format)",
            ),
            (
                "path = \"/x\"\nzzz = 1",
                "zzz: plugin demo: no such option (its options: path, fsync, rotate_bytes, format)",
            ),
            ("fsync = true", "path: plugin demo: is required"),
            (
                "path = \"/x\"\nrotate_bytes = 5",
                "rotate_bytes: plugin demo: 5 is out of range: allowed 1048576..=68719476736 (1 MiB..=64 GiB)",
            ),
            (
                "path = \"/x\"\nrotate_bytes = -5",
                "rotate_bytes: plugin demo: -5 is negative: allowed 1 MiB..=64 GiB",
            ),
            (
                "path = \"/x\"\nrotate_bytes = \"1 MiB\"",
                "rotate_bytes: plugin demo: expected an integer, found a string",
            ),
            ("path = 3", "path: plugin demo: expected a string, found an integer"),
            (
                "path = \"/x\"\nfsync = \"yes\"",
                "fsync: plugin demo: expected a boolean, found a string",
            ),
            (
                "path = \"/x\"\nformat = \"jsn\"",
                "format: plugin demo: \"jsn\" is not one of \"ndjson\", \"json\" (did you mean \"json\"?)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(
                checked(text).unwrap_err(),
                format!("sinks.archive.options.{want}"),
                "{text}"
            );
        }
        let none: &[Key] = &[];
        let table: toml::Table = toml::from_str("k = 1").unwrap();
        assert_eq!(
            check(none, &table, "count"),
            Err(KeyProblem::Invalid {
                key: "options.k".into(),
                reason: "plugin count: takes no options".into()
            })
        );
    }

    #[test]
    fn check_shows_each_option_with_its_value_or_default() {
        let lines = report(
            Some(demo()),
            "path = \"/secret/place\"\nrotate_bytes = 1048576\n",
            "sinks.archive",
            "demo 1.0",
        );
        assert_eq!(
            lines,
            [
                "sinks.archive.options, as plugin demo 1.0 declares them:",
                "  path         = (set)               a path",
                "  fsync        = true (default)      true or false",
                "  rotate_bytes = 1048576             1 MiB..=64 GiB",
                "  format       = \"ndjson\" (default)  \"ndjson\", \"json\"",
            ]
        );
        assert_eq!(
            report(None, "", "sink", "c 1"),
            ["sink.options: plugin c 1 does not declare its options; its create accepted them"]
        );
    }

    #[test]
    fn a_broken_description_is_refused_saying_what_is_wrong() {
        let cases = [
            (
                "{}",
                "its options description: invalid type: map, expected a sequence",
            ),
            (
                r#"[{"name":"a b","default":"required","allowed":{"text":"x"}}]"#,
                "names an option \"a b\"",
            ),
            (
                r#"[{"name":"a","default":{"int":5},"allowed":{"range":{"min":10,"max":20,"unit":"ms"}}}]"#,
                "its options description of a: its default 5 is outside 10..=20 ms",
            ),
            (
                r#"[{"name":"a","default":"required","allowed":{"range":{"min":1,"max":2,"unit":"parsecs"}}}]"#,
                "unknown unit \"parsecs\"",
            ),
            (
                r#"[{"name":"a","default":"required","allowed":{"text":"x"}},{"name":"a","default":"required","allowed":{"text":"x"}}]"#,
                "lists a twice",
            ),
            (
                r#"[{"name":"a","default":"required","allowed":{"shaped":{"text":"x","schema":"[1"}}}]"#,
                "its schema is not JSON",
            ),
        ];
        for (text, want) in cases {
            let e = read_description(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
