//! A TOML or serde error of a config, said as an operator needs it: the
//! dotted key at fault (`sink.compression`), the problem, "did you mean"
//! when a misspelt key or value is close to a known one, and the line with
//! a caret under the spot.
//!
//! serde reports an unknown key or value of a table read through a tagged
//! enum (a sink) at the table's header, not at the key; the key is then
//! found by the value the message quotes.

use spillway_sinks::suggest::closest;

/// `e`, raised reading `text`, as one message naming the key.
pub fn explain(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim_end();
    let Some(span) = e.span() else {
        return message.to_string();
    };
    let mut at = span.start.min(text.len());
    let mut end = span.end.min(text.len()).max(at);
    let mut line_no = text[..at].matches('\n').count();
    let table = table_at(text, line_no);
    let mut key = key_on(line_of(text, line_no)).map(|k| join(&table, &k));
    if key.is_none() {
        // Placed at the table's header: point at the key the message names.
        if let Some((k, found)) = quoted_value_key(text, line_no, message) {
            key = Some(join(&table, &k));
            line_no = found;
            at = text
                .lines()
                .take(found)
                .map(|l| l.len() + 1)
                .sum::<usize>()
                .min(text.len());
            end = at + line_of(text, found).len();
        }
    }
    let key = key.or_else(|| (!table.is_empty()).then(|| table.clone()));
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = line_of(text, line_no);
    let column = text[line_start..at].chars().count();
    let hint = suggestion(message)
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    let key = key.map(|k| format!("{k}: ")).unwrap_or_default();
    let width = (line_no + 1).to_string().len();
    let caret_len = text[at..end]
        .lines()
        .next()
        .map_or(1, |s| s.chars().count().max(1));
    format!(
        "{key}{message}{hint} (line {}, column {})\n{:width$} |\n{} | {line}\n{:width$} | {}{}",
        line_no + 1,
        column + 1,
        "",
        line_no + 1,
        "",
        " ".repeat(column),
        "^".repeat(caret_len),
    )
}

/// Line `n` (0-based) of `text`, empty past its end.
fn line_of(text: &str, n: usize) -> &str {
    text.lines().nth(n).unwrap_or("")
}

/// `table.key`, or `key` at the top level.
fn join(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_string()
    } else {
        format!("{table}.{key}")
    }
}

/// The table whose body holds line `line_no` (0-based): the last
/// `[header]` or `[[header]]` at or above it, quotes dropped.
fn table_at(text: &str, line_no: usize) -> String {
    text.lines()
        .take(line_no + 1)
        .filter_map(|l| {
            let l = l.trim();
            let inner = l
                .strip_prefix("[[")
                .and_then(|r| r.split_once("]]"))
                .or_else(|| l.strip_prefix('[').and_then(|r| r.split_once(']')))?;
            Some(inner.0.trim().replace(['"', '\''], ""))
        })
        .last()
        .unwrap_or_default()
}

/// The key a `key = value` line sets (dotted keys kept), if it is one.
fn key_on(line: &str) -> Option<String> {
    let l = line.trim_start();
    if l.starts_with('[') || l.starts_with('#') {
        return None;
    }
    let (key, _) = l.split_once('=')?;
    let key = key.trim().replace(['"', '\''], "");
    (!key.is_empty()).then_some(key)
}

/// For an error placed at a table's header (serde through a tagged enum):
/// the key in that table, after `header_line`, that sets the value or
/// names the field the message quotes first (`unknown variant `oldst``),
/// and its line.
fn quoted_value_key(text: &str, header_line: usize, message: &str) -> Option<(String, usize)> {
    let quoted = message.split('`').nth(1)?;
    for (n, line) in text.lines().enumerate().skip(header_line + 1) {
        let l = line.trim();
        if l.starts_with('[') {
            break;
        }
        let Some(key) = key_on(l) else { continue };
        let value = l.split_once('=').map_or("", |(_, v)| v.trim());
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        if key == quoted || value == quoted {
            return Some((key, n));
        }
    }
    None
}

/// For `unknown field|variant `x`, expected `a`, `b` or `c``: the known
/// word close to `x`.
fn suggestion(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("unknown variant `"))?;
    let (given, expected) = rest.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    closest(given, &known).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explained(text: &str) -> String {
        let e = toml::from_str::<crate::config::Config>(text).unwrap_err();
        explain(&e, text)
    }

    #[test]
    fn a_type_error_names_its_key_and_line() {
        let text = "[server]\nshards = \"four\"\n";
        let m = explained(text);
        assert!(
            m.starts_with("server.shards: invalid type: string \"four\""),
            "{m}"
        );
        assert!(m.contains("(line 2, column 10)"), "{m}");
        assert!(m.contains("2 | shards = \"four\""), "{m}");
        assert!(m.ends_with("|          ^^^^^^"), "{m}");
    }

    #[test]
    fn a_misspelt_key_or_value_gets_its_near_miss() {
        let m = explained("[log]\nformt = \"json\"\n");
        assert!(m.starts_with("log.formt: unknown field `formt`"), "{m}");
        assert!(m.contains("(did you mean `format`?)"), "{m}");
        let m = explained("[sink]\ntype = \"htp\"\n");
        assert!(m.starts_with("sink.type: unknown variant `htp`"), "{m}");
        assert!(m.contains("(did you mean `http`?)"), "{m}");
        let m = explained("[wab]\nwab_bytes_mx = 5\n");
        assert!(m.contains("(did you mean `wab_bytes_max`?)"), "{m}");
        // Nothing close: no guess.
        let m = explained("[log]\ncolour = true\n");
        assert!(!m.contains("did you mean"), "{m}");
    }

    #[test]
    fn a_value_refused_at_the_sink_header_is_traced_to_its_key() {
        let m = explained(
            "[server]\nshards = 2\n[sink]\ntype = \"http\"\nurl = \"http://127.0.0.1:1/x\"\nstart = \"oldst\"\n",
        );
        assert!(m.starts_with("sink.start: unknown variant `oldst`"), "{m}");
        assert!(
            m.contains("(did you mean `oldest`?) (line 6, column 1)"),
            "{m}"
        );
        assert!(m.contains("6 | start = \"oldst\""), "{m}");
        let m = explained(
            "[sinks.search]\ntype = \"http\"\nurl = \"http://127.0.0.1:1/x\"\ncompression = \"gzp\"\n",
        );
        assert!(m.starts_with("sinks.search.compression: unknown"), "{m}");
    }
}
