//! Running the `spillway` binary as a command (`ctl`, `check`, `run` on
//! the embedded default) and waiting on what it prints and does.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::*;

/// Path of the daemon binary: `target/release/spillway`, beside the
/// `target/release/deps/` folder the test executable lives in.
///
/// `cargo test --workspace` does not build another package's binary for
/// these tests, so the first call in each test process runs
/// `cargo build --release -p spillway` into the same target folder (a
/// no-op when it is up to date; cargo's lock serialises concurrent test
/// processes; `cargo_command` keeps it one: the test process's own
/// `CARGO_*` variables would rebuild the crates above ring in every
/// package's tests). That also keeps a stale binary from being tested.
pub fn spillway_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(build_spillway)
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn build_spillway() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test executable has a parent folder");
    let profile_dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("deps folder has a parent")
    } else {
        deps
    };
    let bin = profile_dir.join("spillway");
    let target_dir = profile_dir.parent().expect("profile folder has a parent");
    let out = spillway_test_http::cargo_command()
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "spillway",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "building the daemon (`cargo build --release -p spillway`) failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            ))
        }
        // No cargo here: use the binary if someone built it.
        Err(e) if bin.is_file() => eprintln!(
            "could not run cargo ({e}); testing the existing {}",
            bin.display()
        ),
        Err(e) => return Err(format!("cannot run cargo to build the daemon: {e}")),
    }
    if !bin.is_file() {
        return Err(format!(
            "the spillway daemon binary is missing at {} after building it",
            bin.display()
        ));
    }
    Ok(bin)
}

/// `spillway ctl --config <config> <args>`; panics unless it exits 0, with
/// `daemon_log()` (the daemon's stderr, or a tail of it) in the message.
pub fn run_ctl(config: &Path, args: &[&str], daemon_log: impl FnOnce() -> String) -> String {
    let mut argv: Vec<&std::ffi::OsStr> =
        vec!["ctl".as_ref(), "--config".as_ref(), config.as_os_str()];
    argv.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    let f = run_spillway(&argv, Duration::from_secs(20));
    assert!(
        f.status.success(),
        "spillway ctl {args:?} exited with {}: stdout:\n{}\nstderr:\n{}\ndaemon log:\n{}",
        f.status,
        f.stdout,
        f.stderr,
        daemon_log()
    );
    f.stdout
}

/// `spillway ctl --config <config> health`: its text. Panics unless the
/// exit status is the one the verdict line calls for (0 after `ready`, 3
/// after `degraded: ...`, 1 after `not ready: ...`): scripts and the
/// unit's health check go by it.
pub fn run_health(config: &Path, daemon_log: impl FnOnce() -> String) -> String {
    let argv: Vec<&std::ffi::OsStr> = vec![
        "ctl".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
        "health".as_ref(),
    ];
    let f = run_spillway(&argv, Duration::from_secs(20));
    let last = f.stdout.lines().last().unwrap_or("");
    let want = if last == "ready" {
        Some(0)
    } else if last.starts_with("degraded: ") {
        Some(3)
    } else if last.starts_with("not ready: ") {
        Some(1)
    } else {
        None
    };
    assert!(
        want.is_some() && f.status.code() == want,
        "spillway ctl health exited with {} (want {want:?} after its verdict): stdout:\n{}\nstderr:\n{}\ndaemon log:\n{}",
        f.status,
        f.stdout,
        f.stderr,
        daemon_log()
    );
    f.stdout
}

/// (pending delivery, already delivered) from the daemon's start-up line
/// "... N records pending delivery, M already delivered, in K segments";
/// `None` when `stdout` has no such line.
pub fn kept_at_start(stdout: &str) -> Option<(u64, u64)> {
    let line = stdout
        .lines()
        .find(|l| l.contains(" records pending delivery, "))?;
    let (head, rest) = line.split_once(" records pending delivery, ")?;
    let pending = head.rsplit(' ').next()?.parse().ok()?;
    let delivered = rest.split_once(" already delivered")?.0.parse().ok()?;
    Some((pending, delivered))
}

/// The count and rows of a `ctl dead-letter list` (text) answer, its shape
/// checked: `N dead letters in sink NAME`, then when N > 0 the column
/// names and one row per dead letter, the time in RFC 3339 and the size
/// with its unit. Panics with the answer otherwise.
pub fn dead_letter_rows(out: &str) -> (usize, Vec<String>) {
    let mut lines = out.lines();
    let n: usize = lines
        .next()
        .and_then(|h| h.split_once(" dead letters in sink "))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected dead-letter list output:\n{out}"));
    if n > 0 {
        let columns = lines.next().unwrap_or_default();
        assert!(
            columns.starts_with("ID ")
                && columns.contains("DEAD-LETTERED")
                && columns.ends_with("PAYLOAD"),
            "{out}"
        );
    }
    let rows: Vec<String> = lines.map(str::to_string).collect();
    assert_eq!(rows.len(), n, "dead-letter list says {n} but shows:\n{out}");
    for row in &rows {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert!(
            cells.len() >= 6 && cells[1].len() == 20 && cells[1].ends_with('Z'),
            "{out}"
        );
        assert!(["B", "KiB", "MiB"].contains(&cells[3]), "{out}");
    }
    (n, rows)
}

/// Outcome of a `spillway` invocation that was expected to exit by itself.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Run `spillway <args>` to completion, killing it (and panicking) if it is
/// still running after `timeout`. `$SPILLWAY_CONFIG` is not passed on: a
/// command without `--config` finds `./spillway.toml`, the system config
/// or the embedded default, whatever the caller's environment says.
pub fn run_spillway(args: &[&std::ffi::OsStr], timeout: Duration) -> Finished {
    run_spillway_with(args, timeout, |_| {})
}

