//! `spillway plugin new NAME`: a plugin crate that builds and passes its
//! own tests, written from files embedded in this binary: a sink that
//! appends each record, with its identity `(instance, shard, seq)`, to a
//! file (replace `deliver` with your destination), its options, unit tests
//! and a test through the C ABI, a README, and the sink-sdk of this very
//! daemon (same version, same ABI) beside it, so the crate builds without
//! a spillway checkout.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The sink-sdk crate as this daemon was built with it: (path in the
/// crate, text). `the_embedded_sdk_is_every_file_of_sink_sdk` keeps the
/// list whole.
pub const SDK_FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../../../sink-sdk/Cargo.toml")),
    ("README.md", include_str!("../../../sink-sdk/README.md")),
    ("src/abi.rs", include_str!("../../../sink-sdk/src/abi.rs")),
    (
        "src/abi/export.rs",
        include_str!("../../../sink-sdk/src/abi/export.rs"),
    ),
    (
        "src/abi/host.rs",
        include_str!("../../../sink-sdk/src/abi/host.rs"),
    ),
    (
        "src/abi/tests.rs",
        include_str!("../../../sink-sdk/src/abi/tests.rs"),
    ),
    (
        "src/declare.rs",
        include_str!("../../../sink-sdk/src/declare.rs"),
    ),
    (
        "src/delivery.rs",
        include_str!("../../../sink-sdk/src/delivery.rs"),
    ),
    (
        "src/exactly_once.rs",
        include_str!("../../../sink-sdk/src/exactly_once.rs"),
    ),
    ("src/keys.rs", include_str!("../../../sink-sdk/src/keys.rs")),
    ("src/lib.rs", include_str!("../../../sink-sdk/src/lib.rs")),
    (
        "src/output/framing.rs",
        include_str!("../../../sink-sdk/src/output/framing.rs"),
    ),
    (
        "src/output/mod.rs",
        include_str!("../../../sink-sdk/src/output/mod.rs"),
    ),
    (
        "src/output/rolling.rs",
        include_str!("../../../sink-sdk/src/output/rolling.rs"),
    ),
    (
        "src/units.rs",
        include_str!("../../../sink-sdk/src/units.rs"),
    ),
];

/// The plugin crate's own files, `{{name}}`, `{{sink}}` (its type:
/// `my-sink` → `MySink`), `{{crate}}` (the name with `_` for `-`),
/// `{{sdk}}` (the SDK's path from the crate) and `{{spillway}}` (this
/// daemon's version) filled in.
const PLUGIN_FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("template/Cargo.toml.in")),
    ("README.md", include_str!("template/README.md.in")),
    ("src/lib.rs", include_str!("template/lib.rs.in")),
    (
        "test-options.toml",
        include_str!("template/test-options.toml.in"),
    ),
    (".gitignore", "/target\n"),
];

/// Whether `name` can name a crate (and so a plugin): ASCII letters,
/// digits, `-` and `_`, a letter first, at most 64 characters.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} cannot name a plugin crate: use lower-case ASCII letters, digits, `-` and `_`, a letter first, at most 64 characters (e.g. my-sink)"
        ))
    }
}

/// Writes the plugin crate `name` into `parent/name` (which must not exist
/// or be empty). With `sdk`, the crate depends on that sink-sdk folder
/// (e.g. a spillway checkout's); without, this daemon's sink-sdk is
/// written into `vendor/sink-sdk` and used. Returns the crate's folder.
pub fn write(name: &str, parent: &Path, sdk: Option<&Path>) -> Result<PathBuf, String> {
    check_name(name)?;
    let dir = parent.join(name);
    let busy = fs::read_dir(&dir).map(|mut d| d.next().is_some());
    match busy {
        Ok(true) => {
            return Err(format!(
                "{} exists and is not empty: choose another name or --dir",
                dir.display()
            ))
        }
        Ok(false) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let sdk_path = match sdk {
        Some(p) => {
            let p = fs::canonicalize(p).map_err(|e| format!("--sdk {}: {e}", p.display()))?;
            if !p.join("Cargo.toml").is_file() || !p.join("src/abi.rs").is_file() {
                return Err(format!(
                    "--sdk {}: not a sink-sdk folder (no Cargo.toml and src/abi.rs)",
                    p.display()
                ));
            }
            p.display().to_string()
        }
        None => {
            write_files(&dir.join("vendor/sink-sdk"), SDK_FILES, |t| t.to_string())?;
            "vendor/sink-sdk".to_string()
        }
    };
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{sink}}", &type_name(name))
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk}}", &sdk_path)
            .replace("{{spillway}}", env!("CARGO_PKG_VERSION"))
    };
    write_files(&dir, PLUGIN_FILES, fill)?;
    Ok(dir)
}

/// The sink type's name: `my-sink` → `MySink`.
fn type_name(name: &str) -> String {
    let mut out: String = name
        .split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    if !out.ends_with("Sink") {
        out.push_str("Sink");
    }
    out
}

fn write_files(
    dir: &Path,
    files: &[(&str, &str)],
    fill: impl Fn(&str) -> String,
) -> Result<(), String> {
    for (rel, text) in files {
        let path = dir.join(rel);
        let parent = path.parent().unwrap_or(dir);
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        fs::write(&path, fill(text)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the sink-sdk folder, and nothing else, is embedded.
    #[test]
    fn the_embedded_sdk_is_every_file_of_sink_sdk() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sink-sdk");
        let mut found = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    if p.file_name().is_some_and(|n| n != "target") {
                        stack.push(p);
                    }
                } else {
                    found.push(p.strip_prefix(&root).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        let mut embedded: Vec<String> = SDK_FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, found, "add the new sink-sdk file to SDK_FILES");
        assert_eq!(
            sink_sdk::abi::SDK_VERSION,
            env!("CARGO_PKG_VERSION"),
            "sink-sdk/Cargo.toml's version is the workspace's"
        );
    }

    #[test]
    fn names_that_cannot_name_a_crate_are_refused_saying_why() {
        assert!(check_name("my-sink").is_ok());
        assert!(check_name("sink_2").is_ok());
        for bad in ["", "My-sink", "2sink", "my sink", "my/sink", "émoi"] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains("cannot name a plugin crate"), "{bad:?}: {e}");
        }
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir(tmp.path().join("taken")).unwrap();
        fs::write(tmp.path().join("taken/x"), "").unwrap();
        let e = write("taken", tmp.path(), None).unwrap_err();
        assert!(e.contains("exists and is not empty"), "{e}");
    }
}
