//! Helpers shared by the plugin and reload end-to-end tests: finding (or
//! building) the example plugins' shared libraries, compiling small C
//! plugins, running `spillway ctl`, reading `ctl stats`, reading NDJSON
//! output files, and a PostgreSQL server reached with `psql`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::{run_spillway, spillway_bin, Daemon, Finished};

/// The workspace root (the folder holding `plugins/` and `.ci/`).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|d| d.join("plugins/file/Cargo.toml").is_file())
        .unwrap_or_else(|| {
            panic!(
                "no folder above {} holds plugins/file/Cargo.toml",
                here.display()
            )
        })
        .to_path_buf()
}

/// `target/release`: the folder of the `spillway` binary the tests run.
pub fn profile_dir() -> PathBuf {
    spillway_bin()
        .parent()
        .expect("the spillway binary has a parent folder")
        .to_path_buf()
}

/// `target/release/lib<lib>.so`, built with `cargo build --release -p
/// <package>` (same target folder) if it is missing or older than a source
/// file of the plugins or of sink-sdk (a library left from before a change
/// would be tested stale). Panics with the command and its output if that
/// build fails.
pub fn plugin_lib(package: &str, lib: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(p) = built.get(package) {
        return p.clone();
    }
    let profile = profile_dir();
    let so = profile.join(format!("lib{lib}.so"));
    if stale(&so) {
        let target = profile
            .parent()
            .expect("<target>/release has a parent")
            .to_path_buf();
        let mut cargo = spillway_test_http::cargo_command();
        let out = cargo
            .current_dir(workspace_root())
            .args(["build", "--release", "-p", package, "--target-dir"])
            .arg(&target)
            .output();
        match out {
            Ok(o) if o.status.success() && so.is_file() => {}
            Ok(o) => panic!(
                "`cargo build --release -p {package}` did not produce the plugin library {} \
                 (exit {}); build it by hand to see why. cargo's stderr (end):\n{}",
                so.display(),
                o.status,
                tail(&String::from_utf8_lossy(&o.stderr), 40)
            ),
            Err(e) => panic!(
                "`{}` could not be run to build the plugin library {}: {e}; \
                 run `cargo build --release -p {package}`",
                Path::new(cargo.get_program()).display(),
                so.display()
            ),
        }
    }
    built.insert(package.to_string(), so.clone());
    so
}

/// Whether `so` is missing, or older than a file under `plugins/` or
/// `sink-sdk/` (what any plugin is built from).
fn stale(so: &Path) -> bool {
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        let mut latest = None;
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            let at = if path.is_dir() {
                newest(&path)
            } else {
                entry.metadata().and_then(|m| m.modified()).ok()
            };
            latest = latest.max(at);
        }
        latest
    }
    let Ok(built) = std::fs::metadata(so).and_then(|m| m.modified()) else {
        return true;
    };
    let root = workspace_root();
    ["plugins", "sink-sdk"]
        .iter()
        .filter_map(|d| newest(&root.join(d)))
        .any(|changed| changed > built)
}

/// `libspillway_plugin_file.so`.
pub fn file_plugin() -> PathBuf {
    plugin_lib("spillway-plugin-file", "spillway_plugin_file")
}

/// `libspillway_plugin_postgres.so`.
pub fn postgres_plugin() -> PathBuf {
    plugin_lib("spillway-plugin-postgres", "spillway_plugin_postgres")
}

pub fn mariadb_plugin() -> PathBuf {
    plugin_lib("spillway-plugin-mariadb", "spillway_plugin_mariadb")
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Writes straight to the process's stderr: libtest hides `eprintln!` of
/// passing tests, and what this reports (skips, measurements) must show.
pub fn say(msg: &str) {
    let mut err = std::io::stderr();
    let _ = err.write_all(msg.as_bytes());
    let _ = err.flush();
}

/// Compiles C `source` into `<dir>/<name>.so` with `cc -shared -fPIC`.
pub fn compile_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    let so = dir.join(format!("{name}.so"));
    std::fs::write(&c, source).unwrap();
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
        .arg(&so)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test compiles a C plugin and needs `cc` (apt-get install gcc): {e}")
        });
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        c.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// A string as a TOML basic string (for the paths and conninfos we use:
/// no control characters, so Rust's debug quoting is valid TOML).
pub fn toml_str(s: impl AsRef<str>) -> String {
    format!("{:?}", s.as_ref())
}

