//! `spillway check` end to end: the real binary on real files, plugins and
//! a loopback HTTP receiver. A config that `spillway run` would refuse for
//! what it finds outside the file (a missing plugin, a plugin refusing its
//! options, an unset token variable, a path it cannot create) fails,
//! naming the key; `--no-environment` passes those and still fails a file
//! that does not validate; a sink that does not answer is a warning naming
//! its URL. And `ctl --config FILE reload` with a broken FILE asks the
//! daemon for its verdict, or says the file did not parse far enough to
//! find the daemon.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use spillway_tests::plugins::*;
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// Longest one `spillway check` may take (a liveness bound only).
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// `spillway check [extra...] <config of d>`, whatever its exit status.
fn check(d: &Daemon, extra: &[&str]) -> Finished {
    let mut argv: Vec<&OsStr> = vec!["check".as_ref()];
    argv.extend(extra.iter().map(OsStr::new));
    argv.push(d.config_path().as_os_str());
    run_spillway(&argv, CHECK_TIMEOUT)
}

/// `spillway <args>` in the working folder `dir`, whatever its exit status.
fn spillway_in(dir: &Path, args: &[&OsStr]) -> Finished {
    let out = dir.join("..").join(format!(
        "out-{}",
        dir.file_name().unwrap().to_string_lossy()
    ));
    let child = Command::new(spillway_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(fs::File::create(out.with_extension("stdout")).unwrap())
        .stderr(fs::File::create(out.with_extension("stderr")).unwrap())
        .spawn()
        .expect("spawning spillway");
    finish(child, &out)
}

/// Waits (within [`CHECK_TIMEOUT`]) for a `spillway` process whose output
/// goes to `<out>.stdout` and `<out>.stderr`.
fn finish(mut child: std::process::Child, out: &Path) -> Finished {
    let Some(status) = wait_timeout(&mut child, CHECK_TIMEOUT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("spillway was still running after {CHECK_TIMEOUT:?}");
    };
    let read = |ext: &str| fs::read_to_string(out.with_extension(ext)).unwrap_or_default();
    Finished {
        status,
        stdout: read("stdout"),
        stderr: read("stderr"),
    }
}

/// `check` of `d`'s config fails, and its error names each of `names`; with
/// `--no-environment` it passes.
fn fails_naming(d: &Daemon, what: &str, names: &[&str]) {
    let f = check(d, &[]);
    assert!(
        !f.status.success(),
        "{what}: check passed a config it must refuse: {f:?}\nconfig:\n{}",
        d.config_text()
    );
    for name in names {
        assert!(
            f.stderr.contains(name),
            "{what}: the error does not name {name:?}:\n{}",
            f.stderr
        );
    }
    assert!(!f.stdout.contains(": ok"), "{what}: said ok: {f:?}");
    let f = check(d, &["--no-environment"]);
    assert!(
        f.status.success(),
        "{what}: only the environment is wrong, --no-environment must pass: {f:?}"
    );
    assert!(f.stdout.ends_with(": ok\n"), "{what}: {f:?}");
}

/// A `[sink]` table of `type = "http"` for `url`, with `extra` keys.
fn http_sink(url: &str, extra: &str) -> String {
    format!("[sink]\ntype = \"http\"\nurl = {}\n{extra}", toml_str(url))
}

// ---------------------------------------------------------------- each environment problem

#[test]
fn a_missing_plugin_library_fails_naming_sink_path() {
    let mut d = Daemon::configure("");
    let missing = d.dir().join("plugins/libgone.so");
    d.reconfigure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n",
        toml_str(missing.display().to_string())
    ));
    fails_naming(&d, "missing plugin", &["sink.path", "libgone.so"]);
}

#[test]
fn a_file_that_is_not_a_plugin_fails_naming_sink_path() {
    let mut d = Daemon::configure("");
    let not_a_library = d.dir().join("libfake.so");
    fs::write(&not_a_library, b"not an ELF file").unwrap();
    d.reconfigure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n",
        toml_str(not_a_library.display().to_string())
    ));
    fails_naming(
        &d,
        "not a plugin",
        &["sink.path", "libfake.so", "is not an ELF file"],
    );
}

