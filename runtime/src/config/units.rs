//! What a config may write besides plain TOML, rewritten before it is
//! read: `${VAR}` and `${VAR:-default}` in any string (`$$` is one `$`),
//! sizes with units in every key whose name holds `bytes` (`"64 MiB"`,
//! `"8GiB"`, `"512 KB"`) and durations in every key ending in `_ms` or
//! `_us` (`"500ms"`, `"5s"`, `"1m30s"`). Plain integers are still what
//! they were. Values are replaced where they stand, so the lines of the
//! rewritten text are the file's lines and later errors point at them.

use toml_edit::{DocumentMut, Item, Table, Value};

/// `text` with every `${...}` expanded and every size and duration with a
/// unit turned into the integer its key takes; `env` looks variables up.
/// The error names the dotted key and says why.
pub fn rewrite(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    // Nothing to do: leave the text as it is (and never reformat it).
    if !text.contains('$') && !text.contains('"') && !text.contains('\'') {
        return Ok(text.to_string());
    }
    let mut doc: DocumentMut = match text.parse() {
        Ok(doc) => doc,
        // A syntax error: the TOML reader that follows says it, with its
        // line and column.
        Err(_) => return Ok(text.to_string()),
    };
    let mut changed = false;
    rewrite_table(doc.as_table_mut(), "", env, &mut changed)?;
    Ok(if changed {
        doc.to_string()
    } else {
        text.to_string()
    })
}

fn rewrite_table(
    table: &mut Table,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    changed: &mut bool,
) -> Result<(), String> {
    for (key, item) in table.iter_mut() {
        let name = key.get().to_string();
        let dotted = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        match item {
            Item::Table(t) => rewrite_table(t, &dotted, env, changed)?,
            Item::ArrayOfTables(a) => {
                for t in a.iter_mut() {
                    rewrite_table(t, &dotted, env, changed)?;
                }
            }
            Item::Value(v) => rewrite_value(v, &name, &dotted, env, changed)?,
            Item::None => {}
        }
    }
    Ok(())
}

