//! [`Daemon`]: one daemon process with its own config, socket and data
//! folder, started, stopped, killed and restarted by a test; reading its
//! `ctl stats` and what it stored.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::*;

/// One TOML section of the generated config: keys in order, later ones win.
struct Section {
    name: String,
    keys: Vec<(String, String)>,
}

fn set_key(sections: &mut Vec<Section>, section: &str, key: &str, value: &str) {
    let idx = match sections.iter().position(|s| s.name == section) {
        Some(i) => i,
        None => {
            sections.push(Section {
                name: section.to_string(),
                keys: Vec::new(),
            });
            sections.len() - 1
        }
    };
    let keys = &mut sections[idx].keys;
    match keys.iter_mut().find(|(k, _)| k == key) {
        Some(kv) => kv.1 = value.to_string(),
        None => keys.push((key.to_string(), value.to_string())),
    }
}

/// Build the config text: the test defaults (socket and data inside `dir`,
/// 2 shards, 1 MiB segments, a held sink) overlaid with `overrides`, a small
/// TOML fragment of `[section]` headers and `key = value` lines. Keys
/// override the defaults one by one, except that a `[sink]` section
/// replaces the default sink table entirely.
fn build_config(socket: &Path, data: &Path, admin_socket: &Path, overrides: &str) -> String {
    let mut sections = Vec::new();
    set_key(
        &mut sections,
        "server",
        "socket_path",
        &format!("{:?}", socket.display().to_string()),
    );
    set_key(
        &mut sections,
        "server",
        "data_dir",
        &format!("{:?}", data.display().to_string()),
    );
    set_key(&mut sections, "server", "shards", "2");
    set_key(&mut sections, "wab", "segment_bytes_max", "1048576");
    set_key(&mut sections, "log", "level", "\"info\"");
    // The sink is held: an HTTP endpoint nobody listens on, so every batch
    // fails transiently and is retried (rarely) forever. Nothing is ever
    // confirmed, so the WAB keeps every record for the tests to read back.
    set_key(&mut sections, "sink", "type", "\"http\"");
    set_key(&mut sections, "sink", "url", &format!("{HELD_SINK_URL:?}"));
    set_key(&mut sections, "sink", "timeout_ms", "1000");
    set_key(&mut sections, "sink", "retry_initial_ms", "60000");
    set_key(&mut sections, "sink", "retry_max_ms", "60000");
    set_key(
        &mut sections,
        "admin",
        "socket_path",
        &format!("{:?}", admin_socket.display().to_string()),
    );
    let mut current: Option<String> = None;
    let mut replaced_sink = false;
    for (i, raw) in overrides.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.trim().to_string();
            if (name == "sink" || name.starts_with("sinks.")) && !replaced_sink {
                // A [sink] (or [sinks.NAME]) override replaces the held
                // sink as a whole (keys of one sink type are invalid for
                // another; [sink] and [sinks.*] do not mix).
                replaced_sink = true;
                sections.retain(|s| s.name != "sink");
            }
            if !sections.iter().any(|s| s.name == name) {
                sections.push(Section {
                    name: name.clone(),
                    keys: Vec::new(),
                });
            }
            current = Some(name);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            panic!(
                "config override line {}: expected `key = value` or `[section]`: {raw:?}",
                i + 1
            );
        };
        let Some(section) = current.as_deref() else {
            panic!(
                "config override line {}: `{}` comes before any [section]",
                i + 1,
                key.trim()
            );
        };
        set_key(&mut sections, section, key.trim(), value.trim());
    }
    let mut text = String::from("# written by spillway-tests\n");
    for s in &sections {
        text.push_str(&format!("\n[{}]\n", s.name));
        for (k, v) in &s.keys {
            text.push_str(&format!("{k} = {v}\n"));
        }
    }
    text
}

