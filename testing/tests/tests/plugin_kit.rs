//! The plugin author's kit end to end: `spillway plugin new` writes a crate
//! that builds and passes its own tests, `spillway plugin test` passes it
//! and the shipped file plugin and fails a plugin whose verdicts do not fit
//! its batch, two daemons write through the new plugin into one file with
//! every record once by its identity, and the tutorial of docs/plugins.md
//! builds outside the workspace against the packaged sink-sdk.
//!
//! The crates are built with the `cargo` running the tests, `--offline`
//! (the crates they use are those the workspace already fetched), into
//! `target/plugin-kit`, shared by the tests here (cargo serializes them).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use spillway_tests::plugins::*;
use spillway_tests::*;

/// How long `spillway plugin test` may take.
const CONTRACT_TIMEOUT: Duration = Duration::from_secs(60);

/// `cargo <args>` in `dir`, offline, into the shared target folder; panics
/// with its output when it fails.
fn cargo(dir: &Path, args: &[&str]) -> String {
    let out = spillway_test_http::cargo_command()
        .current_dir(dir)
        .args(args)
        .arg("--offline")
        .env("CARGO_TARGET_DIR", kit_target())
        .env_remove("RUSTFLAGS")
        .output()
        .expect("running cargo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "cargo {args:?} in {} failed:\n{}",
        dir.display(),
        tail(&text, 60)
    );
    text
}

/// `target/plugin-kit`.
fn kit_target() -> PathBuf {
    profile_dir()
        .parent()
        .expect("target/release has a parent")
        .join("plugin-kit")
}

/// `spillway plugin test SO --options FILE`.
fn contract_test(so: &Path, options: &str) -> Finished {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("options.toml");
    std::fs::write(&file, options).unwrap();
    run_spillway(
        &[
            OsStr::new("plugin"),
            OsStr::new("test"),
            so.as_os_str(),
            OsStr::new("--options"),
            file.as_os_str(),
        ],
        CONTRACT_TIMEOUT,
    )
}

#[test]
fn a_new_plugin_builds_passes_its_tests_and_the_contract_and_keys_on_the_identity() {
    let dir = tempfile::tempdir().unwrap();
    let made = run_spillway(
        &[
            OsStr::new("plugin"),
            OsStr::new("new"),
            OsStr::new("kit-demo"),
            OsStr::new("--dir"),
            dir.path().as_os_str(),
        ],
        Duration::from_secs(10),
    );
    assert!(made.status.success(), "{made:?}");
    let krate = dir.path().join("kit-demo");
    assert!(krate.join("vendor/sink-sdk/src/abi.rs").is_file());

    let tested = cargo(&krate, &["test", "--release"]);
    assert!(
        tested.contains("test result: ok. 3 passed"),
        "the new crate's own tests:\n{tested}"
    );
    cargo(&krate, &["build", "--release"]);
    let so = kit_target().join("release/libkit_demo.so");
    assert!(so.is_file(), "{} was not built", so.display());

    let out = dir.path().join("contract.out");
    let f = contract_test(
        &so,
        &format!(
            "path = {}\nfsync = false\n",
            toml_str(out.display().to_string())
        ),
    );
    assert!(
        f.status.success(),
        "plugin test failed:\n{}{}",
        f.stdout,
        f.stderr
    );
    assert!(f.stdout.contains(", 0 failed"), "{}", f.stdout);
    assert!(
        f.stdout
            .contains("ok   options: declares 3 (path, fsync, batch_records_max)"),
        "{}",
        f.stdout
    );

    // Two daemons through the new plugin into one file: every record of
    // both once, told apart by the instance in its identity (their
    // (shard, seq) are the same).
    let fleet = dir.path().join("fleet.out");
    let config = format!(
        "[server]\nshards = 1\n[sink]\ntype = \"plugin\"\npath = {}\n[sink.options]\npath = {}\n",
        toml_str(so.display().to_string()),
        toml_str(fleet.display().to_string())
    );
    let a = Daemon::start(&config);
    let b = Daemon::start(&config);
    let mut sent = Vec::new();
    for (tag, d) in [("a", &a), ("b", &b)] {
        let mut c = d.client();
        for i in 0..200 {
            let p = format!("{tag}:{i}");
            c.push(Tier::Sync, p.as_bytes()).unwrap();
            sent.push(p);
        }
    }
    let lines = || -> Vec<String> {
        std::fs::read_to_string(&fleet)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(30), || lines().len() >= 400),
        "{} lines of 400:\n{}",
        lines().len(),
        a.stderr()
    );
    let lines = lines();
    let ids: HashSet<&str> = lines.iter().filter_map(|l| l.split(' ').next()).collect();
    let payloads: HashSet<&str> = lines
        .iter()
        .filter_map(|l| l.split_once(' ').map(|x| x.1))
        .collect();
    assert_eq!(lines.len(), 400, "each record once");
    assert_eq!(ids.len(), 400, "400 distinct identities: {lines:?}");
    assert_eq!(
        payloads,
        sent.iter().map(String::as_str).collect(),
        "every record of both"
    );
    let instances: HashSet<&str> = ids.iter().filter_map(|id| id.split(':').next()).collect();
    assert_eq!(instances.len(), 2, "two instances: {instances:?}");
    let shard_seq: HashSet<&str> = ids
        .iter()
        .filter_map(|id| id.split_once(':').map(|x| x.1))
        .collect();
    assert_eq!(
        shard_seq.len(),
        200,
        "each (shard, seq) twice: once per daemon"
    );
}

