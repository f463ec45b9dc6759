//! Helpers for the disk-fault tests (`faults_disk.rs`).
//!
//! - [`Tmpfs`]: a size-limited tmpfs mounted under a private temporary
//!   folder (real ENOSPC), unmounted on drop (lazily if it is still busy).
//! - [`fill_until_enospc`]: another process's file that takes every byte left.
//! - [`DiskDaemon`]: the real daemon with its data folder on a [`Tmpfs`]
//!   (or the test folder), started without waiting for a healthy answer:
//!   a daemon on a full disk answers health checks with a nack.
//! - [`SwitchProxy`]: a TCP forwarder on a fixed loopback port that can be
//!   taken down (listener closed, connections cut: "connection refused")
//!   and brought back on the same port, for real sink outages.
//!
//! Every wait here is bounded.

use std::fs::{self, File};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::*;
use tempfile::TempDir;

// ---------------------------------------------------------------- tmpfs

/// A tmpfs of a fixed size mounted at `<tempdir>/mnt` (mode 0700).
pub struct Tmpfs {
    mnt: PathBuf,
    mounted: bool,
    // Dropped after the unmount in `Drop::drop`.
    _dir: TempDir,
}

impl Tmpfs {
    /// Mount a tmpfs of `size_bytes` (needs root).
    pub fn mount(size_bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::Builder::new()
            .prefix("swfs")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).map_err(|e| format!("creating {}: {e}", mnt.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_bytes},mode=0700"))
            .arg("tmpfs")
            .arg(&mnt)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs -o size={size_bytes} tmpfs {} failed ({}): {}",
                mnt.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            mnt,
            mounted: true,
            _dir: dir,
        })
    }

    /// Mount one, or (outside CI only) print why not and return `None`.
    /// In CI a test that cannot mount fails.
    pub fn mount_or_skip(size_bytes: u64, test: &str) -> Option<Tmpfs> {
        match Tmpfs::mount(size_bytes) {
            Ok(t) => Some(t),
            Err(e) if in_ci() => panic!("{test} needs a tmpfs (root, mount): {e}"),
            Err(e) => {
                eprintln!("SKIPPED {test}: cannot mount a tmpfs (not root?): {e}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Bytes available on it now.
    pub fn free_bytes(&self) -> u64 {
        free_bytes(&self.mnt)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        let ok = Command::new("umount")
            .arg(&self.mnt)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Still busy (a process we could not reap?): detach it so no
            // mount is left behind; the kernel frees it once unused.
            let lazy = Command::new("umount").arg("-l").arg(&self.mnt).status();
            if !lazy.is_ok_and(|s| s.success()) {
                eprintln!("could not unmount {} (even lazily)", self.mnt.display());
                return;
            }
        }
        self.mounted = false;
    }
}

/// Bytes available to this user on the file system holding `path`.
pub fn free_bytes(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct to fill.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    assert_eq!(
        rc,
        0,
        "statvfs {}: {}",
        path.display(),
        io::Error::last_os_error()
    );
    st.f_bavail as u64 * st.f_frsize as u64
}

/// Write `path` until the file system refuses (ENOSPC); returns its size.
/// Afterwards not one block is free.
pub fn fill_until_enospc(path: &Path) -> u64 {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let big = vec![0x5au8; 1 << 20];
    let mut written = 0u64;
    // Big pieces first, then single pages, then bytes: a short write leaves
    // less than a piece, the next one fails.
    for piece in [big.len(), 4096, 1] {
        // At most the tmpfs sizes these tests use (a few GiB), piecewise.
        for _ in 0..(1u64 << 22) {
            match f.write(&big[..piece]) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
    }
    written
}

/// Write a file of `bytes` (must fit).
pub fn write_filler(path: &Path, bytes: u64) {
    let mut f = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    let chunk = vec![0xa5u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])
            .unwrap_or_else(|e| panic!("writing the filler {}: {e}", path.display()));
        left -= n as u64;
    }
}

/// Every file under `dir` (recursively) whose name ends with `suffix`.
pub fn files_ending_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(suffix))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Bytes allocated (blocks, not apparent size) by the files under `dir`.
pub fn allocated_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(m) = e.metadata() else { continue };
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