fn rewrite_value(
    value: &mut Value,
    name: &str,
    dotted: &str,
    env: &dyn Fn(&str) -> Option<String>,
    changed: &mut bool,
) -> Result<(), String> {
    match value {
        Value::String(s) => {
            let given = s.value().clone();
            let expanded = interpolate(&given, env).map_err(|e| format!("{dotted}: {e}"))?;
            let new = match unit_of(name) {
                Some(unit) => match unit.parse(&expanded) {
                    Ok(n) => {
                        let n = i64::try_from(n)
                            .map_err(|_| format!("{dotted} = {given:?}: too large"))?;
                        Some(Value::from(n))
                    }
                    Err(e) => {
                        return Err(format!(
                            "{dotted} = {given:?}: {e}; write an integer ({}) or {}",
                            unit.plain(),
                            unit.examples()
                        ))
                    }
                },
                None if expanded != given => Some(Value::from(expanded)),
                None => None,
            };
            if let Some(mut new) = new {
                *new.decor_mut() = s.decor().clone();
                *value = new;
                *changed = true;
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter_mut().enumerate() {
                rewrite_value(v, "", &format!("{dotted}[{i}]"), env, changed)?;
            }
        }
        Value::InlineTable(t) => {
            for (key, v) in t.iter_mut() {
                let name = key.get().to_string();
                rewrite_value(v, &name, &format!("{dotted}.{name}"), env, changed)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// What a key takes, by its name: bytes, milliseconds or microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Millis,
    Micros,
}

/// The unit a key named `name` takes a string with units for, if any.
pub fn unit_of(name: &str) -> Option<Unit> {
    if name.ends_with("_ms") {
        Some(Unit::Millis)
    } else if name.ends_with("_us") {
        Some(Unit::Micros)
    } else if name.contains("bytes") {
        Some(Unit::Bytes)
    } else {
        None
    }
}

impl Unit {
    fn plain(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Millis => "milliseconds",
            Unit::Micros => "microseconds",
        }
    }

    fn examples(self) -> &'static str {
        match self {
            Unit::Bytes => "a size such as \"64 MiB\", \"8GiB\", \"512 KB\" (B, KB, MB, GB, TB: powers of 1000; KiB, MiB, GiB, TiB: of 1024)",
            Unit::Millis | Unit::Micros => "a duration such as \"500ms\", \"5s\", \"1m30s\" (us, ms, s, m, h)",
        }
    }

    /// `text` in this unit; an error says what is wrong with it.
    pub fn parse(self, text: &str) -> Result<u64, String> {
        match self {
            Unit::Bytes => size(text),
            Unit::Millis => duration_ns(text).and_then(|ns| whole(ns, 1_000_000, "millisecond")),
            Unit::Micros => duration_ns(text).and_then(|ns| whole(ns, 1_000, "microsecond")),
        }
    }
}

/// `ns` as a whole number of `per` nanoseconds.
fn whole(ns: u128, per: u128, what: &str) -> Result<u64, String> {
    if !ns.is_multiple_of(per) {
        return Err(format!("not a whole number of {what}s"));
    }
    u64::try_from(ns / per).map_err(|_| "too large".to_string())
}

/// A number and the rest of `text` after it (`"1.5GiB"` → 1.5, `"GiB"`).
fn number(text: &str) -> Result<(f64, &str), String> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(text.len());
    let (digits, rest) = text.split_at(end);
    let digits = digits.replace('_', "");
    if digits.is_empty() {
        return Err(format!("{text:?} does not start with a number"));
    }
    let n: f64 = digits
        .parse()
        .map_err(|_| format!("{digits:?} is not a number"))?;
    Ok((n, rest.trim_start()))
}

fn size(text: &str) -> Result<u64, String> {
    let (n, unit) = number(text.trim())?;
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" | "ki" => 1 << 10,
        "mib" | "mi" => 1 << 20,
        "gib" | "gi" => 1 << 30,
        "tib" | "ti" => 1 << 40,
        other => return Err(format!("{other:?} is not a size unit")),
    };
    let bytes = n * factor as f64;
    if bytes.fract() != 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// `"1m30s"`, `"500ms"`, `"1.5s"` in nanoseconds.
fn duration_ns(text: &str) -> Result<u128, String> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("empty".into());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let (n, after) = number(rest)?;
        let unit_end = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let per: f64 = match unit {
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" | "min" => 60e9,
            "h" => 3600e9,
            "" => {
                return Err(format!(
                    "{text:?}: a number without a unit (us, ms, s, m, h)"
                ))
            }
            other => {
                return Err(format!(
                    "{other:?} is not a duration unit (us, ms, s, m, h)"
                ))
            }
        };
        total += n * per;
        rest = next.trim_start();
    }
    let rounded = total.round();
    if (total - rounded).abs() > 1e-3 || rounded > u64::MAX as f64 {
        return Err(format!("{text:?} is not a whole number of nanoseconds"));
    }
    Ok(rounded as u128)
}

