//! `cargo` for a build a test starts itself (the daemon, a plugin), with
//! the environment of the command that started the tests.

use std::process::Command;

/// The cargo running these tests (`$CARGO`, else `cargo` on the PATH),
/// without the variables cargo sets for a test process only
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...). Build scripts that watch
/// one (ring's watches `CARGO_MANIFEST_DIR`) would otherwise run again
/// in the nested build, and every crate above them be rebuilt, once for
/// each package whose tests build (minutes per test run), and again by
/// the next `cargo test`.
pub fn cargo_command() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_for_tests) {
            command.env_remove(&key);
        }
    }
    command
}

/// Whether cargo sets `key` for the test binaries it runs (and for the
/// crates it compiles), not the user for cargo.
fn set_for_tests(key: &str) -> bool {
    matches!(
        key,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_CRATE_NAME"
            | "CARGO_BIN_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_TARGET_TMPDIR"
    ) || key.starts_with("CARGO_PKG_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cargo_sets_for_a_test_is_left_out() {
        // Set here by cargo for this very test binary.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let command = cargo_command();
        let removed: Vec<_> = command
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.iter().any(|k| k == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        assert!(removed.iter().any(|k| k == "CARGO_PKG_NAME"), "{removed:?}");
        for kept in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "RUSTFLAGS",
        ] {
            assert!(!set_for_tests(kept), "{kept}");
        }
    }
}