// ---------------------------------------------------------------- daemon

/// A daemon whose data folder may live on a [`Tmpfs`]. The config and the
/// folder (socket, admin socket, logs) come from [`Daemon::configure`]; the
/// process is started here, because [`Daemon::spawn`] waits for a healthy
/// health check and a daemon on a full disk rightly answers a nack.
///
/// Drop order: the process is killed, the test folder removed, then the
/// tmpfs unmounted.
pub struct DiskDaemon {
    child: Option<Child>,
    runs: usize,
    data_dir: PathBuf,
    pub d: Daemon,
    pub fs: Option<Tmpfs>,
}

/// Longest a start (until "spillway listening on") may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

impl DiskDaemon {
    /// Configure (without starting) a daemon with `overrides`; with a tmpfs
    /// its `data_dir` is `<tmpfs>/wab`.
    pub fn configure(fs: Option<Tmpfs>, overrides: &str) -> DiskDaemon {
        let (data_dir_override, data_dir) = match &fs {
            Some(t) => {
                let dir = t.path().join("wab");
                (
                    format!("[server]\ndata_dir = {:?}\n", dir.display().to_string()),
                    Some(dir),
                )
            }
            None => (String::new(), None),
        };
        let d = Daemon::configure(&format!("{overrides}\n{data_dir_override}"));
        let data_dir = data_dir.unwrap_or_else(|| d.data_dir().to_path_buf());
        DiskDaemon {
            child: None,
            runs: 0,
            data_dir,
            d,
            fs,
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn socket(&self) -> &Path {
        self.d.socket_path()
    }

    pub fn tmpfs(&self) -> &Tmpfs {
        self.fs.as_ref().expect("this daemon has no tmpfs")
    }

    fn log_path(&self, what: &str) -> PathBuf {
        self.d.dir().join(format!("disk-{what}-{}.log", self.runs))
    }

    /// Standard output of the current (or last) run.
    pub fn stdout(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(
            &fs::read(self.log_path("stdout")).unwrap_or_default(),
        ))
    }

    /// Standard error (the log) of the current (or last) run.
    pub fn stderr(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(
            &fs::read(self.log_path("stderr")).unwrap_or_default(),
        ))
    }

