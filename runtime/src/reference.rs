//! The configuration reference, rendered from the key tables that also
//! give the defaults and check the ranges (`config::TABLES` for the
//! daemon's own tables, `spillway_sinks::reference_tables()` for the
//! sinks): the tables in docs/configuration.md and docs/sinks.md, and the
//! man page `spillway.toml(5)`. A test fails when the checked-in files are
//! not what this renders; `SPILLWAY_BLESS=1` rewrites them.

use std::io;

use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use sink_sdk::keys::{DefaultValue, Key, Table};

/// Every table of the reference, in the order the man page lists them:
/// the daemon's own, then the sinks'.
pub fn tables() -> Vec<Table> {
    let mut all = crate::config::TABLES.to_vec();
    all.extend(spillway_sinks::reference_tables());
    all
}

/// A table's keys as a markdown table (the docs; written by the test below).
#[cfg(test)]
pub fn markdown(table: &Table) -> String {
    let mut out = String::from("| key | default | allowed | meaning |\n|---|---|---|---|\n");
    for key in table.keys {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            key.short(),
            key.default_text(),
            key.allowed_text(),
            key.meaning
        ));
    }
    out
}

/// The man page `spillway.toml(5)`.
pub fn man_page() -> io::Result<Vec<u8>> {
    man_page_of(&tables())
}

/// The man page of these key tables.
pub fn man_page_of(tables: &[Table]) -> io::Result<Vec<u8>> {
    let mut roff = Roff::new();
    roff.control(
        "TH",
        [
            "SPILLWAY.TOML",
            "5",
            "",
            &format!("spillway {}", env!("CARGO_PKG_VERSION")),
            "File Formats",
        ],
    );
    roff.control("SH", ["NAME"]);
    roff.text([roman(
        "spillway.toml - the configuration of the spillway daemon",
    )]);
    roff.control("SH", ["SYNOPSIS"]);
    roff.text([bold("/etc/spillway/spillway.toml")]);
    roff.control("SH", ["DESCRIPTION"]);
    for paragraph in DESCRIPTION {
        roff.control("PP", []);
        roff.text(inline(paragraph));
    }
    for table in tables {
        roff.control("SH", [heading(table.name).as_str()]);
        if let Some(intro) = intro(table.name) {
            roff.text(inline(intro));
        }
        for key in table.keys {
            entry(&mut roff, key);
        }
    }
    roff.control("SH", ["FILES"]);
    roff.control("TP", []);
    roff.text([bold("/etc/spillway/spillway.toml")]);
    roff.text([roman(
        "The package's configuration (a conffile: upgrades keep your edits).",
    )]);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(
        "spillway(1), spillway-check(1), spillway-run(1), spillway-ctl-reload(1); \
         /usr/share/doc/spillway/configuration.md and sinks.md, which say the same \
         with examples.",
    )]);
    let mut out = Vec::new();
    roff.to_writer(&mut out)?;
    Ok(out)
}

const DESCRIPTION: &[&str] = &[
    "One TOML file, given with `spillway run --config FILE`. Every key is optional \
     and has a default, unless it says it is required. A value out of range, of the \
     wrong type, or a key the daemon does not know is an error that names the key and \
     what it allows. `spillway check FILE` says whether the daemon would start on a \
     file, and warns where it would start with a warning.",
    "Relative paths are relative to the daemon's working folder. Sizes are in bytes, \
     times in milliseconds (`_ms`) or microseconds (`_us`).",
    "The sink tables (`[sink]`, or one `[sinks.NAME]` per sink) are reloaded without a \
     restart (`spillway ctl reload`, or SIGHUP); a change to any other table needs a \
     restart, and a reload says so.",
];

/// A table's heading: `[server]`, or `[sink] type = "http"` for a sink
/// type's own keys.
fn heading(table: &str) -> String {
    match table.strip_prefix("sink.") {
        Some(sink_type) => format!("[sink] type = {sink_type}"),
        None => format!("[{table}]"),
    }
}

/// What the man page says under a table's heading, before its keys.
fn intro(table: &str) -> Option<&'static str> {
    Some(match table {
        "server.tcp" => "The wire protocol over TCP, off unless this table is set.",
        "server.http" => "The HTTP ingest door (`POST /v1/records`), off unless this table is set.",
        "sink" => {
            "Every sink table: `[sink]` (the sink named `default`) or `[sinks.NAME]` \
             (NAME: 1-32 of `a-z 0-9 _ -`), with `type` and these delivery keys, then \
             the keys of its type below."
        }
        t if t.starts_with("sink.") => "This type's own keys, beside type and the delivery keys.",
        _ => return None,
    })
}

/// One key: its name, default and allowed values, then what it does.
fn entry(roff: &mut Roff, key: &Key) {
    roff.control("TP", []);
    roff.text([bold(key.short())]);
    let mut line = match key.default {
        DefaultValue::Required => vec![italic("Required. Allowed: ")],
        _ => {
            let mut line = vec![italic("Default: ")];
            line.extend(inline(&key.default_text()));
            line.push(italic(". Allowed: "));
            line
        }
    };
    line.extend(inline(&key.allowed_text()));
    line.push(roman("."));
    roff.text(line);
    roff.control("br", []);
    roff.text(inline(key.meaning));
}