/// `${VAR}` and `${VAR:-default}` expanded through `env`; `$$` is `$`; a
/// `$` before anything else is kept. A variable that is unset, without a
/// default, is an error naming it.
pub fn interpolate(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if !text.contains('$') {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(inner) = after.strip_prefix('{') {
            let close = inner
                .find('}')
                .ok_or_else(|| format!("`${{` without its `}}` in {text:?}"))?;
            let body = &inner[..close];
            let (name, default) = match body.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (body, None),
            };
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || name.starts_with(|c: char| c.is_ascii_digit())
            {
                return Err(format!(
                    "${{{body}}}: {name:?} is not a variable name (letters, digits, `_`)"
                ));
            }
            match (env(name).filter(|v| !v.is_empty()), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "environment variable {name} is not set (write ${{{name}:-DEFAULT}} for a default)"
                    ))
                }
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("10.0.0.7".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(size("64 MiB"), Ok(64 << 20));
        assert_eq!(size("8GiB"), Ok(8 << 30));
        assert_eq!(size("512 KB"), Ok(512_000));
        assert_eq!(size("1.5 KiB"), Ok(1536));
        assert_eq!(size("4096"), Ok(4096));
        assert!(size("1.3 B").unwrap_err().contains("whole number"));
        assert!(size("8 GB/s").unwrap_err().contains("not a size unit"));
        assert_eq!(Unit::Millis.parse("500ms"), Ok(500));
        assert_eq!(Unit::Millis.parse("5s"), Ok(5000));
        assert_eq!(Unit::Millis.parse("1m30s"), Ok(90_000));
        assert_eq!(Unit::Millis.parse("1.5s"), Ok(1500));
        assert_eq!(Unit::Micros.parse("250us"), Ok(250));
        assert_eq!(Unit::Millis.parse("1h"), Ok(3_600_000));
        assert!(Unit::Millis
            .parse("1us")
            .unwrap_err()
            .contains("whole number of milliseconds"));
        assert!(Unit::Millis
            .parse("5")
            .unwrap_err()
            .contains("without a unit"));
        assert!(Unit::Millis
            .parse("5 sec")
            .unwrap_err()
            .contains("\"sec\" is not a duration unit"));
    }

    #[test]
    fn variables_expand_with_defaults_and_an_unset_one_is_named() {
        let e = |t: &str| interpolate(t, &env);
        assert_eq!(
            e("http://${HOST}:8080/x"),
            Ok("http://10.0.0.7:8080/x".into())
        );
        assert_eq!(e("${PORT:-9898}"), Ok("9898".into()));
        assert_eq!(
            e("${EMPTY:-d}"),
            Ok("d".into()),
            "an empty value takes the default"
        );
        assert_eq!(e("cost $$5 and $x"), Ok("cost $5 and $x".into()));
        let err = e("${TOKEN}").unwrap_err();
        assert!(
            err.contains("environment variable TOKEN is not set"),
            "{err}"
        );
        assert!(e("${A B}").unwrap_err().contains("not a variable name"));
        assert!(e("${HOST").unwrap_err().contains("without its"));
    }

    #[test]
    fn a_config_is_rewritten_in_place_keeping_its_lines() {
        let text = "# top\n[wab]\nwab_bytes_max = \"8 GiB\" # roomy\n[sink]\ntype = \"http\"\nurl = \"http://${HOST}/i\"\nlinger_ms = \"250ms\"\nheaders = { x-node = \"${NODE:-a}\" }\n";
        let out = rewrite(text, &env).unwrap();
        assert_eq!(out.lines().count(), text.lines().count(), "{out}");
        assert!(out.contains("wab_bytes_max = 8589934592 # roomy"), "{out}");
        assert!(out.contains("url = \"http://10.0.0.7/i\""), "{out}");
        assert!(out.contains("linger_ms = 250"), "{out}");
        assert!(out.contains("x-node = \"a\""), "{out}");
        let err = rewrite("[sink]\nlinger_ms = \"5 sec\"\n", &env).unwrap_err();
        assert!(
            err.starts_with("sink.linger_ms = \"5 sec\": \"sec\" is not a duration unit"),
            "{err}"
        );
        let err = rewrite("[sinks.a]\ntoken = \"${TOKEN}\"\n", &env).unwrap_err();
        assert!(
            err.starts_with("sinks.a.token: environment variable TOKEN is not set"),
            "{err}"
        );
        // Plain integers and a text without strings are left alone.
        let plain = "[wab]\nwab_bytes_max = 1048576\n";
        assert_eq!(rewrite(plain, &env).unwrap(), plain);
    }
}