    /// Start the process; returns once it says it is listening and its
    /// socket accepts a connection. Panics (with its log) if it exits
    /// first or takes longer than [`START_TIMEOUT`].
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        self.runs += 1;
        let child = run_command(self.d.dir())
            .arg("--config")
            .arg(self.d.config_path())
            .stdout(File::create(self.log_path("stdout")).unwrap())
            .stderr(File::create(self.log_path("stderr")).unwrap())
            .spawn()
            .expect("spawning spillway");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!(
                    "spillway exited during start-up (run {}) with {status}; stderr:\n{}",
                    self.runs,
                    self.stderr()
                );
            }
            if self.stdout().contains("spillway listening on")
                && std::os::unix::net::UnixStream::connect(self.socket()).is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "spillway did not start listening within {START_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let child = self.child.as_ref().expect("the daemon is not running");
        // SAFETY: kill(2) on our own unreaped child.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.take().unwrap().wait();
    }

    /// SIGTERM; the exit status within 20 s (SIGKILL and panic otherwise).
    pub fn terminate_status(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().unwrap();
        match wait_timeout(&mut child, Duration::from_secs(20)) {
            Some(s) => s,
            None => {
                // SAFETY: as in `signal`.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
                let _ = child.wait();
                panic!(
                    "spillway did not exit within 20 s of SIGTERM; stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// SIGTERM; asserts a clean exit (status 0).
    pub fn terminate(&mut self) {
        let s = self.terminate_status();
        assert!(
            s.success(),
            "spillway exited with {s} after SIGTERM (expected 0); stderr:\n{}",
            self.stderr()
        );
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// A client with [`IO_TIMEOUT`] on reads and writes.
    pub fn client(&self) -> Client {
        let mut c = Client::connect(self.socket()).unwrap_or_else(|e| {
            panic!("connecting to the daemon: {e}; stderr:\n{}", self.stderr())
        });
        c.set_timeout(Some(IO_TIMEOUT)).unwrap();
        c
    }

    pub fn raw(&self) -> RawConn {
        RawConn::connect(self.socket())
    }

    /// `spillway ctl --config <config> <args>`; panics unless it exits 0.
    pub fn ctl(&self, args: &[&str]) -> String {
        run_ctl(self.d.config_path(), args, || self.stderr())
    }

    /// `ctl health`'s text (its exit status checked against its verdict).
    pub fn health_text(&self) -> String {
        run_health(self.d.config_path(), || self.stderr())
    }

    /// `ctl health` as (shard, state word, whole line).
    pub fn health(&self) -> Vec<(u32, String, String)> {
        shard_states(&self.health_text())
    }

    /// Poll `ctl health` (every 100 ms) until every shard is in `state`;
    /// returns how long it took, or panics after `timeout` with the last
    /// answer and the log.
    pub fn wait_all_shards(&self, state: &str, timeout: Duration) -> Duration {
        wait_all_shards_in(
            state,
            timeout,
            Duration::from_millis(100),
            || self.health_text(),
            || tail(&self.stderr(), 40),
        )
    }

    /// Every record of every shard folder under the data dir, read with
    /// the WAB's own reader.
    pub fn read_wab(&self) -> Vec<(u32, Vec<StoredRecord>)> {
        let mut out = Vec::new();
        let Ok(entries) = fs::read_dir(&self.data_dir) else {
            return out;
        };
        let mut dirs: Vec<(u32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                let n = name.strip_prefix("shard-")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        dirs.sort();
        for (n, dir) in dirs {
            let recs = spillway_wab::read_shard(&spillway_wab::FsStorage, &dir)
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
            out.push((n, recs));
        }
        out
    }
}

impl Drop for DiskDaemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------- proxy

struct Up {
    stop: Arc<AtomicBool>,
    acceptor: thread::JoinHandle<()>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

/// A TCP forwarder `127.0.0.1:port` → `upstream` that can go down (the
/// listener closed and every forwarded connection cut, so the sink sees
/// "connection refused") and come back on the same port.
pub struct SwitchProxy {
    port: u16,
    upstream: SocketAddr,
    up: Mutex<Option<Up>>,
}

impl SwitchProxy {
    /// Start it up, on a free port.
    pub fn start(upstream: SocketAddr) -> SwitchProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy");
        let port = listener.local_addr().unwrap().port();
        let p = SwitchProxy {
            port,
            upstream,
            up: Mutex::new(None),
        };
        p.serve(listener);
        p
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ingest", self.port)
    }

    fn serve(&self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (s, c, upstream) = (stop.clone(), conns.clone(), self.upstream);
        let acceptor = thread::Builder::new()
            .name("switch-proxy".into())
            .spawn(move || accept_loop(listener, upstream, s, c))
            .unwrap();
        *self.up.lock().unwrap() = Some(Up {
            stop,
            acceptor,
            conns,
        });
    }

    /// Close the listener and cut every connection.
    pub fn down(&self) {
        let Some(up) = self.up.lock().unwrap().take() else {
            return;
        };
        up.stop.store(true, Ordering::Release);
        let _ = up.acceptor.join();
        for c in up.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listen again on the same port (retrying the bind for up to 5 s).
    pub fn up(&self) {
        assert!(self.up.lock().unwrap().is_none(), "the proxy is already up");
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("re-binding the proxy on port {}: {e}", self.port),
            }
        };
        self.serve(listener);
    }
}

impl Drop for SwitchProxy {
    fn drop(&mut self) {
        self.down();
    }
}

fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
) {
    while !stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((client, _)) => {
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(2))
                else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                {
                    let mut list = conns.lock().unwrap();
                    list.push(c3);
                    list.push(s3);
                }
                thread::spawn(move || pump(client, server));
                thread::spawn(move || pump(s2, c2));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(2)),
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

/// Copy `from` → `to` until either side ends; then cut both.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