/// Markdown's inline marks as roff: `code` and **strong** in bold, a link
/// as its text.
fn inline(markdown: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut plain = String::new();
    let mut rest = markdown;
    while let Some(c) = rest.chars().next() {
        let bolded = if let Some(after) = rest.strip_prefix("**") {
            after.find("**").map(|end| (&after[..end], 4 + end))
        } else if let Some(after) = rest.strip_prefix('`') {
            after.find('`').map(|end| (&after[..end], 2 + end))
        } else {
            None
        };
        if let Some((text, len)) = bolded {
            out.push(roman(std::mem::take(&mut plain)));
            out.push(bold(text));
            rest = &rest[len..];
            continue;
        }
        if c == '[' {
            if let Some((text, len)) = link(rest) {
                plain.push_str(text);
                rest = &rest[len..];
                continue;
            }
        }
        plain.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out.push(roman(plain));
    out.retain(|i| !matches!(i, Inline::Roman(s) if s.is_empty()));
    out
}

/// `[text](target)` at the start of `s`: the text and the length.
fn link(s: &str) -> Option<(&str, usize)> {
    let close = s.find("](")?;
    let end = s[close..].find(')')? + close;
    let text = &s[1..close];
    (!text.contains(['[', ']'])).then_some((text, end + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn repo(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
    }

    /// The checked-in text between `<!-- keys: NAME -->` and
    /// `<!-- end keys -->` for every table `doc` holds, replaced by what the
    /// tables render.
    fn rendered(doc: &str) -> (String, usize) {
        let mut out = String::new();
        let mut rest = doc;
        let mut count = 0;
        while let Some(start) = rest.find("<!-- keys: ") {
            let name_end = start + rest[start..].find(" -->").expect("unclosed marker");
            let name = &rest[start + "<!-- keys: ".len()..name_end];
            let body_start = name_end + " -->\n".len();
            let end = body_start
                + rest[body_start..]
                    .find("<!-- end keys -->")
                    .unwrap_or_else(|| panic!("no <!-- end keys --> after {name}"));
            let table = tables()
                .into_iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("the docs name a table {name:?} the key tables lack"));
            out.push_str(&rest[..body_start]);
            out.push_str(&markdown(&table));
            rest = &rest[end..];
            count += 1;
        }
        out.push_str(rest);
        (out, count)
    }

    /// docs/configuration.md and docs/sinks.md show every table as the key
    /// tables render it, and docs/spillway.toml.5 is the man page. With
    /// `SPILLWAY_BLESS=1` the files are rewritten instead.
    #[test]
    fn the_checked_in_reference_is_what_the_key_tables_render() {
        let bless = std::env::var_os("SPILLWAY_BLESS").is_some();
        let mut shown = 0;
        let mut stale = Vec::new();
        for doc in ["docs/configuration.md", "docs/sinks.md"] {
            let text = std::fs::read_to_string(repo(doc)).unwrap();
            let (want, count) = rendered(&text);
            shown += count;
            if want != text {
                if bless {
                    std::fs::write(repo(doc), want).unwrap();
                } else {
                    stale.push(doc);
                }
            }
        }
        assert_eq!(
            shown,
            tables().len(),
            "every key table is shown once in the docs"
        );
        let page = man_page().unwrap();
        let man = repo("docs/spillway.toml.5");
        if std::fs::read(&man).ok().as_ref() != Some(&page) {
            if bless {
                std::fs::write(&man, &page).unwrap();
            } else {
                stale.push("docs/spillway.toml.5");
            }
        }
        assert!(
            stale.is_empty(),
            "{stale:?} differ from what the key tables render; edit the tables \
             (runtime/src/config/keys.rs, the sinks' reference), then run \
             SPILLWAY_BLESS=1 cargo test -p spillway --bin spillway reference, and \
             review the diff"
        );
    }

    /// Every key a config struct reads is in the key table: serde's
    /// unknown-field error lists the fields of each table.
    #[test]
    fn every_key_the_daemon_reads_is_in_the_key_table() {
        for (table, prefix) in [
            ("server", ""),
            ("wab", ""),
            ("admin", ""),
            ("log", ""),
            ("server.tcp", "listen = \"127.0.0.1:1\"\n"),
            ("server.http", "listen = \"127.0.0.1:1\"\n"),
        ] {
            let text = format!("[{table}]\n{prefix}not_a_key = 1\n");
            let err = crate::config::Config::parse(&text, "t")
                .unwrap_err()
                .to_string();
            let fields = err
                .split_once("`not_a_key`, expected ")
                .unwrap_or_else(|| panic!("{err}"))
                .1;
            let keys = &tables().into_iter().find(|t| t.name == table).unwrap().keys;
            let mut read = 0;
            for field in fields.split('`').skip(1).step_by(2) {
                if ["http", "tcp"].contains(&field) && table == "server" {
                    continue;
                }
                read += 1;
                assert!(
                    keys.iter().any(|k| k.short() == field),
                    "[{table}] reads {field}, which its key table does not describe"
                );
            }
            assert_eq!(read, keys.len(), "[{table}]: {fields}");
        }
    }

    #[test]
    fn markdown_marks_become_roff() {
        let roff = |md: &str| {
            let mut r = Roff::new();
            r.text(inline(md));
            r.to_roff()
        };
        assert_eq!(
            roff("see [sinks.md](sinks.md#x), **not** `a.b` here"),
            "see sinks.md, \\fBnot\\fR \\fBa.b\\fR here\n"
        );
        assert_eq!(roff("a [lone bracket"), "a [lone bracket\n");
    }
}