/// A `[sink]` table delivering through the file plugin to `out`.
pub fn file_plugin_sink(out: &Path, sink_extra: &str, options_extra: &str) -> String {
    format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n{sink_extra}\n[sink.options]\npath = {}\nfsync = false\n{options_extra}\n",
        toml_str(file_plugin().display().to_string()),
        toml_str(out.display().to_string())
    )
}

// ---------------------------------------------------------------- ctl

/// The admin socket of a test daemon (`<tmp>/admin/admin.sock`).
pub fn admin_socket(d: &Daemon) -> PathBuf {
    d.dir().join("admin").join("admin.sock")
}

/// `spillway ctl --admin-socket <path> <args>`, whatever its exit status.
pub fn ctl_socket(socket: &Path, args: &[&str]) -> Finished {
    let mut argv: Vec<&OsStr> = vec![
        "ctl".as_ref(),
        "--admin-socket".as_ref(),
        socket.as_os_str(),
    ];
    argv.extend(args.iter().map(OsStr::new));
    run_spillway(&argv, Duration::from_secs(30))
}

/// `spillway ctl --config <the daemon's config file> <args>`, whatever its exit status.
pub fn ctl_config(d: &Daemon, args: &[&str]) -> Finished {
    let mut argv: Vec<&OsStr> = vec![
        "ctl".as_ref(),
        "--config".as_ref(),
        d.config_path().as_os_str(),
    ];
    argv.extend(args.iter().map(OsStr::new));
    run_spillway(&argv, Duration::from_secs(30))
}

/// `ctl stats` of a test daemon (through its admin socket); panics unless it succeeds.
pub fn stats(d: &Daemon) -> String {
    let f = ctl_socket(&admin_socket(d), &["stats", "--flat"]);
    assert!(
        f.status.success(),
        "ctl stats exited with {}: {}\ndaemon log:\n{}",
        f.status,
        f.stderr,
        d.stderr()
    );
    f.stdout
}

/// The description on the `default` sink's line of `ctl stats`
/// (`sink{sink="default"} "..."`).
pub fn stat_sink(stats: &str) -> String {
    stats
        .lines()
        .find_map(|l| l.strip_prefix("sink{sink=\"default\"} "))
        .unwrap_or_else(|| panic!("no sink line in ctl stats:\n{stats}"))
        .to_string()
}

// ---------------------------------------------------------------- output files

/// The complete lines (each ended by `\n`, which is removed) of an NDJSON
/// file; a missing file has none; a partial last line is left out.
pub fn ndjson_lines(path: &Path) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut lines: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    lines.pop(); // after the last newline: empty, or a line still being written
    lines
}

// ---------------------------------------------------------------- PostgreSQL

/// The `psql` client: on the PATH, or in the newest `/usr/lib/postgresql/*/bin`.
fn psql_bin() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join("psql");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/psql")))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Runs one SQL command with `psql` (unaligned, tuples only, `|` between
/// fields); returns its output lines.
pub fn psql(conninfo: &str, sql: &str) -> Result<Vec<String>, String> {
    let bin = psql_bin()
        .ok_or("the `psql` client is not installed (apt-get install postgresql-client)")?;
    let out = Command::new(&bin)
        .args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-F",
            "|",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            conninfo,
            "-c",
            sql,
        ])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .map_err(|e| format!("running {}: {e}", bin.display()))?;
    client_lines("psql", sql, out)
}

