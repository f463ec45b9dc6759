//! The JSON Schema of spillway.toml (`spillway schema`), built from the
//! same key tables that give the defaults, check the ranges and render the
//! reference ([`crate::reference::tables`]): editors that read a schema for
//! TOML (taplo / Even Better TOML in VS Code, JetBrains, Helix through
//! taplo) complete the keys, show their meaning, and flag a misspelled
//! key, a value of the wrong type or out of range, before `spillway check`
//! runs. docs/spillway.schema.json is this output, checked in; a test
//! fails when it is stale, and validates every config the project ships
//! against it.
//!
//! A key's JSON type comes from its declaration: a range is an integer
//! with its bounds, `OneOf` an enumeration of strings, `Shaped` carries its
//! own fragment, and `Text` is a string (a boolean when its default is
//! one). The schema is draft-07, which every such editor reads. It checks
//! what a schema can say; `spillway check` says the rest (rules across
//! keys, whether a file exists, a key set for a sink type that does not use
//! it).

use serde_json::{json, Map, Value};
use sink_sdk::keys::{Allowed, DefaultValue, Key, Table};

use crate::reference::tables;

/// A size with a unit (`"64 MiB"`, `"8GiB"`), or a string with a `${VAR}`.
const SIZE_PATTERN: &str =
    r"^(\s*[0-9][0-9_]*(\.[0-9]+)?\s*([kKmMgGtT][iI]?[bB]?|[bB])?\s*|.*\$\{[^}]+\}.*)$";
/// A duration with units (`"500ms"`, `"1m30s"`), or a string with a `${VAR}`.
const DURATION_PATTERN: &str =
    r"^((\s*[0-9][0-9_]*(\.[0-9]+)?\s*(us|µs|ms|s|m|min|h))+\s*|.*\$\{[^}]+\}.*)$";

/// A sink's name in `[sinks.NAME]` (what `config` checks).
const SINK_NAME_PATTERN: &str = "^[a-z0-9_-]{1,32}$";

/// The schema, as `spillway schema` prints it (pretty, one newline at the
/// end).
pub fn text() -> String {
    text_of(&schema())
}

/// `schema` as `spillway schema` prints it.
pub fn text_of(schema: &Value) -> String {
    let mut out = serde_json::to_string_pretty(schema).expect("a JSON value prints");
    out.push('\n');
    out
}

/// The schema of the whole file.
pub fn schema() -> Value {
    schema_of(&tables())
}

/// A plugin's declared options, by the `path` a config loads it from.
pub struct PluginOptions {
    /// As the config writes it (the schema matches the text).
    pub path: String,
    pub keys: &'static [Key],
}

/// The schema, and for each plugin its options: a sink table whose `type`
/// is `"plugin"` and whose `path` is the plugin's has its `options` checked
/// against the keys it declares (`spillway schema --config`).
pub fn schema_with(plugins: &[PluginOptions]) -> Value {
    let mut schema = schema();
    let all_of = schema["definitions"]["sink"]["allOf"]
        .as_array_mut()
        .expect("the sink's allOf");
    for plugin in plugins {
        let mut props = Map::new();
        for key in plugin.keys {
            props.insert(key.short().into(), key_schema(key));
        }
        let mut options = object(props);
        let required = required(plugin.keys);
        if !required.is_empty() {
            options["required"] = json!(required);
        }
        options["description"] = json!(format!(
            "The options plugin {} declares (`spillway check` prints them).",
            plugin.path
        ));
        all_of.push(json!({
            "if": {
                "properties": {
                    "type": { "const": "plugin" },
                    "path": { "const": plugin.path },
                },
                "required": ["type", "path"],
            },
            "then": { "properties": { "options": options } },
        }));
    }
    schema
}

