//! The daemons a bench runs against: start the current executable as
//! `spillway run --config <tmp.toml>` in a fresh folder, wait for its socket
//! to answer a health check, stop it with SIGTERM; plus resident-memory
//! sampling from `/proc/<pid>/status` and read-byte counts from
//! `/proc/<pid>/io`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spillway_client::Client;

use sink_sdk::units::GIB;
/// No drain yet: records accumulate, so the bench daemon gets a big WAB.
const WAB_BYTES_MAX: u64 = 8 * GIB;
const INFLIGHT_RECORDS_MAX: u32 = 4096;
/// Start-up zero-fills the first segment of every shard; allow for a slow disk.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start bench daemons: the executable, where their folders go, and
/// the config knobs the bench varies.
#[derive(Debug, Clone)]
pub struct Launcher {
    pub exe: PathBuf,
    pub parent: PathBuf,
    /// `server.shards` (0 = one per core).
    pub shards: u32,
    /// `wab.segment_bytes_max` (`None` = the daemon's default).
    pub segment_bytes: Option<u64>,
}

/// What one daemon changes from the launcher's settings.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `wab.segment_bytes_max`, instead of the launcher's.
    pub segment_bytes: Option<u64>,
    /// The body of the `[sink]` table, instead of [`NOOP_SINK`].
    pub sink_toml: Option<String>,
    /// Named sinks instead of `[sink]`: one `[sinks.NAME]` table per
    /// (name, body), in this order. Takes precedence over `sink_toml`.
    pub named_sinks: Vec<(String, String)>,
    /// `server.connection_read_timeout_ms` (`None` = the daemon's default).
    pub read_timeout_ms: Option<u64>,
    /// `server.connections_max` (`None` = the daemon's default).
    pub connections_max: Option<u32>,
    /// `server.http.listen` for the HTTP door, in the clear on loopback
    /// (`None` = the door is off).
    pub http_listen: Option<String>,
    /// `[server.tcp]` with TLS: its address, certificate and key.
    pub tcp_tls: Option<(String, PathBuf, PathBuf)>,
    /// `wab.wab_bytes_max`, instead of the bench's 8 GiB.
    pub wab_bytes_max: Option<u64>,
}

/// Ingest scenarios measure the daemon, not a sink: records are drained and
/// confirmed by the noop sink, so the WAB does not grow without bound.
pub const NOOP_SINK: &str = "type = \"noop\"\n";

/// The sink section of a config: one `[sink]` table with this body.
pub fn single_sink_section(body: &str) -> String {
    format!("[sink]\n{body}")
}

/// The sink section of a config: one `[sinks.NAME]` table per (name,
/// body), in order. A name is 1-32 of `a-z 0-9 _ -` (the daemon's rule).
pub fn named_sinks_section(sinks: &[(String, String)]) -> String {
    assert!(!sinks.is_empty(), "a named sink section needs a sink");
    let mut text = String::new();
    for (name, body) in sinks {
        let valid = (1..=32).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        assert!(valid, "sink name {name:?}: 1-32 of a-z 0-9 _ -");
        text.push_str(&format!("[sinks.{name}]\n{body}\n"));
    }
    text
}