/// A SQL client's output lines, or why it failed.
fn client_lines(client: &str, sql: &str, out: std::process::Output) -> Result<Vec<String>, String> {
    if !out.status.success() {
        return Err(format!(
            "{client} {sql:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// The conninfo of a PostgreSQL server: `SPILLWAY_TEST_PG` (which must then
/// work), else one started by `.ci/postgres.sh` (and stopped when the test
/// binary exits). `None` after printing
/// `SKIPPED: ...` to stderr when no server could be started.
pub fn pg_server() -> Option<String> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    private_server(
        &FOUND,
        "PostgreSQL",
        "SPILLWAY_TEST_PG",
        "postgres.sh",
        |c| psql(c, "SELECT 1").map(drop),
    )
}

/// The `mysql://` URL of a MariaDB server: `SPILLWAY_TEST_MARIADB` (which
/// must then work), else one started by `.ci/mariadb.sh` (and stopped when
/// the test binary exits). `None` after printing `SKIPPED: ...`.
pub fn mariadb_server() -> Option<String> {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    private_server(
        &FOUND,
        "MariaDB",
        "SPILLWAY_TEST_MARIADB",
        "mariadb.sh",
        |u| mariadb_query(u, "SELECT 1").map(drop),
    )
}

/// Runs `.ci/<script>` (with `arg`, and `env` set): the last line it
/// printed (a server's address), or why it failed, with the end of its
/// stderr. The private servers' scripts start, stop, kill and start
/// again through it.
pub fn ci_script(
    script: &str,
    arg: Option<&str>,
    env: &[(&str, String)],
) -> Result<String, String> {
    let path = workspace_root().join(".ci").join(script);
    let out = Command::new("bash")
        .arg(&path)
        .args(arg)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .map_err(|e| format!("running `bash {}`: {e}", path.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{} {}` exited with {}: {}",
            path.display(),
            arg.unwrap_or(""),
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 3).replace('\n', " / ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string())
}

/// A server from `env` (which must then answer `probe`), else the one
/// `.ci/<script>` starts and prints the address of (stopped by
/// `.ci/<script> stop` when the test binary exits); found once per binary.
fn private_server(
    found: &'static OnceLock<Result<String, String>>,
    what: &str,
    env: &str,
    script: &'static str,
    probe: fn(&str) -> Result<(), String>,
) -> Option<String> {
    static STOPS: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let found = found.get_or_init(|| {
        if let Ok(address) = std::env::var(env) {
            if let Err(e) = probe(&address) {
                panic!("{env}={address:?} is set but does not answer: {e}");
            }
            return Ok(address);
        }
        let started = ci_script(script, None, &[]);
        extern "C" fn stop_at_exit() {
            for script in STOPS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                let _ = ci_script(script, Some("stop"), &[]);
            }
        }
        {
            let mut stops = STOPS.lock().unwrap_or_else(|p| p.into_inner());
            if stops.is_empty() {
                // SAFETY: registers a plain function, run once by exit(3);
                // libtest ends the process with exit whether the tests
                // passed or not.
                unsafe { libc::atexit(stop_at_exit) };
            }
            stops.push(script);
        }
        let address = started?;
        probe(&address).map_err(|e| format!(".ci/{script} started {address:?} but: {e}"))?;
        Ok(address)
    });
    match found {
        Ok(c) => Some(c.clone()),
        Err(why) => {
            let test = std::thread::current().name().unwrap_or("?").to_string();
            say(&format!(
                "SKIPPED: no {what} server could be started — {why} (test {test})\n"
            ));
            None
        }
    }
}

/// Runs SQL with the `mariadb` client against `url`
/// (`mysql://USER:PASS@HOST/DB?socket=PATH`, as `.ci/mariadb.sh` prints
/// it); returns its output lines (tab-separated fields, no headers).
pub fn mariadb_query(url: &str, sql: &str) -> Result<Vec<String>, String> {
    let rest = url
        .strip_prefix("mysql://")
        .ok_or_else(|| format!("{url:?} is not a mysql:// URL"))?;
    let (who, rest) = rest.split_once('@').ok_or("no user in the URL")?;
    let (user, pass) = who.split_once(':').unwrap_or((who, ""));
    let (host, rest) = rest.split_once('/').ok_or("no database in the URL")?;
    let (db, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut cmd = Command::new("mariadb");
    cmd.args(["--no-defaults", "-N", "-B", "-u", user, "-h", host, db]);
    if !pass.is_empty() {
        cmd.arg(format!("-p{pass}"));
    }
    if let Some(socket) = query.split('&').find_map(|kv| kv.strip_prefix("socket=")) {
        cmd.arg(format!("--socket={socket}"));
    }
    let out = cmd
        .args(["-e", sql])
        .output()
        .map_err(|e| format!("running the mariadb client (apt-get install mariadb-client): {e}"))?;
    client_lines("mariadb", sql, out)
}