#[test]
fn a_plugin_option_the_plugin_refuses_fails_naming_the_option() {
    let mut d = Daemon::configure("");
    let out = d.dir().join("out/plugin.ndjson");
    d.reconfigure(&file_plugin_sink(&out, "", "rotate_bytes = 5"));
    fails_naming(
        &d,
        "plugin option",
        &[
            "sink.options.rotate_bytes",
            "spillway-plugin-file",
            "out of range",
        ],
    );
    // The plugin declares its options: a misspelt one is refused before
    // the plugin is asked, with the closest it takes.
    d.reconfigure(&file_plugin_sink(&out, "", "rotate_byte = 1048576"));
    fails_naming(
        &d,
        "misspelt plugin option",
        &[
            "sink.options.rotate_byte: plugin spillway-plugin-file: no such option; did you mean `rotate_bytes`?",
        ],
    );
    // Fixed, it passes (and the plugin really parsed the options), and the
    // options are shown as the plugin declares them, with their values.
    d.reconfigure(&file_plugin_sink(&out, "", "rotate_bytes = 2097152"));
    let f = check(&d, &[]);
    assert!(f.status.success(), "{f:?}");
    let head = format!("{}: ok\n", d.config_path().display());
    assert!(f.stdout.starts_with(&head), "{f:?}");
    assert!(
        !f.stdout.contains("warning"),
        "a healthy plugin gets no warning: {f:?}"
    );
    let shown: Vec<&str> = f.stdout[head.len()..].lines().collect();
    assert!(
        shown[0].starts_with("sink.options, as plugin spillway-plugin-file ")
            && shown[0].ends_with(" declares them:"),
        "{shown:?}"
    );
    let line = |key: &str| {
        shown
            .iter()
            .find(|l| l.trim_start().starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("no line for {key}: {shown:?}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("path"), "path = (set) a file path");
    assert_eq!(line("fsync"), "fsync = false true or false");
    assert_eq!(
        line("rotate_bytes"),
        "rotate_bytes = 2097152 1 MiB..=64 GiB"
    );
    assert_eq!(
        line("panic_on_batch"),
        "panic_on_batch = 0 (never) (default) 0 (never), or 1..=18446744073709551615"
    );
}

/// `spillway schema --config` adds to the schema the options each plugin
/// the config loads declares, for the path it is loaded from.
#[test]
fn the_schema_of_a_config_has_its_plugins_declared_options() {
    let d = Daemon::configure(&file_plugin_sink(&d_out(), "", ""));
    let f = run_spillway(
        &[
            "schema".as_ref(),
            "--config".as_ref(),
            d.config_path().as_os_str(),
        ],
        CHECK_TIMEOUT,
    );
    assert!(f.status.success(), "{f:?}");
    let schema: serde_json::Value = serde_json::from_str(&f.stdout).expect("JSON");
    let plugin = schema["definitions"]["sink"]["allOf"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["if"]["properties"]["path"]["const"].is_string())
        .unwrap_or_else(|| panic!("no plugin's options in {}", f.stdout));
    assert_eq!(
        plugin["if"]["properties"]["path"]["const"],
        file_plugin().display().to_string()
    );
    let options = &plugin["then"]["properties"]["options"];
    assert_eq!(options["required"], serde_json::json!(["path"]));
    assert_eq!(options["additionalProperties"], false);
    let rotate = &options["properties"]["rotate_bytes"];
    assert_eq!(
        (rotate["minimum"].as_u64(), rotate["default"].as_u64()),
        (Some(1 << 20), Some(256 << 20)),
        "{rotate}"
    );
    // Without a config, the schema as published.
    let plain = run_spillway(&["schema".as_ref()], CHECK_TIMEOUT);
    assert!(plain.status.success(), "{plain:?}");
    assert!(
        !plain.stdout.contains(&file_plugin().display().to_string()),
        "{}",
        plain.stdout
    );
}

/// Where a test's plugin output would go (never written: nothing runs).
fn d_out() -> PathBuf {
    std::env::temp_dir().join("spillway-schema-test-unused.ndjson")
}

#[test]
fn an_unset_bearer_token_variable_fails_naming_the_key() {
    let rx = HttpReceiver::start();
    let var = "SPILLWAY_CHECK_TEST_TOKEN_NEVER_SET";
    let d = Daemon::configure(&http_sink(
        &rx.url(),
        &format!("token_env = {}\n", toml_str(var)),
    ));
    fails_naming(&d, "unset token variable", &["sink.token_env", var]);
}

#[test]
fn a_file_sink_under_proc_fails_naming_sink_path() {
    for path in [
        "/proc/spillway-delivered.ndjson",
        "/proc/sys/kernel/hostname",
    ] {
        let d = Daemon::configure(&format!(
            "[sink]\ntype = \"file\"\npath = {}\n",
            toml_str(path)
        ));
        fails_naming(&d, path, &["sink.path", "proc"]);
    }
}

#[test]
fn a_file_sink_whose_folder_is_a_file_fails_naming_sink_path() {
    let mut d = Daemon::configure("");
    let plain = d.dir().join("plain");
    fs::write(&plain, b"").unwrap();
    d.reconfigure(&format!(
        "[sink]\ntype = \"file\"\npath = {}\n",
        toml_str(plain.join("out.ndjson").display().to_string())
    ));
    fails_naming(&d, "folder is a file", &["sink.path", "is not a folder"]);
}

#[test]
fn a_data_dir_under_a_regular_file_fails_naming_the_key() {
    let mut d = Daemon::configure("");
    let plain = d.dir().join("plain");
    fs::write(&plain, b"").unwrap();
    let data = plain.join("wab");
    d.reconfigure(&format!(
        "[server]\ndata_dir = {}\n{}",
        toml_str(data.display().to_string()),
        http_sink(&HttpReceiver::start().url(), "")
    ));
    fails_naming(
        &d,
        "data_dir under a file",
        &["server.data_dir", &plain.display().to_string()],
    );
    // The daemon really refuses it, and says why once.
    let f = d.run_to_exit(Duration::from_secs(20));
    assert!(!f.status.success(), "{f:?}");
    let said = f.stderr.matches(&data.display().to_string()).count();
    assert_eq!(
        said, 1,
        "the fatal error is printed {said} times:\n{}",
        f.stderr
    );
}

#[test]
fn socket_folders_under_a_regular_file_fail_naming_each_key() {
    let mut d = Daemon::configure("");
    let plain = d.dir().join("plain");
    fs::write(&plain, b"").unwrap();
    d.reconfigure(&format!(
        "[server]\nsocket_path = {}\n[admin]\nsocket_path = {}\n",
        toml_str(plain.join("s.sock").display().to_string()),
        toml_str(plain.join("run/a.sock").display().to_string()),
    ));
    fails_naming(
        &d,
        "socket folders under a file",
        &["server.socket_path", "admin.socket_path"],
    );
}

/// A folder the daemon's user cannot write into: as root, `check` runs as
/// `nobody` (root writes anywhere, so its check rightly passes).
#[test]
fn a_folder_without_write_permission_fails_naming_sink_path() {
    let d = Daemon::configure("");
    let dir = d.dir();
    let work = dir.join("work");
    let locked = dir.join("locked");
    fs::create_dir(&work).unwrap();
    fs::create_dir(&locked).unwrap();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&work, fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o555)).unwrap();
    // The sockets' folder is nobody's own, as `run` as nobody would need
    // (a folder another user owns is refused: see docs/security.md).
    let sockets = dir.join("sockets");
    fs::create_dir(&sockets).unwrap();
    fs::set_permissions(&sockets, fs::Permissions::from_mode(0o700)).unwrap();
    if as_root {
        std::os::unix::fs::chown(&sockets, Some(65534), Some(65534)).unwrap();
    }
    let config = dir.join("locked.toml");
    fs::write(
        &config,
        format!(
            "[server]\ndata_dir = {}\nsocket_path = {}\n[admin]\nsocket_path = {}\n\
             [sink]\ntype = \"file\"\npath = {}\n",
            toml_str(work.join("wab").display().to_string()),
            toml_str(sockets.join("s.sock").display().to_string()),
            toml_str(sockets.join("a.sock").display().to_string()),
            toml_str(locked.join("out.ndjson").display().to_string()),
        ),
    )
    .unwrap();
    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).unwrap();
    let out = dir.join("nobody");
    let mut cmd = Command::new(spillway_bin());
    cmd.arg("check")
        .arg(&config)
        .current_dir(&work)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(fs::File::create(out.with_extension("stdout")).unwrap())
        .stderr(fs::File::create(out.with_extension("stderr")).unwrap());
    if as_root {
        cmd.uid(65534).gid(65534);
    }
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if as_root && e.kind() == std::io::ErrorKind::PermissionDenied => {
            assert!(
                !in_ci(),
                "user nobody cannot run {} ({e}); in CI it must",
                spillway_bin().display()
            );
            eprintln!("SKIPPED: user nobody cannot run the spillway binary: {e}");
            return;
        }
        Err(e) => panic!("spawning spillway check: {e}"),
    };
    let f = finish(child, &out);
    fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
    assert!(
        !f.status.success(),
        "check passed an unwritable folder: {f:?}"
    );
    assert!(
        f.stderr.contains("sink.path: ") && f.stderr.contains(&locked.display().to_string()),
        "{f:?}"
    );
    assert!(
        !f.stderr.contains("server.") && !f.stderr.contains("admin."),
        "only the sink's folder is wrong: {f:?}"
    );
}

