//! Golden files (tests only): output for people checked against the copy
//! in `runtime/tests/golden/`, so that a change to it shows in review.
//! `SPILLWAY_BLESS=1` rewrites the copy instead.

use std::path::Path;

/// Assert that `got` is the golden file `name`; with `SPILLWAY_BLESS` set,
/// write it instead.
pub fn check(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("SPILLWAY_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        got,
        want,
        "{} differs; if the change is meant, SPILLWAY_BLESS=1 rewrites it",
        path.display()
    );
}