/// What [`Daemon::run_to_exit_or_start`] saw.
#[derive(Debug)]
pub enum StartOrExit {
    /// It answers health checks.
    Started,
    /// It exited first.
    Exited(Finished),
}

/// A spillway daemon process on its own temporary folder:
/// `<tmp>/run/spillway.sock` (the `run` folder is left for the daemon to
/// create), `<tmp>/admin/admin.sock`, `<tmp>/data`, `<tmp>/spillway.toml`,
/// and the output of each start in `<tmp>/stdout-N.log` / `<tmp>/stderr-N.log`.
/// The working folder is `<tmp>`, so relative paths land there too.
///
/// By default the sink never confirms anything (see [`HELD_SINK_URL`]), so
/// [`Daemon::read_all_records`] sees every record ever accepted.
///
/// Dropping it kills the process (SIGKILL) and removes the folder.
pub struct Daemon {
    dir: TempDir,
    config_path: PathBuf,
    socket: PathBuf,
    data: PathBuf,
    child: Option<Child>,
    /// Starts so far; the current (or last) run's logs carry this number.
    runs: usize,
}

impl Daemon {
    /// Write a config (test defaults plus `config_overrides`) and start the
    /// daemon on it; returns once the socket answers a health check.
    pub fn start(config_overrides: &str) -> Daemon {
        let mut d = Daemon::configure(config_overrides);
        d.spawn();
        d
    }

    /// Rewrite the config with different overrides (same socket, data dir
    /// and admin socket); takes effect at the next start.
    pub fn reconfigure(&mut self, config_overrides: &str) {
        let admin = self.dir.path().join("admin").join("admin.sock");
        fs::write(
            &self.config_path,
            build_config(&self.socket, &self.data, &admin, config_overrides),
        )
        .expect("writing config");
    }