/// [`run_spillway`], with `setup` applied to the command before it starts
/// (a current folder, an environment variable, a user to run as).
pub fn run_spillway_with(
    args: &[&std::ffi::OsStr],
    timeout: Duration,
    setup: impl FnOnce(&mut Command),
) -> Finished {
    let tmp = TempDir::new().expect("tempdir");
    let out_path = tmp.path().join("stdout");
    let err_path = tmp.path().join("stderr");
    let mut command = Command::new(spillway_bin());
    command
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("SPILLWAY_CONFIG")
        .env("NO_COLOR", "1");
    setup(&mut command);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .expect("spawning spillway");
    let status = match wait_timeout(&mut child, timeout) {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "spillway {:?} was still running after {timeout:?}; stderr:\n{}",
                args,
                read_lossy(&err_path)
            );
        }
    };
    Finished {
        status,
        stdout: read_lossy(&out_path),
        stderr: read_lossy(&err_path),
    }
}

/// Wait for `child` to exit, up to `timeout`.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// A number from the environment (decimal, or hex with `0x`), for the long
/// runs' counts and seeds; `None` when unset.
///
/// # Panics
/// When it is set but not a number (a typo must not run the default).
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number")))
}

/// Whether this runs in CI (`CI` set to anything but empty, `0` or `false`).
/// A test that needs a server, a tool or root fails there when it is
/// missing, and may skip with a printed reason only elsewhere.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Whether this test may do what needs root: in CI (where the tests run as
/// root) not being root is a failure; elsewhere the test is skipped with
/// the reason printed.
pub fn require_root(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        !in_ci(),
        "this test must run as root in CI (to {what}), but euid is not 0"
    );
    eprintln!("SKIPPED: not root, cannot {what} (this test runs as root in CI)");
    false
}

/// `admin.metrics_address` on loopback with a port the daemon's bind
/// picks: a port picked here and bound later by the daemon could be taken
/// meanwhile by any other test on the machine. The port bound is in the
/// daemon's log ([`metrics_port_in_log`], [`Daemon::metrics_port`]).
pub const METRICS_ON_ANY_PORT: &str = "127.0.0.1:0";

/// The port of the metrics listener a daemon's log says it serves on
/// (the INFO line naming `admin.metrics_address`, its `address=` field).
pub fn metrics_port_in_log(log: &str) -> Option<u16> {
    let log = strip_ansi(log);
    let line = log
        .lines()
        .find(|l| l.contains("serving GET /metrics") && l.contains("admin.metrics_address"))?;
    let address = line.split("address=").nth(1)?.split_whitespace().next()?;
    let port = address.trim_matches('"').rsplit(':').next()?.parse().ok()?;
    (port != 0).then_some(port)
}

/// The whole answer (head and body) to `GET path` on loopback `port`.
pub fn http_get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Poll `cond` every few milliseconds until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, cond: impl FnMut() -> bool) -> bool {
    wait_every(Duration::from_millis(5), timeout, cond)
}

/// Poll `cond` every `step` until it holds or `timeout` passes.
pub fn wait_every(step: Duration, timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(step);
    }
}

/// Poll `health` (a `ctl health` answer) every `step` until every shard
/// is in `state`; how long it took, or a panic after `timeout` with the
/// last answer and `log` (the daemon's, for the reader).
pub fn wait_all_shards_in(
    state: &str,
    timeout: Duration,
    step: Duration,
    mut health: impl FnMut() -> String,
    log: impl FnOnce() -> String,
) -> Duration {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < timeout {
        last = shard_states(&health());
        if !last.is_empty() && last.iter().all(|(_, s, _)| s == state) {
            return start.elapsed();
        }
        thread::sleep(step);
    }
    panic!(
        "not every shard turned {state} within {timeout:?}; ctl health:\n{}\ndaemon log (tail):\n{}",
        last.iter()
            .map(|(_, _, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        log()
    );
}

/// The shard lines of `ctl health`'s output as (shard, state word, whole
/// line).
pub fn shard_states(health: &str) -> Vec<(u32, String, String)> {
    health
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            if w.next() != Some("shard") {
                return None;
            }
            let n = w.next()?.parse().ok()?;
            let state = w.next()?.to_string();
            Some((n, state, l.to_string()))
        })
        .collect()
}

pub(crate) fn read_lossy(path: &Path) -> String {
    strip_ansi(&String::from_utf8_lossy(
        &fs::read(path).unwrap_or_default(),
    ))
}

/// Removes terminal colour sequences (`ESC [ ... letter`) from log text.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `spillway run` in the working folder `dir`, stdin closed, plain logs.
/// The daemon dies with the test process: a test that panics in another
/// thread or is killed must not leave daemons behind.
pub fn run_command(dir: &Path) -> Command {
    let mut cmd = Command::new(spillway_bin());
    // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.arg("run")
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// Start `spillway run` with NO `--config` (the embedded default) in the
/// working folder `dir`, stderr to `log`.
pub fn spawn_on_embedded_default(dir: &Path, log: &Path) -> Child {
    run_command(dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("creating the daemon log"))
        .spawn()
        .expect("starting spillway")
}

/// Whether a daemon answers a health check on `socket` (2 s timeout).
pub fn answers_health(socket: &Path) -> bool {
    let Ok(mut c) = Client::connect(socket) else {
        return false;
    };
    if c.set_timeout(Some(Duration::from_secs(2))).is_err() {
        return false;
    }
    c.health().is_ok()
}