#[test]
fn the_contract_test_fails_a_plugin_whose_verdicts_do_not_fit_its_batch_and_passes_the_file_plugin()
{
    let dir = tempfile::tempdir().unwrap();
    // The C plugin of docs/plugins.md, answering one verdict too few.
    let doc = std::fs::read_to_string(workspace_root().join("docs/plugins.md")).unwrap();
    let section = &doc[doc.find("\n## A plugin in C").expect("the C section")..];
    let start = section.find("```c\n").unwrap() + 5;
    let source = &section[start..start + section[start..].find("```").unwrap()];
    assert!(source.contains("out->records_len = n;") && source.contains("if (empty == 0) {"));
    // Always a split, and one verdict short.
    let broken = source
        .replace("if (empty == 0) {", "if (n == 0) {")
        .replace("out->records_len = n;", "out->records_len = n - 1;");
    let so = compile_c(dir.path(), "libshort_verdicts", &broken);
    let f = contract_test(&so, "");
    assert!(!f.status.success(), "it passed:\n{}", f.stdout);
    let fail = f
        .stdout
        .lines()
        .find(|l| l.starts_with("FAIL one record"))
        .unwrap_or_else(|| panic!("no failed check for one record:\n{}", f.stdout));
    assert!(
        fail.contains("a split of 0 outcomes for 1 record"),
        "{fail}"
    );
    assert!(
        f.stdout.contains("WARN options: not declared"),
        "{}",
        f.stdout
    );

    let out = dir.path().join("file.out");
    let f = contract_test(
        &file_plugin(),
        &format!(
            "path = {}\nfsync = false\n",
            toml_str(out.display().to_string())
        ),
    );
    assert!(f.status.success(), "the file plugin failed:\n{}", f.stdout);
    assert!(
        f.stdout.contains("ok   unknown option: refused, naming it: sink.options.spillway_plugin_test_no_such_option: plugin spillway-plugin-file: no such option"),
        "{}",
        f.stdout
    );
    assert!(
        f.stdout
            .contains("ok   options: declares 7 (path, fsync, rotate_bytes, "),
        "{}",
        f.stdout
    );
}

/// docs/plugins.md's tutorial, as a reader copies it: its Cargo.toml, its
/// lib.rs and its test, in a folder outside the workspace, against the
/// sink-sdk `cargo package -p sink-sdk` makes (unpacked), built and tested.
#[test]
fn the_tutorial_builds_outside_the_workspace_against_the_packaged_sdk() {
    let root = workspace_root();
    let dir = tempfile::tempdir().unwrap();
    let package_dir = dir.path().join("package");
    cargo(
        &root,
        &[
            "package",
            "--no-verify",
            "--allow-dirty",
            "-p",
            "sink-sdk",
            "--target-dir",
            package_dir.to_str().unwrap(),
        ],
    );
    let crate_file = std::fs::read_dir(package_dir.join("package"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "crate"))
        .expect("cargo package made a .crate");
    let unpacked = dir.path().join("sdk");
    std::fs::create_dir(&unpacked).unwrap();
    let tar = Command::new("tar")
        .args(["xzf"])
        .arg(&crate_file)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(tar.success());
    let sdk = std::fs::read_dir(&unpacked)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();

    let doc = std::fs::read_to_string(root.join("docs/plugins.md")).unwrap();
    let tutorial =
        &doc[doc.find("## Tutorial").unwrap()..doc.find("## How a plugin runs").unwrap()];
    let blocks = |lang: &str| -> Vec<String> {
        let fence = format!("```{lang}\n");
        tutorial
            .match_indices(&fence)
            .map(|(i, _)| {
                let start = i + fence.len();
                tutorial[start..start + tutorial[start..].find("```").unwrap()].to_string()
            })
            .collect()
    };
    let toml_blocks = blocks("toml");
    let rust_blocks = blocks("rust");
    let manifest = toml_blocks
        .iter()
        .find(|b| b.contains("[package]"))
        .expect("the tutorial's Cargo.toml");
    let (lib, test) = (&rust_blocks[0], &rust_blocks[1]);
    let krate = dir.path().join("my-sink");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    let manifest = manifest.replace(
        "sink-sdk = { path = \"../spillway/sink-sdk\" }",
        &format!(
            "sink-sdk = {{ path = {} }}",
            toml_str(sdk.display().to_string())
        ),
    );
    assert!(
        manifest.contains(&sdk.display().to_string()),
        "the tutorial's sink-sdk line moved:\n{manifest}"
    );
    std::fs::write(
        krate.join("Cargo.toml"),
        format!("{manifest}\n[workspace]\n"),
    )
    .unwrap();
    std::fs::write(
        krate.join("src/lib.rs"),
        format!("{lib}\n#[cfg(test)]\nmod tests {{\nuse super::*;\n{test}\n}}\n"),
    )
    .unwrap();
    let tested = cargo(&krate, &["test", "--release"]);
    assert!(tested.contains("test result: ok. 1 passed"), "{tested}");
    cargo(&krate, &["build", "--release"]);
    let so = kit_target().join("release/libmy_sink.so");
    let f = contract_test(&so, "prefix = \"> \"\n");
    assert!(
        f.status.success(),
        "the tutorial's plugin failed the contract:\n{}",
        f.stdout
    );
}