    /// Write the config without starting anything (to prepare the folder
    /// first, or to run a config that is expected to be refused).
    pub fn configure(config_overrides: &str) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sw")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("run").join("spillway.sock");
        let data = dir.path().join("data");
        let config_path = dir.path().join("spillway.toml");
        let admin = dir.path().join("admin").join("admin.sock");
        fs::write(
            &config_path,
            build_config(&socket, &data, &admin, config_overrides),
        )
        .expect("writing config");
        Daemon {
            dir,
            config_path,
            socket,
            data,
            child: None,
            runs: 0,
        }
    }

    /// Start the process and wait until it answers a health check. Panics
    /// (with the daemon's stderr) if it exits or does not answer within
    /// [`START_TIMEOUT`].
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        self.runs += 1;
        let child = self.command().spawn().expect("spawning spillway");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                panic!(
                    "spillway exited during start-up with {status}; config:\n{}\nstderr:\n{}",
                    self.config_text(),
                    self.stderr()
                );
            }
            if self.stdout().contains("spillway listening on") && self.health_ok() {
                return;
            }
            if Instant::now() >= deadline {
                self.kill9();
                panic!(
                    "spillway did not answer a health check within {START_TIMEOUT:?}; stdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// `spillway run --config <config>` with output to this run's log files.
    fn command(&self) -> Command {
        let stdout = File::create(self.stdout_path()).expect("stdout log");
        let stderr = File::create(self.stderr_path()).expect("stderr log");
        let mut cmd = run_command(self.dir.path());
        cmd.arg("--config")
            .arg(&self.config_path)
            .stdout(stdout)
            .stderr(stderr);
        cmd
    }

    fn health_ok(&self) -> bool {
        answers_health(&self.socket)
    }

    /// Start again on the same config and data folder. A daemon still
    /// running is first stopped with SIGTERM (and must exit 0).
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.terminate();
        }
        self.spawn();
    }

    /// SIGKILL the daemon and reap it.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("kill9: the daemon is not running");
        signal(&child, libc::SIGKILL);
        let _ = child.wait();
    }

    /// SIGTERM the daemon and wait for it; asserts a clean exit (status 0)
    /// within [`STOP_TIMEOUT`].
    pub fn terminate(&mut self) {
        let status = self.terminate_status();
        assert!(
            status.success(),
            "spillway exited with {status} after SIGTERM (expected 0); stderr:\n{}",
            self.stderr()
        );
    }

    /// SIGTERM the daemon and return its exit status (no assertion on it).
    pub fn terminate_status(&mut self) -> ExitStatus {
        self.stop_with(libc::SIGTERM)
    }

    /// Send `sig` (e.g. `libc::SIGINT`) and wait up to [`STOP_TIMEOUT`] for
    /// the exit status (SIGKILL and panic if it does not exit).
    pub fn stop_with(&mut self, sig: libc::c_int) -> ExitStatus {
        let mut child = self.child.take().expect("stop: the daemon is not running");
        signal(&child, sig);
        match wait_timeout(&mut child, STOP_TIMEOUT) {
            Some(status) => status,
            None => {
                signal(&child, libc::SIGKILL);
                let _ = child.wait();
                panic!(
                    "spillway did not exit within {STOP_TIMEOUT:?} of signal {sig}; stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// Whether the process is still alive (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            None => false,
            Some(c) => c.try_wait().expect("try_wait").is_none(),
        }
    }

    /// Start the daemon if it will start, or collect its exit if it refuses
    /// (exits within `timeout` without ever answering a health check).
    pub fn run_to_exit_or_start(&mut self, timeout: Duration) -> StartOrExit {
        self.run_to_exit_or_start_with(timeout, |_| {})
    }

    /// Like [`Daemon::run_to_exit_or_start`], with `adjust` applied to the
    /// command before it is spawned (resource limits through `pre_exec`,
    /// extra environment, ...).
    pub fn run_to_exit_or_start_with(
        &mut self,
        timeout: Duration,
        adjust: impl FnOnce(&mut Command),
    ) -> StartOrExit {
        assert!(self.child.is_none(), "the daemon is already running");
        self.runs += 1;
        let mut cmd = self.command();
        adjust(&mut cmd);
        self.child = Some(cmd.spawn().expect("spawning spillway"));
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                return StartOrExit::Exited(Finished {
                    status,
                    stdout: self.stdout(),
                    stderr: self.stderr(),
                });
            }
            if self.stdout().contains("spillway listening on") && self.health_ok() {
                return StartOrExit::Started;
            }
            if Instant::now() >= deadline {
                self.kill9();
                panic!(
                    "spillway neither started nor exited within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Start the process and wait only until it says it listens: for a
    /// daemon that refuses the test's own connections (peer credentials),
    /// so no health check can be answered. Panics if it exits first.
    pub fn spawn_listening(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        self.runs += 1;
        self.child = Some(self.command().spawn().expect("spawning spillway"));
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.stdout().contains("spillway listening on") {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().expect("try_wait") {
                self.child = None;
                panic!(
                    "spillway exited during start-up with {status}; stderr:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "spillway did not listen within {START_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Like [`Daemon::spawn`], with `adjust` applied to the command first;
    /// panics (with the daemon's stderr) if it exits during start-up.
    pub fn spawn_with(&mut self, adjust: impl FnOnce(&mut Command)) {
        if let StartOrExit::Exited(f) = self.run_to_exit_or_start_with(START_TIMEOUT, adjust) {
            panic!(
                "spillway exited during start-up with {}; config:\n{}\nstderr:\n{}",
                f.status,
                self.config_text(),
                f.stderr
            );
        }
    }

    /// Path of the current (or last) run's stderr log file.
    pub fn stderr_log_path(&self) -> PathBuf {
        self.stderr_path()
    }

    /// Send `signal` to the running daemon.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.pid().expect("the daemon runs") as libc::pid_t;
        // SAFETY: kill(2) on our own, unreaped child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Process id of the running daemon.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Run `spillway run --config <this config>` in the foreground, expecting
    /// it to exit by itself within `timeout` (e.g. a refused config).
    pub fn run_to_exit(&self, timeout: Duration) -> Finished {
        run_spillway(
            &[
                "run".as_ref(),
                "--config".as_ref(),
                self.config_path.as_os_str(),
            ],
            timeout,
        )
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The temporary folder holding everything of this daemon.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn config_text(&self) -> String {
        fs::read_to_string(&self.config_path).unwrap_or_default()
    }

    fn stdout_path(&self) -> PathBuf {
        self.dir.path().join(format!("stdout-{}.log", self.runs))
    }

    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join(format!("stderr-{}.log", self.runs))
    }

    /// Standard output of the current (or last) run.
    /// `spillway ctl --config <this daemon's config> <args>`; panics (with
    /// the daemon's log) unless it exits 0.
    pub fn ctl(&self, args: &[&str]) -> String {
        run_ctl(self.config_path(), args, || self.stderr())
    }

    /// `spillway ctl health`'s text, its exit status checked against the
    /// verdict it prints (0: ready, 3: degraded, 1: not ready).
    pub fn health(&self) -> String {
        run_health(self.config_path(), || self.stderr())
    }

    /// `spillway ctl --json health`, its exit status checked against its
    /// `ready` and `status` (0: ready, 3: degraded, 1: not ready).
    pub fn health_json(&self) -> serde_json::Value {
        let config = self.config_path();
        let f = run_spillway(
            &[
                "ctl".as_ref(),
                "--config".as_ref(),
                config.as_os_str(),
                "--json".as_ref(),
                "health".as_ref(),
            ],
            Duration::from_secs(20),
        );
        let v: serde_json::Value =
            serde_json::from_str(&f.stdout).unwrap_or_else(|e| panic!("{e}: {f:?}"));
        let want = match (&v["ready"], v["status"].as_str()) {
            (serde_json::Value::Bool(true), Some("ready")) => 0,
            (serde_json::Value::Bool(true), Some("degraded")) => 3,
            _ => 1,
        };
        assert_eq!(
            f.status.code(),
            Some(want),
            "ctl --json health: the exit status against `ready` and `status`: {f:?}\ndaemon log:\n{}",
            self.stderr()
        );
        v
    }

    pub fn stdout(&self) -> String {
        read_lossy(&self.stdout_path())
    }

    /// Standard error (the log) of the current (or last) run, colours removed.
    pub fn stderr(&self) -> String {
        read_lossy(&self.stderr_path())
    }

    /// The port this run's metrics listener is bound to (configured as
    /// [`METRICS_ON_ANY_PORT`]; a restart may get another one).
    pub fn metrics_port(&self) -> u16 {
        metrics_port_in_log(&self.stderr()).unwrap_or_else(|| {
            panic!(
                "no admin.metrics_address line with a port in the daemon's log:\n{}",
                self.stderr()
            )
        })
    }

    /// A client connected to the socket, with [`IO_TIMEOUT`] on reads and writes.
    pub fn client(&self) -> Client {
        let mut c = Client::connect(&self.socket).unwrap_or_else(|e| {
            panic!("connecting to the daemon: {e}; stderr:\n{}", self.stderr())
        });
        c.set_timeout(Some(IO_TIMEOUT)).unwrap();
        c
    }

    /// A raw socket connected to the daemon.
    pub fn raw(&self) -> RawConn {
        RawConn::connect(&self.socket)
    }

    /// Shard folders present under the data dir, as (shard number, path), sorted.
    pub fn shard_dirs(&self) -> Vec<(u32, PathBuf)> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(&self.data) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return out,
            Err(e) => panic!("reading {}: {e}", self.data.display()),
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if let Some(n) = name
                .strip_prefix("shard-")
                .and_then(|n| n.parse::<u32>().ok())
            {
                out.push((n, path));
            }
        }
        out.sort();
        out
    }

    /// Every record of every shard, shard by shard, each shard in sequence order.
    pub fn read_shards(&self) -> Vec<(u32, Vec<StoredRecord>)> {
        self.shard_dirs()
            .into_iter()
            .map(|(n, dir)| {
                let recs = spillway_wab::read_shard(&spillway_wab::FsStorage, &dir)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
                (n, recs)
            })
            .collect()
    }

    /// Every record across all shards (shard 0's first, each shard in sequence order).
    pub fn read_all_records(&self) -> Vec<StoredRecord> {
        self.read_shards()
            .into_iter()
            .flat_map(|(_, r)| r)
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: plain kill(2) on our own child's pid; it has not been reaped
    // (we still own the Child), so the pid cannot have been reused.
    let rc = unsafe { libc::kill(pid, sig) };
    assert!(
        rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH),
        "kill({pid}, {sig}) failed"
    );
}

/// Payload of a stored record as text.
pub fn text(r: &StoredRecord) -> String {
    String::from_utf8_lossy(&r.payload).into_owned()
}

/// Payloads of records as text.
pub fn texts(recs: &[StoredRecord]) -> Vec<String> {
    recs.iter().map(text).collect()
}

/// A top-level counter of `ctl stats` (`KEY VALUE`).
pub fn stat(stats: &str, key: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("no {key} in ctl stats:\n{stats}"))
}

/// The top-level `ctl stats` counter `key` of `d` once it has reached
/// `want`, or as it is after 10 s. For a counter the daemon moves after the
/// client has already seen the effect: a refused TLS client gets the
/// server's alert before the refusal is counted, and reading the counter
/// at once raced with it (`tcp_door`, CI of 2026-12-04: `unknown_ca` read
/// 0). Comparing the result for equality still catches a count too high.
pub fn stat_reaching(d: &Daemon, key: &str, want: u64) -> u64 {
    let mut last = 0;
    wait_until(Duration::from_secs(10), || {
        last = stat(&d.ctl(&["stats", "--flat"]), key);
        last >= want
    });
    last
}

/// Sum over shards of a per-shard counter of `ctl stats`
/// (`shard{shard="N"}.KEY V`), or of a sink's counter over its shards and
/// every sink (`sink{sink="S",shard="N"}.KEY V`); panics if there is none.
pub fn shard_stat_sum(stats: &str, key: &str) -> u64 {
    let suffix = format!("}}.{key}");
    let mut found = false;
    let mut sum = 0;
    for line in stats.lines() {
        if let Some((name, value)) = line.split_once(' ') {
            let per_shard = name.starts_with("shard{")
                || (name.starts_with("sink{") && name.contains("shard="));
            if per_shard && name.ends_with(&suffix) {
                found = true;
                sum += value
                    .trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("stats line {line:?}"));
            }
        }
    }
    assert!(found, "no per-shard {key} in ctl stats:\n{stats}");
    sum
}

/// `spillway check` and `spillway run` on one config, with `env` set for
/// both: both refuse it with `want` in their stderr.
pub fn check_and_run_refuse(config: &str, env: &[(&str, &str)], want: &str) {
    let mut d = Daemon::configure(config);
    let check = Command::new(spillway_bin())
        .arg("check")
        .arg(d.config_path())
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .output()
        .expect("running spillway check");
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert!(
        !check.status.success() && stderr.contains(want),
        "check did not refuse with {want:?}:\n{}{stderr}",
        String::from_utf8_lossy(&check.stdout)
    );
    let run = d.run_to_exit_or_start_with(Duration::from_secs(60), |c| {
        c.envs(env.iter().copied());
    });
    let StartOrExit::Exited(run) = run else {
        panic!("run started on a config check refused with {want:?}");
    };
    assert!(
        !run.status.success() && run.stderr.contains(want),
        "run did not refuse with {want:?}:\n{}",
        run.stderr
    );
}