/// The schema of a file of these key tables.
pub fn schema_of(tables: &[Table]) -> Value {
    let mut root = Map::new();
    for table in tables.iter().filter(|t| !t.name.starts_with("sink")) {
        // `server.tcp` sits inside `server`: walk down, making objects.
        let mut at = &mut root;
        let mut parts = table.name.split('.').peekable();
        while let Some(part) = parts.next() {
            let node = at.entry(part).or_insert_with(|| object(Map::new()));
            let props = node["properties"]
                .as_object_mut()
                .expect("an object's properties");
            if parts.peek().is_none() {
                for key in table.keys {
                    props.insert(key.short().into(), key_schema(key));
                }
                let required = required(table.keys);
                if !required.is_empty() {
                    node["required"] = json!(required);
                }
            }
            at = node["properties"]
                .as_object_mut()
                .expect("an object's properties");
        }
    }
    root.insert("sink".into(), json!({ "$ref": "#/definitions/sink" }));
    root.insert(
        "sinks".into(),
        json!({
            "description": "Several sinks, each `[sinks.NAME]` a sink table like `[sink]` (which is `sinks.default`); a name is 1-32 of a-z 0-9 _ -.",
            "type": "object",
            "propertyNames": { "pattern": SINK_NAME_PATTERN },
            "additionalProperties": { "$ref": "#/definitions/sink" },
        }),
    );
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "spillway.toml",
        "description": "The configuration of the spillway daemon (docs/configuration.md, docs/sinks.md, spillway.toml(5)).",
        "type": "object",
        "additionalProperties": false,
        "properties": root,
        "definitions": { "sink": sink_schema(tables) },
    })
}

/// The keys of `keys` that must be given (when their table is).
fn required(keys: &[Key]) -> Vec<&'static str> {
    keys.iter()
        .filter(|k| k.default == DefaultValue::Required)
        .map(Key::short)
        .collect()
}

/// An object that allows only the keys it lists.
fn object(properties: Map<String, Value>) -> Value {
    json!({ "type": "object", "additionalProperties": false, "properties": properties })
}

/// A sink table: `type` and the delivery keys, and every type's own keys
/// (a type's required keys are required when `type` names it).
fn sink_schema(tables: &[Table]) -> Value {
    let mut props = Map::new();
    let mut by_type = Vec::new();
    for table in tables.iter().filter(|t| t.name.starts_with("sink")) {
        for key in table.keys {
            let schema = key_schema(key);
            if let Some(seen) = props.get(key.short()) {
                // Two types may share a key (`path`); one schema serves both.
                assert_eq!(
                    seen["type"], schema["type"],
                    "{} is declared with another type by another sink type",
                    key.name
                );
                continue;
            }
            props.insert(key.short().into(), schema);
        }
        if let Some(kind) = table.name.strip_prefix("sink.") {
            let required = required(table.keys);
            if !required.is_empty() {
                by_type.push(json!({
                    "if": { "properties": { "type": { "const": kind } } },
                    "then": { "required": required },
                }));
            }
        }
    }
    let mut sink = object(props);
    sink["required"] = json!(["type"]);
    sink["allOf"] = Value::Array(by_type);
    sink
}