impl Launcher {
    /// Whether the daemon being benchmarked accepts this `[sink]` body
    /// (`spillway check` on a config that has it): `Err` carries its reason.
    pub fn check_sink(&self, sink_toml: &str) -> Result<(), String> {
        let dir = tempfile::Builder::new()
            .prefix("check-")
            .tempdir_in(&self.parent)
            .map_err(|e| format!("creating a folder in {}: {e}", self.parent.display()))?;
        let config = dir.path().join("check.toml");
        std::fs::write(&config, format!("[sink]\n{sink_toml}"))
            .map_err(|e| format!("writing {}: {e}", config.display()))?;
        // In the temporary folder: `check` builds the sink, and a sink's
        // relative paths (a file plugin's output) land there, not here.
        let out = Command::new(&self.exe)
            .arg("check")
            .arg(&config)
            .current_dir(dir.path())
            .output()
            .map_err(|e| format!("running {} check: {e}", self.exe.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// Starts a daemon in a new folder `<parent>/<label>-XXXX` (also its
    /// working folder, so any relative default path lands there too).
    pub fn start(&self, label: &str, overrides: &Overrides) -> Result<BenchDaemon, String> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{label}-"))
            .tempdir_in(&self.parent)
            .map_err(|e| format!("creating a daemon folder in {}: {e}", self.parent.display()))?;
        let config = dir.path().join("bench.toml");
        let socket = dir.path().join("spillway.sock");
        let sinks = if overrides.named_sinks.is_empty() {
            single_sink_section(overrides.sink_toml.as_deref().unwrap_or(NOOP_SINK))
        } else {
            named_sinks_section(&overrides.named_sinks)
        };
        let settings = DaemonSettings {
            dir: dir.path(),
            shards: self.shards,
            segment_bytes: overrides.segment_bytes.or(self.segment_bytes),
            sinks,
            read_timeout_ms: overrides.read_timeout_ms,
            connections_max: overrides.connections_max,
            http_listen: overrides.http_listen.clone(),
            tcp_tls: overrides.tcp_tls.clone(),
            wab_bytes_max: overrides.wab_bytes_max.unwrap_or(WAB_BYTES_MAX),
        };
        let config_head = settings.config_head();
        let text = settings.config_text();
        std::fs::write(&config, text).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let child = spawn(&self.exe, &config, dir.path())?;
        let admin_socket = dir.path().join("admin.sock");
        let mut daemon = BenchDaemon {
            child,
            exe: self.exe.clone(),
            socket,
            admin_socket,
            config,
            config_head,
            stopped: false,
            dir,
        };
        daemon.wait_ready()?;
        Ok(daemon)
    }
}

fn toml_str(path: &Path) -> String {
    toml::Value::String(path.display().to_string()).to_string()
}

/// A bench daemon's whole config file with these knobs, for the daemon's
/// own test that every config the bench writes is one it accepts.
pub fn config_text(dir: &Path, segment_bytes: Option<u64>, read_timeout_ms: Option<u64>) -> String {
    DaemonSettings {
        dir,
        shards: 2,
        segment_bytes,
        sinks: single_sink_section(NOOP_SINK),
        read_timeout_ms,
        connections_max: None,
        http_listen: None,
        tcp_tls: None,
        wab_bytes_max: WAB_BYTES_MAX,
    }
    .config_text()
}

/// Everything the bench daemon's configuration file says.
struct DaemonSettings<'a> {
    dir: &'a Path,
    shards: u32,
    segment_bytes: Option<u64>,
    /// The sink tables: [`single_sink_section`] or [`named_sinks_section`].
    sinks: String,
    read_timeout_ms: Option<u64>,
    connections_max: Option<u32>,
    http_listen: Option<String>,
    tcp_tls: Option<(String, PathBuf, PathBuf)>,
    wab_bytes_max: u64,
}

impl DaemonSettings<'_> {
    fn config_text(&self) -> String {
        format!("{}{}", self.config_head(), self.sinks)
    }

    /// Everything before the sink tables (they come last, so a scenario can
    /// rewrite them for a reload).
    fn config_head(&self) -> String {
        let segment = self
            .segment_bytes
            .map(|b| format!("segment_bytes_max = {b}\n"))
            .unwrap_or_default();
        let read_timeout = self
            .read_timeout_ms
            .map(|ms| format!("connection_read_timeout_ms = {ms}\n"))
            .unwrap_or_default()
            + &self
                .connections_max
                .map(|n| format!("connections_max = {n}\n"))
                .unwrap_or_default();
        let http = self
            .http_listen
            .as_ref()
            .map(|a| format!("[server.http]\nlisten = \"{a}\"\ntls = false\n"))
            .unwrap_or_default();
        let tcp = self
            .tcp_tls
            .as_ref()
            .map(|(a, cert, key)| {
                format!(
                    "[server.tcp]\nlisten = \"{a}\"\ncert_file = {}\nkey_file = {}\n",
                    toml_str(cert),
                    toml_str(key)
                )
            })
            .unwrap_or_default();
        format!(
            "# written by `spillway bench`\n[server]\nsocket_path = {}\ndata_dir = {}\nshards = {}\n\
             inflight_records_max = {INFLIGHT_RECORDS_MAX}\n{read_timeout}{http}{tcp}\n[wab]\n{segment}wab_bytes_max = {}\n\n\
             [log]\nlevel = \"warn\"\n\n[admin]\nsocket_path = {}\n\n",
            toml_str(&self.dir.join("spillway.sock")),
            toml_str(&self.dir.join("wab")),
            self.shards,
            self.wab_bytes_max,
            toml_str(&self.dir.join("admin.sock")),
        )
    }
}

fn spawn(exe: &Path, config: &Path, dir: &Path) -> Result<Child, String> {
    let log = dir.join("daemon.log");
    let out = File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    Command::new(exe)
        .arg("run")
        .arg("--config")
        .arg(config)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        // The HTTP sink honours proxy variables; the bench's receivers are on loopback.
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting {} run: {e}", exe.display()))
}