// ---------------------------------------------------------------- what is not the environment

#[test]
fn no_environment_still_fails_a_file_that_does_not_validate() {
    for (overrides, key) in [
        ("[wab]\nsegment_bytes_max = 5\n", "wab.segment_bytes_max"),
        (
            "[sink]\ntype = \"noop\"\nbatch_records_max = 0\n",
            "sink.batch_records_max",
        ),
        ("[sink]\ntype = \"file\"\n", "sink.path"),
    ] {
        let d = Daemon::configure(overrides);
        for extra in [&[][..], &["--no-environment"][..]] {
            let f = check(&d, extra);
            assert!(!f.status.success(), "{overrides:?} {extra:?}: {f:?}");
            assert!(f.stderr.contains(key), "{overrides:?} {extra:?}: {f:?}");
        }
    }
}

#[test]
fn the_embedded_default_and_the_example_configs_pass_and_leave_nothing_behind() {
    let root = tempfile::tempdir().unwrap();
    let cwd = root.path().join("cwd");
    fs::create_dir(&cwd).unwrap();
    let f = spillway_in(&cwd, &["check".as_ref()]);
    assert!(f.status.success(), "{f:?}");
    assert_eq!(f.stdout, "embedded default: ok\n", "{f:?}");
    let left: Vec<_> = fs::read_dir(&cwd).unwrap().collect();
    assert!(left.is_empty(), "check created {left:?}");

    let configs = workspace_root().join("configs");
    let mut checked = 0;
    for entry in fs::read_dir(&configs).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let f = spillway_in(&cwd, &["check".as_ref(), path.as_os_str()]);
        assert!(f.status.success(), "{}: {f:?}", path.display());
        // An example's HTTP sink points at a collector on loopback that need
        // not run here, its Kafka sink at brokers that need not either:
        // those are warnings (the daemon would start and retry); no other
        // warning is.
        let ok = format!("{}: ok\n", path.display());
        let warning = format!("{}: warning: ", path.display());
        let rest = f
            .stdout
            .strip_prefix(&ok)
            .unwrap_or_else(|| panic!("{f:?}"));
        for line in rest.lines() {
            assert!(
                line.starts_with(&warning)
                    && (line.contains(": cannot connect (")
                        || line.contains(": cannot reach the Kafka brokers ")),
                "{}: unexpected line {line:?}: {f:?}",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "only {checked} configs in {}",
        configs.display()
    );
}

// ---------------------------------------------------------------- http health

#[test]
fn a_reachable_http_sink_passes_without_a_warning() {
    let rx = HttpReceiver::start();
    let var = "SPILLWAY_CHECK_TEST_TOKEN";
    let d = Daemon::configure(&http_sink(
        &rx.url(),
        &format!("token_env = {}\n", toml_str(var)),
    ));
    let mut cmd = Command::new(spillway_bin());
    let out = d.dir().join("reachable");
    cmd.arg("check")
        .arg(d.config_path())
        .env(var, "t0ken")
        .stdin(Stdio::null())
        .stdout(fs::File::create(out.with_extension("stdout")).unwrap())
        .stderr(fs::File::create(out.with_extension("stderr")).unwrap());
    let f = finish(cmd.spawn().unwrap(), &out);
    assert!(f.status.success(), "{f:?}");
    assert_eq!(f.stdout, format!("{}: ok\n", d.config_path().display()));
    assert_eq!(
        rx.request_count(),
        0,
        "check delivered something to the receiver"
    );
}

#[test]
fn an_unreachable_http_sink_passes_with_a_warning_naming_the_url() {
    // The test daemons' held sink: nothing listens on 127.0.0.1:1.
    let d = Daemon::configure("");
    let f = check(&d, &[]);
    assert!(f.status.success(), "{f:?}");
    let mut lines = f.stdout.lines();
    assert_eq!(
        lines.next(),
        Some(format!("{}: ok", d.config_path().display()).as_str())
    );
    let warning = lines.next().unwrap_or_default();
    assert!(
        warning.contains("warning: sink.url: ") && warning.contains(HELD_SINK_URL),
        "{f:?}"
    );
    assert_eq!(lines.next(), None, "{f:?}");
    // --no-environment does not try it.
    let f = check(&d, &["--no-environment"]);
    assert_eq!(f.stdout, format!("{}: ok\n", d.config_path().display()));
}

#[test]
fn an_http_host_that_does_not_resolve_passes_with_a_warning_naming_sink_url() {
    // The daemon starts on it and retries (a name may resolve later), so
    // check says ok and warns, as `run` does (tests/check_agrees.rs).
    let d = Daemon::configure(&http_sink("http://spillway-check.invalid/in", ""));
    let f = check(&d, &[]);
    assert!(f.status.success(), "{f:?}");
    assert!(
        f.stdout.contains("warning: sink.url: ") && f.stdout.contains("spillway-check.invalid"),
        "{f:?}"
    );
}

// ---------------------------------------------------------------- ctl reload of a broken file

#[test]
fn ctl_reload_of_a_file_that_does_not_validate_reports_the_daemons_verdict() {
    let mut d = Daemon::start("");
    d.reconfigure("[sink]\ntype = \"noop\"\nbatch_records_max = 0\n");
    let f = ctl_config(&d, &["reload"]);
    assert!(!f.status.success(), "{f:?}");
    assert!(
        f.stderr
            .contains("reload rejected, running sinks unchanged")
            && f.stderr.contains("sink.batch_records_max"),
        "not the daemon's verdict: {f:?}"
    );
    let s = stats(&d);
    assert_eq!(
        stat(&s, "reloads_failed"),
        1,
        "the daemon was not asked:\n{s}"
    );
    d.terminate();
}

#[test]
fn ctl_reload_of_a_file_that_is_not_toml_says_it_did_not_ask() {
    let mut d = Daemon::start("");
    let mut text = d.config_text();
    text.push_str("\n[sink\ntype = \n");
    fs::write(d.config_path(), text).unwrap();
    let f = ctl_config(&d, &["reload"]);
    assert!(!f.status.success(), "{f:?}");
    assert!(
        f.stderr
            .contains("the local file failed to parse before asking the daemon: "),
        "{f:?}"
    );
    assert!(
        f.stderr.contains(&d.config_path().display().to_string()),
        "{f:?}"
    );
    let s = stats(&d);
    assert_eq!(stat(&s, "reloads_failed"), 0, "the daemon was asked:\n{s}");
    d.terminate();
}