/// One key: its type and bounds, its default, its meaning.
fn key_schema(key: &Key) -> Value {
    let mut s = match key.allowed {
        Allowed::Range { min, max, .. } => {
            json!({ "type": "integer", "minimum": min, "maximum": max })
        }
        Allowed::ZeroOrRange { min, max, .. } => json!({
            "type": "integer",
            "anyOf": [{ "const": 0 }, { "minimum": min, "maximum": max }],
        }),
        Allowed::RangeOr { min, max, or, .. } => json!({
            "anyOf": [
                { "type": "integer", "minimum": min, "maximum": max },
                { "type": "string", "enum": or },
            ],
        }),
        Allowed::OneOf(names) => json!({ "type": "string", "enum": names }),
        Allowed::Shaped { schema, .. } => serde_json::from_str(schema)
            .unwrap_or_else(|e| panic!("{}: its schema fragment is not JSON: {e}", key.name)),
        Allowed::Text(_) => match key.default {
            DefaultValue::Bool(_) => json!({ "type": "boolean" }),
            _ => json!({ "type": "string" }),
        },
    };
    // A size or a duration may also be written with its unit, or come
    // from a variable (config/units.rs): a string then, which `minimum`
    // and `maximum` do not constrain and `pattern` does.
    let short = key.name.rsplit('.').next().unwrap_or(key.name);
    let units = match (spillway::config::units::unit_of(short), &key.allowed) {
        (Some(unit), Allowed::Range { .. } | Allowed::ZeroOrRange { .. }) => {
            s["type"] = json!(["integer", "string"]);
            Some(match unit {
                spillway::config::units::Unit::Bytes => {
                    s["pattern"] = json!(SIZE_PATTERN);
                    " Also a size with its unit: \"64 MiB\", \"8GiB\"."
                }
                _ => {
                    s["pattern"] = json!(DURATION_PATTERN);
                    " Also a duration with its units: \"500ms\", \"5s\", \"1m30s\"."
                }
            })
        }
        _ => None,
    };
    let default = match key.default {
        DefaultValue::Int(n) => Some(json!(n)),
        DefaultValue::Bool(b) => Some(json!(b)),
        DefaultValue::Str(t) | DefaultValue::Path(t) => Some(json!(t)),
        DefaultValue::Unset(_) | DefaultValue::Required => None,
    };
    if let Some(default) = default {
        s["default"] = default;
    }
    let mut meaning = key.meaning.to_string();
    let allowed = key.allowed_text();
    if !allowed.is_empty() {
        meaning.push_str(&format!(" Allowed: {allowed}."));
    }
    if let Some(units) = units {
        meaning.push_str(units);
    }
    s["description"] = json!(meaning);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(path: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(path)
    }

    fn validator() -> jsonschema::Validator {
        jsonschema::draft7::new(&schema()).expect("the schema is a valid draft-07 schema")
    }

    /// A TOML text as the JSON value a validator reads.
    fn as_json(text: &str) -> Value {
        let table: toml::Table = toml::from_str(text).expect("TOML");
        serde_json::to_value(table).expect("TOML as JSON")
    }

    /// The errors `text` meets, one line each.
    fn errors(v: &jsonschema::Validator, text: &str) -> Vec<String> {
        v.iter_errors(&as_json(text))
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect()
    }

    /// Sizes and durations with their units, and `${VAR}`, pass the
    /// schema where the daemon takes them; a word that is neither does not.
    #[test]
    fn sizes_durations_and_variables_pass_where_the_daemon_takes_them() {
        let v = validator();
        let good = "[wab]\nwab_bytes_max = \"8 GiB\"\nsegment_bytes_max = \"64MiB\"\n[server]\npayload_bytes_max = \"${MAX:-1 MiB}\"\nconnection_idle_timeout_ms = \"1m30s\"\n[sink]\ntype = \"http\"\nurl = \"http://${HOST}/i\"\nlinger_ms = \"250ms\"\n";
        assert_eq!(errors(&v, good), Vec::<String>::new());
        crate::config::Config::parse(
            &good
                .replace("${HOST}", "h")
                .replace("${MAX:-1 MiB}", "1 MiB"),
            "t",
        )
        .expect("the daemon takes it too");
        let bad = errors(
            &v,
            "[sink]\ntype = \"http\"\nurl = \"http://h/i\"\nlinger_ms = \"soon\"\n",
        );
        assert!(bad.iter().any(|e| e.contains("linger_ms")), "{bad:?}");
    }

    spillway_sinks::sink_keys! {
        /// A sink type's keys declared only here, for the test below.
        pub struct DemoConfig in "sink.demo" {
            window_ms: u64 = Key {
                default: DefaultValue::Int(250),
                allowed: Allowed::Range {
                    min: 10,
                    max: 1_000,
                    unit: sink_sdk::keys::Unit::Ms,
                },
                also: "",
                meaning: r#"How long the demo sink gathers records before it sends them."#,
            },
            token: String = Key {
                default: DefaultValue::Unset(""),
                allowed: Allowed::Text(r#"a string"#),
                also: "",
                meaning: r#"The demo's secret."#,
                secret: true,
            },
        }
    }

    /// One declaration (`window_ms` above, its type and its `Key`) is the
    /// struct's field, its parse, its range check with a message naming
    /// it, its row in the docs table, its entry in the man page and in the
    /// JSON Schema, and its line in `Debug` (a secret's value hidden).
    #[test]
    fn a_key_declared_once_is_read_checked_documented_and_in_the_schema() {
        let mut demo = DemoConfig::default();
        demo.read_key("window_ms", toml::Value::Integer(5)).unwrap();
        demo.read_key("token", toml::Value::String("s3cret".into()))
            .unwrap();
        assert_eq!(demo.window_ms, Some(5));
        let wrong = DemoConfig::default().read_key("window_ms", toml::Value::String("x".into()));
        assert!(wrong.is_err(), "a string is not a u64");
        assert_eq!(
            demo.check_ranges(),
            Err(spillway_sinks::KeyProblem::OutOfRange {
                key: "window_ms",
                value: 5,
                allowed: "10..=1000 ms".into(),
            })
        );
        demo.window_ms = Some(1_000);
        assert!(demo.check_ranges().is_ok());
        let debug = format!("{demo:?}");
        assert!(
            debug.contains("window_ms: Some(1000)") && !debug.contains("s3cret"),
            "{debug}"
        );

        let table = Table {
            name: "sink.demo",
            keys: DemoConfig::REFERENCE,
        };
        let docs = crate::reference::markdown(&table);
        assert!(
            docs.contains("| `window_ms` | `250` | 10..=1000 | How long the demo sink gathers records before it sends them. |"),
            "{docs}"
        );
        let mut all = tables();
        all.push(table);
        let man = String::from_utf8(crate::reference::man_page_of(&all).unwrap()).unwrap();
        assert!(
            man.contains("window_ms") && man.contains("How long the demo sink gathers records"),
            "{man}"
        );
        let schema = schema_of(&all);
        let key = &schema["definitions"]["sink"]["properties"]["window_ms"];
        assert_eq!(
            (key["minimum"].as_u64(), key["maximum"].as_u64()),
            (Some(10), Some(1_000)),
            "{key}"
        );
        assert_eq!(key["default"].as_u64(), Some(250), "{key}");
    }

    sink_sdk::key_table! {
        /// A plugin's options, declared as a plugin declares them.
        struct PluginDemo in "options" {
            path: String = Key {
                default: DefaultValue::Required,
                allowed: Allowed::Text("a path"),
                also: "",
                meaning: "Where.",
            },
            rotate_bytes: u64 = Key {
                default: DefaultValue::Int(1 << 20),
                allowed: Allowed::Range { min: 1 << 20, max: 1 << 30, unit: sink_sdk::keys::Unit::Bytes },
                also: "",
                meaning: "When.",
            },
        }
    }

    /// With a plugin's declared options (`spillway schema --config`), a
    /// sink loading that plugin has its options checked like any key; a
    /// sink loading another plugin is not.
    #[test]
    fn a_plugins_declared_options_are_in_the_schema_for_its_path() {
        let schema = schema_with(&[PluginOptions {
            path: "lib/libdemo.so".into(),
            keys: PluginDemo::KEYS,
        }]);
        let v = jsonschema::draft7::new(&schema).expect("a valid draft-07 schema");
        let sink = |path: &str, options: &str| {
            format!(
                "[sinks.a]\ntype = \"plugin\"\npath = \"{path}\"\n[sinks.a.options]\n{options}\n"
            )
        };
        assert!(errors(&v, &sink("lib/libdemo.so", "path = \"/x\"")).is_empty());
        let found = errors(
            &v,
            &sink("lib/libdemo.so", "path = \"/x\"\nrotate_bytes = 5"),
        );
        assert!(
            found.len() == 1
                && found[0]
                    .starts_with("/sinks/a/options/rotate_bytes: 5 is less than the minimum"),
            "{found:?}"
        );
        let found = errors(
            &v,
            &sink("lib/libdemo.so", "path = \"/x\"\nrotate_byte = 1048576"),
        );
        assert!(
            found.len() == 1 && found[0].contains("rotate_byte"),
            "{found:?}"
        );
        let found = errors(&v, &sink("lib/libdemo.so", "rotate_bytes = 1048576"));
        assert!(
            found.len() == 1 && found[0].contains("\"path\" is a required property"),
            "{found:?}"
        );
        assert!(errors(&v, &sink("lib/other.so", "anything = 5")).is_empty());
        assert_eq!(
            schema_with(&[]),
            super::schema(),
            "no plugin, the schema as published"
        );
    }

    /// docs/spillway.schema.json is what `spillway schema` prints; with
    /// `SPILLWAY_BLESS=1` it is rewritten instead.
    #[test]
    fn the_checked_in_schema_is_what_the_key_tables_make() {
        let path = repo("docs/spillway.schema.json");
        let want = text();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
            if std::env::var_os("SPILLWAY_BLESS").is_some() {
                std::fs::write(&path, want).unwrap();
            } else {
                panic!(
                    "docs/spillway.schema.json differs from what the key tables make; run \
                     SPILLWAY_BLESS=1 cargo test -p spillway --bin spillway schema and review the diff"
                );
            }
        }
    }

    /// Every config under configs/ and deploy/ (and the embedded default)
    /// is valid against the schema, as it is for the daemon.
    #[test]
    fn every_shipped_config_is_valid() {
        let v = validator();
        let mut seen = 0;
        for dir in ["configs", "deploy"] {
            for entry in std::fs::read_dir(repo(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "toml") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    crate::config::Config::parse(&text, "shipped").expect("the daemon reads it");
                    let found = errors(&v, &text);
                    assert!(found.is_empty(), "{}: {found:?}", path.display());
                    seen += 1;
                }
            }
        }
        assert!(seen >= 4, "found only {seen} configs");
        assert!(errors(&v, crate::config::DEFAULT_CONFIG).is_empty());
    }

    /// What a schema can refuse, it refuses, naming the place: a
    /// misspelled key (in a table, in a sink), a value out of range or of
    /// the wrong type, a value not among the allowed strings, a sink with
    /// no type or without its type's required key.
    #[test]
    fn mistakes_are_refused_where_they_are() {
        let v = validator();
        let cases = [
            ("[wab]\nwab_byte_max = 1\n", "wab_byte_max"),
            ("[server]\nshards = 999\n", "/server/shards"),
            ("[server]\nshards = \"4\"\n", "/server/shards"),
            ("[log]\nformat = \"xml\"\n", "/log/format"),
            ("[sink]\ntype = \"noop\"\nmax_record = 5\n", "max_record"),
            ("[sink]\ntype = \"kinesis\"\n", "/sink/type"),
            ("[sink]\ntype = \"kafka\"\ntopic = \"t\"\n", "brokers"),
            (
                "[sink]\ntype = \"kafka\"\nbrokers = [\"a:1\"]\ntopic = \"t\"\ncompression = \"snappy\"\n",
                "/sink/compression",
            ),
            ("[sink]\nbatch_records_max = 5\n", "type"),
            ("[sinks.a]\ntype = \"http\"\n", "url"),
            ("[sinks.Bad]\ntype = \"noop\"\n", "/sinks"),
            (
                "[sink]\ntype = \"noop\"\nbatches_in_flight = \"many\"\n",
                "/sink/batches_in_flight",
            ),
            (
                "[sink]\ntype = \"noop\"\nlag_bytes_max = 5\n",
                "/sink/lag_bytes_max",
            ),
            (
                "[server.tcp]\nlisten = \"127.0.0.1:1\"\ncerts = \"x\"\n",
                "certs",
            ),
            ("[server]\nallowed_uids = []\n", "/server/allowed_uids"),
        ];
        for (text, at) in cases {
            let found = errors(&v, text);
            assert!(
                found.iter().any(|e| e.contains(at)),
                "{text:?}: want an error at {at:?}, got {found:?}"
            );
        }
        for good in [
            "[sink]\ntype = \"noop\"\nbatches_in_flight = \"adaptive\"\n",
            "[sink]\ntype = \"noop\"\nbatches_in_flight = 4\nlag_bytes_max = 0\n",
            "[sinks.a_1]\ntype = \"http\"\nurl = \"http://h/\"\n[sinks.a_1.headers]\nx = \"y\"\n",
            "[sinks.p]\ntype = \"plugin\"\npath = \"/x.so\"\n[sinks.p.options]\nany = [1, 2]\n",
            "[server]\nsocket_group = 10001\n",
        ] {
            let found = errors(&v, good);
            assert!(found.is_empty(), "{good:?}: {found:?}");
        }
    }
}