/// A daemon started by the bench; stopped (SIGTERM) and its folder deleted
/// when dropped.
#[derive(Debug)]
pub struct BenchDaemon {
    child: Child,
    /// What it runs (for a restart).
    exe: PathBuf,
    socket: PathBuf,
    admin_socket: PathBuf,
    /// The config file the daemon was started with (`ctl reload` re-reads it).
    config: PathBuf,
    /// Its text before the sink tables.
    config_head: String,
    stopped: bool,
    /// Declared last: removed after the daemon has stopped.
    dir: tempfile::TempDir,
}

impl BenchDaemon {
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn admin_socket(&self) -> &Path {
        &self.admin_socket
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The daemon's folder (also its working folder).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Rewrites the config file with one `[sink]` of this body in place of
    /// its sink tables (for a reload).
    pub fn rewrite_sink(&self, sink_toml: &str) -> Result<(), String> {
        let text = format!("{}{}", self.config_head, single_sink_section(sink_toml));
        // Write then rename, so the daemon never reads a half-written file.
        let tmp = self.config.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.config).map_err(|e| {
            format!(
                "renaming {} to {}: {e}",
                tmp.display(),
                self.config.display()
            )
        })
    }

    /// The last lines of the daemon's log, for error messages.
    pub fn log_excerpt(&self) -> String {
        self.log_tail()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        strip_ansi(&lines[lines.len().saturating_sub(10)..].join("\n"))
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        self.wait_answer("start-up", Duration::from_millis(20), |socket| {
            health(socket).is_ok()
        })
    }

    /// Polls `answers` every `poll` until it is true (Ok), the daemon exits
    /// or [`READY_TIMEOUT`] passes (Err with the log's tail); `during`
    /// names the wait in those errors.
    fn wait_answer(
        &mut self,
        during: &str,
        poll: Duration,
        answers: impl Fn(&Path) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stopped = true;
                return Err(format!(
                    "the daemon exited during {during} ({status}):\n{}",
                    self.log_tail()
                ));
            }
            if answers(&self.socket) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the daemon did not answer within {READY_TIMEOUT:?} of its {during}:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(poll);
        }
    }

    /// `Err` with the exit status and the log's tail if the daemon has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                self.stopped = true;
                Err(format!(
                    "the daemon exited ({status}); its log ends:\n{}",
                    self.log_tail()
                ))
            }
            Err(e) => Err(format!("checking on the daemon: {e}")),
        }
    }

    /// Stop the daemon (SIGTERM, a clean stop) and start it again on the
    /// same folder and config: how long from the new process's spawn until
    /// a Sync push of `probe` is acknowledged. `between` runs while no
    /// daemon is running (dropping the page cache, say).
    pub fn restart_timed(
        &mut self,
        probe: &[u8],
        between: impl FnOnce() -> Result<(), String>,
    ) -> Result<Duration, String> {
        self.stop_inner()?;
        between()?;
        let spawned = Instant::now();
        self.child = spawn(&self.exe, &self.config, self.dir.path())?;
        self.stopped = false;
        self.wait_answer("restart", Duration::from_millis(2), |socket| {
            Client::connect(socket)
                .and_then(|mut c| c.push(spillway_protocol::Tier::Sync, probe))
                .is_ok()
        })?;
        Ok(spawned.elapsed())
    }

    /// SIGTERM, then wait; SIGKILL if it has not exited within the timeout.
    pub fn stop(mut self) -> Result<(), String> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!("daemon exited with {status}:\n{}", self.log_tail()))
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("waiting for the daemon: {e}")),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!(
            "daemon did not stop within {STOP_TIMEOUT:?} of SIGTERM; killed"
        ))
    }
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            super::progress::line(&format!("stopping the daemon: {e}"));
        }
    }
}

/// Drops terminal colour sequences (`ESC [ ... m`) from a log excerpt.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            out.push(c);
        }
    }
    out
}

