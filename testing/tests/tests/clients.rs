//! The producer clients in other languages (`clients/<language>/`), each
//! run through its own test suite (`run-tests.sh`) against this build's
//! daemon binary and the conformance vectors.
//!
//! A client whose toolchain is missing (its script exits 2 and says what to
//! install) fails under CI (`CI` set; `.ci/clients.sh` installs them) and
//! is skipped, with the reason printed, elsewhere.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use spillway_tests::*;

/// Longest a client's suite may take (they take seconds).
const SUITE_TIMEOUT: Duration = Duration::from_secs(600);

fn run_client_suite(language: &str) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients")
        .join(language);
    let script = dir.join("run-tests.sh");
    assert!(script.exists(), "{} is missing", script.display());
    let out_dir = tempfile::tempdir().unwrap();
    let out_path = out_dir.path().join("output");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new("bash")
        .arg(&script)
        .env("SPILLWAY_BIN", spillway_bin())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let status = wait_timeout(&mut child, SUITE_TIMEOUT);
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the {language} client's tests ran past {SUITE_TIMEOUT:?}:\n{output}");
    };
    if status.code() == Some(2) && output.contains("missing toolchain") {
        assert!(
            std::env::var_os("CI").is_none(),
            "the {language} client's toolchain is missing in CI (.ci/clients.sh installs it):\n{output}"
        );
        eprintln!("SKIPPED the {language} client's tests (not in CI): {output}");
        return;
    }
    assert!(
        status.success(),
        "the {language} client's tests failed ({status}):\n{output}"
    );
    eprintln!("{output}");
}

#[test]
fn python_client() {
    run_client_suite("python");
}

#[test]
fn node_client() {
    run_client_suite("node");
}

#[test]
fn go_client() {
    run_client_suite("go");
}

#[test]
fn java_client() {
    run_client_suite("java");
}

#[test]
fn c_client() {
    run_client_suite("c");
}