/// One health check on a fresh connection.
pub fn health(socket: &Path) -> Result<(), String> {
    let mut client = Client::connect(socket).map_err(|e| e.to_string())?;
    client
        .set_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    client
        .health()
        .map_err(|e| format!("health check on {}: {e}", socket.display()))
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes a process has read with read(2), pread(2) and the like (its
/// segment reads, but also its sockets'): `rchar` of `/proc/<pid>/io`.
/// `None` where that file cannot be read.
pub fn read_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    parse_rchar(&io)
}

fn parse_rchar(io: &str) -> Option<u64> {
    let line = io.lines().find(|l| l.starts_with("rchar:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples a process's VmRSS on a thread and keeps the peak.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<u64>,
}

impl RssSampler {
    pub fn start(pid: u32, every: Duration) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                std::thread::sleep(every);
            }
            peak.max(rss_kib(pid).unwrap_or(0))
        });
        RssSampler { stop, handle }
    }

    /// Stops sampling; the peak VmRSS seen, in KiB.
    pub fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_text_is_valid_with_the_bench_knobs() {
        let dir = Path::new("/tmp/a b");
        let settings = DaemonSettings {
            dir,
            shards: 2,
            segment_bytes: Some(1 << 20),
            sinks: single_sink_section(NOOP_SINK),
            read_timeout_ms: Some(1000),
            connections_max: None,
            http_listen: None,
            tcp_tls: None,
            wab_bytes_max: WAB_BYTES_MAX,
        };
        let text = settings.config_text();
        let value: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            value["server"]["socket_path"].as_str(),
            Some("/tmp/a b/spillway.sock")
        );
        assert_eq!(
            value["server"]["inflight_records_max"].as_integer(),
            Some(4096)
        );
        assert_eq!(
            value["wab"]["segment_bytes_max"].as_integer(),
            Some(1 << 20)
        );
        assert_eq!(value["log"]["level"].as_str(), Some("warn"));
        assert_eq!(
            value["server"]["connection_read_timeout_ms"].as_integer(),
            Some(1000)
        );
        assert_eq!(value["sink"]["type"].as_str(), Some("noop"));
        assert_eq!(text, config_text(dir, Some(1 << 20), Some(1000)));
        let with_door = DaemonSettings {
            dir,
            shards: 2,
            segment_bytes: None,
            sinks: single_sink_section(NOOP_SINK),
            read_timeout_ms: None,
            connections_max: None,
            http_listen: Some("127.0.0.1:7071".into()),
            tcp_tls: None,
            wab_bytes_max: WAB_BYTES_MAX,
        }
        .config_text();
        let door: toml::Value = toml::from_str(&with_door).unwrap();
        assert_eq!(
            door["server"]["http"]["listen"].as_str(),
            Some("127.0.0.1:7071")
        );
        assert_eq!(door["server"]["http"]["tls"].as_bool(), Some(false));
        let default = DaemonSettings {
            segment_bytes: None,
            read_timeout_ms: None,
            connections_max: None,
            ..settings
        }
        .config_text();
        assert!(!default.contains("segment_bytes_max"));
        assert!(!default.contains("connection_read_timeout_ms"));
    }

    #[test]
    fn named_sinks_are_tables_of_their_own() {
        let sinks = vec![
            ("a".to_string(), NOOP_SINK.to_string()),
            (
                "b-2".to_string(),
                "type = \"file\"\npath = \"x\"\n".to_string(),
            ),
        ];
        let text = format!(
            "{}{}",
            DaemonSettings {
                dir: Path::new("/tmp/x"),
                shards: 2,
                segment_bytes: None,
                sinks: String::new(),
                read_timeout_ms: None,
                connections_max: None,
                http_listen: None,
                tcp_tls: None,
                wab_bytes_max: WAB_BYTES_MAX,
            }
            .config_head(),
            named_sinks_section(&sinks)
        );
        let value: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(value["sinks"]["a"]["type"].as_str(), Some("noop"));
        assert_eq!(value["sinks"]["b-2"]["path"].as_str(), Some("x"));
        assert!(value.get("sink").is_none());
    }

    #[test]
    #[should_panic(expected = "sink name")]
    fn a_sink_name_outside_the_daemon_rule_is_a_bench_bug() {
        named_sinks_section(&[("A".to_string(), NOOP_SINK.to_string())]);
    }

    #[test]
    fn rchar_of_proc_io() {
        let io = "rchar: 12345\nwchar: 7\nsyscr: 3\nread_bytes: 0\n";
        assert_eq!(parse_rchar(io), Some(12345));
        assert_eq!(parse_rchar("wchar: 1\n"), None);
        assert!(read_bytes(std::process::id()).is_some_and(|n| n > 0));
    }

    #[test]
    fn strips_colours() {
        assert_eq!(
            strip_ansi("\u{1b}[2mtime\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m x"),
            "time ERROR x"
        );
    }

    #[test]
    fn rss_of_this_process() {
        assert!(rss_kib(std::process::id()).unwrap() > 0);
    }
}
