//! Faults operators actually meet (issue 7), one test per fault, against
//! the real binary: a second daemon on the same data folder or socket, a
//! socket folder another user can write, a closed log pipe, a low file
//! descriptor limit, idle connections holding the connection cap, stalled
//! huge frames, a PushBatch of millions of tiny records, memory left
//! behind by a burst of big batches, and the log of a normal run (it must
//! say nothing alarming).
//!
//! Memory figures are printed (run with `--nocapture` to see them).

use std::fs;
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

use sink_sdk::units::MIB;

// ---------------------------------------------------------------- helpers

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().trim_end_matches("kB").trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status:\n{status}"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A client whose health check was answered, retried until `timeout` (a
/// connection the daemon has not yet noticed closing may still count
/// against `connections_max`).
fn connect_healthy(d: &Daemon, timeout: Duration) -> Client {
    let mut last = String::new();
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match Client::connect(d.socket_path()) {
            Ok(mut c) => {
                c.set_timeout(Some(Duration::from_secs(2))).unwrap();
                match c.health() {
                    Ok(()) => {
                        c.set_timeout(Some(IO_TIMEOUT)).unwrap();
                        return c;
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "no healthy connection within {timeout:?}: {last}; daemon log:\n{}",
        d.stderr()
    );
}

/// A raw connection whose health check was answered (retried like
/// [`connect_healthy`]).
fn raw_healthy(d: &Daemon, timeout: Duration) -> RawConn {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(stream) = UnixStream::connect(d.socket_path()) {
            stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
            let mut c = RawConn { stream };
            if c.try_send(&health_frame()).is_ok() {
                if let ReadOutcome::Frame(f) = c.read_frame_within(Duration::from_secs(2)) {
                    assert_eq!(f, expected_health_response());
                    return c;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no healthy raw connection within {timeout:?}; daemon log:\n{}",
            d.stderr()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Connect without ever blocking: a full backlog is an error (EAGAIN), not
/// a wait.
fn connect_nonblocking(path: &Path) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket we own; the stream closes it on every path.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_un is valid; we fill family and path.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    assert!(bytes.len() < addr.sun_path.len(), "socket path too long");
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of at least `len` bytes.
    let rc = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stream)
}

/// Whether the daemon closed this (nonblocking) connection: EOF or reset.
fn closed_by_peer(mut s: &UnixStream) -> bool {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(_) => true,
    }
}

/// Log lines at WARN or ERROR level.
fn alarming_lines(log: &str) -> Vec<String> {
    strip_ansi(log)
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains("ERROR"))
        .map(str::to_string)
        .collect()
}

fn canonical(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.display()))
        .display()
        .to_string()
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", p.display()));
}

fn toml_str(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// Kills (SIGKILL) and reaps a hand-started daemon when dropped.
struct Reaper(Option<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------- 1. one owner

#[test]
fn two_daemons_on_one_data_folder() {
    let mut a = Daemon::start("");
    let a_pid = a.pid().unwrap();
    let mut ca = a.client();
    ca.push(Tier::Sync, b"a-before").unwrap();

    // B: the same data folder, its own socket and admin socket.
    let data = a.data_dir().to_path_buf();
    let mut b = Daemon::configure(&format!("[server]\ndata_dir = {}\n", toml_str(&data)));
    let t = Instant::now();
    let out = b.run_to_exit(Duration::from_secs(20));
    let took = t.elapsed();
    assert!(
        !out.status.success(),
        "a second daemon started on a data folder in use: {out:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the second daemon took {took:?} to give up (expected: at once)"
    );
    assert!(
        out.stderr.contains(&data.display().to_string()),
        "the refusal does not name the data folder {}:\n{}",
        data.display(),
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("pid {a_pid}")),
        "the refusal does not name the holder's pid {a_pid}:\n{}",
        out.stderr
    );
    assert!(!out.stdout.contains("listening on"), "{}", out.stdout);
    assert!(
        !b.socket_path().exists(),
        "the refused daemon bound its socket"
    );

    // A keeps serving, on its old connection and on new ones.
    ca.push(Tier::Sync, b"a-after-b").unwrap();
    let mut fresh = a.client();
    fresh.health().unwrap();
    fresh.push(Tier::Sync, b"a-fresh").unwrap();
    drop((ca, fresh));

    // Once A is gone the folder is free: B starts on it and sees A's records.
    a.terminate();
    b.spawn();
    let mut cb = b.client();
    cb.push(Tier::Sync, b"b-after-a").unwrap();
    drop(cb);
    let mut got = texts(&a.read_all_records());
    got.sort();
    assert_eq!(got, ["a-after-b", "a-before", "a-fresh", "b-after-a"]);
    b.terminate();

    // C: its own data folder, but A's socket path: refused, A unharmed.
    a.spawn();
    let a_socket = a.socket_path().to_path_buf();
    let c = Daemon::configure(&format!(
        "[server]\nsocket_path = {}\n",
        toml_str(&a_socket)
    ));
    let t = Instant::now();
    let out = c.run_to_exit(Duration::from_secs(20));
    let took = t.elapsed();
    assert!(
        !out.status.success(),
        "a daemon started on another daemon's live socket: {out:?}"
    );
    assert!(took < Duration::from_secs(5), "refusal took {took:?}");
    assert!(
        out.stderr.contains("already listening") || out.stderr.contains("owns the socket"),
        "the refusal says neither 'already listening' nor names the socket lock:\n{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&a_socket.display().to_string()),
        "the refusal does not name the socket {}:\n{}",
        a_socket.display(),
        out.stderr
    );
    let mut again = a.client();
    again.health().unwrap();
    again.push(Tier::Sync, b"a-after-c").unwrap();
    assert!(texts(&a.read_all_records()).contains(&"a-after-c".to_string()));
}

// ---------------------------------------------------------------- 2. socket folder

#[test]
fn socket_folder_writable_by_nobody_is_refused() {
    if !require_root("chown the socket folder to nobody (uid 65534)") {
        return;
    }
    let security = "docs/security.md";

    // a) The socket's folder belongs to nobody: nobody could replace the socket.
    let mut owned = Daemon::configure("");
    let run = owned.socket_path().parent().unwrap().to_path_buf();
    fs::create_dir(&run).unwrap();
    chmod(&run, 0o700);
    std::os::unix::fs::chown(&run, Some(65534), Some(65534)).unwrap();
    let out = owned.run_to_exit(Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "started with its socket in a folder owned by nobody: {out:?}"
    );
    assert!(
        out.stderr.contains(&canonical(&run)),
        "the refusal does not name the folder {}:\n{}",
        run.display(),
        out.stderr
    );
    assert!(out.stderr.contains(security), "{}", out.stderr);
    assert!(out.stderr.contains("65534"), "{}", out.stderr);
    assert!(!owned.socket_path().exists(), "a socket was bound anyway");

    // b) A world-writable folder without the sticky bit above the socket's.
    let mut above = Daemon::configure("");
    let run2 = above.socket_path().parent().unwrap().to_path_buf();
    fs::create_dir(&run2).unwrap();
    chmod(&run2, 0o700);
    chmod(above.dir(), 0o777);
    let out = above.run_to_exit(Duration::from_secs(20));
    assert!(
        !out.status.success(),
        "started below a world-writable folder without the sticky bit: {out:?}"
    );
    assert!(
        out.stderr.contains(&canonical(above.dir())),
        "the refusal does not name the folder {}:\n{}",
        above.dir().display(),
        out.stderr
    );
    assert!(out.stderr.contains("sticky"), "{}", out.stderr);
    assert!(out.stderr.contains(security), "{}", out.stderr);
    assert!(!above.socket_path().exists(), "a socket was bound anyway");

    // c) The operator accepts the risk: it starts, and warns naming the folder.
    let (run_folder, above_folder) = (canonical(&run), canonical(above.dir()));
    for (d, folder) in [(&mut owned, run_folder), (&mut above, above_folder)] {
        d.reconfigure("[server]\nallow_insecure_socket_dir = true\n");
        d.spawn();
        let mut c = d.client();
        c.push(Tier::Sync, b"insecure-but-allowed").unwrap();
        let log = d.stderr();
        assert!(
            log.lines().any(|l| l.contains(" WARN ")
                && l.contains(&folder)
                && l.contains("allow_insecure_socket_dir")),
            "no WARN naming {folder} and allow_insecure_socket_dir:\n{log}"
        );
        d.terminate();
    }

    // d) A root-owned 0700 folder inside /tmp (sticky, 1777) is fine, silently.
    let tmp_mode = fs::metadata("/tmp").unwrap().permissions().mode();
    assert_eq!(tmp_mode & 0o1000, 0o1000, "/tmp has no sticky bit here");
    let fine = Daemon::start("");
    let folder = fine.socket_path().parent().unwrap();
    assert_eq!(
        fs::metadata(folder).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    fine.client().push(Tier::Sync, b"fine").unwrap();
    let log = fine.stderr();
    assert!(
        !log.contains("allow_insecure_socket_dir"),
        "a safe folder was warned about:\n{log}"
    );
}

/// The hijack itself, when it happens anyway (say the folder was made
/// writable after the daemon started): the daemon notices within seconds
/// that its socket's name no longer leads to it, and says so loudly.
#[test]
fn a_socket_replaced_under_a_running_daemon_is_reported() {
    let d = Daemon::start("");
    let mut c = d.client();
    c.push(Tier::Sync, b"before").unwrap();
    fs::remove_file(d.socket_path()).unwrap();
    let impostor = std::os::unix::net::UnixListener::bind(d.socket_path()).unwrap();
    let noticed = wait_until(Duration::from_secs(10), || {
        d.stderr().contains("socket was removed or replaced")
    });
    assert!(
        noticed,
        "the replaced socket went unnoticed:\n{}",
        d.stderr()
    );
    let line = d
        .stderr()
        .lines()
        .find(|l| l.contains("socket was removed or replaced"))
        .unwrap()
        .to_string();
    assert!(line.contains("ERROR"), "{line}");
    assert_eq!(stat(&d.ctl(&["stats", "--flat"]), "socket_replaced"), 1);
    // The connection made before keeps working: it is this daemon's.
    c.push(Tier::Sync, b"after").unwrap();
    drop(impostor);
}

// ---------------------------------------------------------------- 3. closed log pipe

#[test]
fn closed_log_pipe_does_not_kill_the_daemon() {
    let d = Daemon::configure("[log]\nlevel = \"debug\"\n");
    let mut child = run_command(d.dir())
        .arg("--config")
        .arg(d.config_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting spillway");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut reaper = Reaper(Some(child));

    // Read stdout up to the "listening" line, then let the reader go (the
    // thread ends, closing the read end of the pipe).
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = io::BufReader::new(stdout).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if line.contains("spillway listening on") {
                let _ = tx.send(line);
                return;
            }
        }
    });
    let listening = rx
        .recv_timeout(START_TIMEOUT)
        .expect("no 'spillway listening on' line on stdout");
    reader.join().unwrap();
    assert!(answers_health(d.socket_path()), "{listening}");
    // Keep what stderr holds so far (for the record), then close it too.
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fd = stderr.as_raw_fd();
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut early = Vec::new();
    let _ = stderr.read_to_end(&mut early);
    drop(stderr);
    let early = String::from_utf8_lossy(&early).into_owned();
    assert!(
        !early.is_empty(),
        "the daemon wrote no log line before listening at debug level"
    );

    // A bad-magic frame: the daemon logs about it (into the closed pipe),
    // nacks it and closes that connection.
    let mut bad = RawConn::connect(d.socket_path());
    let mut f = push_frame(Tier::Sync, b"payload");
    f[..4].copy_from_slice(b"WEIX");
    let crc = crc32fast::hash(&f[..12]);
    f[12..16].copy_from_slice(&crc.to_le_bytes());
    bad.send(&f);
    bad.expect_frame(&expected_nack(NackReason::BadMagic), "BadMagic nack");
    bad.expect_closed();

    // Other clients come and go and get their acks.
    let mut expected = Vec::new();
    for c in 0..4 {
        let mut client = Client::connect(d.socket_path()).unwrap_or_else(|e| {
            panic!("connection {c} after the log pipe closed: {e}");
        });
        client.set_timeout(Some(IO_TIMEOUT)).unwrap();
        for i in 0..25 {
            let p = format!("after-close-{c}:{i}");
            client
                .push(Tier::Sync, p.as_bytes())
                .unwrap_or_else(|e| panic!("push {p} after the log pipe closed: {e}"));
            expected.push(p);
        }
        client.push_batch(Tier::Batched, &["b1", "b2"]).unwrap();
        expected.extend(["b1".to_string(), "b2".to_string()]);
    }
    let child = reaper.0.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the daemon died after its log pipe was closed"
    );
    // The log writes did fail (so this test did exercise the closed pipe).
    let stats = d.ctl(&["stats", "--flat"]);
    let failures = stat(&stats, "log_write_failures");
    eprintln!("closed log pipe: {failures} log writes dropped");
    assert!(
        failures > 0,
        "no failed log write counted: the test did not reach the closed pipe\n{stats}"
    );

    // SIGTERM: a clean exit, quickly, though every line it logs on the way fails.
    // SAFETY: kill(2) on our unreaped child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_timeout(child, Duration::from_secs(5));
    let status =
        status.expect("the daemon did not exit within 5 s of SIGTERM with its log pipe closed");
    reaper.0 = None;
    assert!(
        status.success(),
        "exit status {status} after SIGTERM with a closed log pipe"
    );
    let mut got = texts(&d.read_all_records());
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

// ---------------------------------------------------------------- 4. fd limit

#[test]
fn fd_exhaustion_under_a_low_ulimit() {
    // The default connections_max does not fit 256 descriptors: refused at
    // start, naming both numbers.
    let mut d = Daemon::configure("");
    match d.run_to_exit_or_start_with(Duration::from_secs(20), nofile_limit(256)) {
        StartOrExit::Started => panic!(
            "connections_max = 1024 was accepted with 256 descriptors; log:\n{}",
            d.stderr()
        ),
        StartOrExit::Exited(f) => {
            assert!(!f.status.success(), "{f:?}");
            assert!(
                f.stderr.contains("connections_max = 1024") && f.stderr.contains("256"),
                "the refusal does not name 1024 and 256:\n{}",
                f.stderr
            );
        }
    }

    // 150 connections, at the tightest limit the daemon accepts for them:
    // 150 + 64 + (8 per shard + 2 per sink x 1 sink) x 2 shards + 16 for
    // the admin socket's connections (admin.connections_max) = 250
    // descriptors.
    const MAX_CONN: u64 = 150;
    const LIMIT: u64 = MAX_CONN + 64 + (8 + 2) * 2 + 16;
    d.reconfigure("[server]\nconnections_max = 150\n");
    d.spawn_with(nofile_limit(LIMIT));
    let pid = d.pid().unwrap();
    let base_fds = fd_count(pid);
    let mut keeper = d.client();
    keeper.push(Tier::Sync, b"keeper-before").unwrap();

    // Far more connections than descriptors allow. Past the cap they are
    // closed at once; past the descriptors they wait in the backlog; past
    // the backlog connect fails (EAGAIN) without blocking us.
    let mut flood = Vec::new();
    let mut refused_at_connect = 0;
    for _ in 0..400 {
        match connect_nonblocking(d.socket_path()) {
            Ok(s) => flood.push(s),
            Err(_) => refused_at_connect += 1,
        }
    }
    thread::sleep(Duration::from_millis(1500));
    let peak_fds = fd_count(pid);
    let closed = flood.iter().filter(|s| closed_by_peer(s)).count();
    eprintln!(
        "fd limit {LIMIT}: daemon fds at start {base_fds}, under the flood {peak_fds}; \
         of 400 connects {refused_at_connect} refused at connect, {closed} closed by the daemon, {} open or queued",
        flood.len() - closed
    );
    assert!(d.is_running(), "the daemon died under the connection flood");

    // The existing connection is still served.
    for i in 0..20 {
        keeper
            .push(Tier::Sync, format!("keeper-{i}").as_bytes())
            .unwrap_or_else(|e| {
                panic!("push {i} on an existing connection under fd pressure: {e}")
            });
    }
    // Segment rotation still works (it needs descriptors): 6 MiB into 1 MiB segments.
    let sealed_before = sealed_segments(&d);
    let big = vec![b'r'; 64 * 1024];
    for batch in 0..6 {
        let recs: Vec<&[u8]> = (0..16).map(|_| &big[..]).collect();
        let n = keeper
            .push_batch(Tier::Sync, &recs)
            .unwrap_or_else(|e| panic!("batch {batch} (rotation) under fd pressure: {e}"));
        assert_eq!(n, 16);
    }
    let rotated = wait_until(Duration::from_secs(10), || {
        sealed_segments(&d) >= sealed_before + 4
    });
    let sealed_after = sealed_segments(&d);
    eprintln!("sealed segments: {sealed_before} before, {sealed_after} after 6 MiB");
    assert!(
        rotated,
        "segments did not rotate under fd pressure: {sealed_before} sealed before, {sealed_after} after 6 MiB \
         in 1 MiB segments; log:\n{}",
        d.stderr()
    );

    // The log stays small: a few "accept failed" lines, not thousands.
    let log_bytes = fs::metadata(d.stderr_log_path()).unwrap().len();
    let log = d.stderr();
    let accept_lines = log.lines().filter(|l| l.contains("accept failed")).count();
    eprintln!("log: {log_bytes} bytes, {accept_lines} 'accept failed' lines");
    assert!(
        log_bytes < 200 * 1024,
        "the log grew to {log_bytes} bytes under fd pressure"
    );
    assert!(
        accept_lines <= 10,
        "{accept_lines} 'accept failed' lines in a few seconds (at most one per second expected)"
    );
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "ERROR lines with 150 connections in a limit sized for them:\n{errors:#?}"
    );

    // Idle connections gone: new producers connect and push.
    drop(flood);
    for p in 0..5 {
        let mut c = connect_healthy(&d, Duration::from_secs(10));
        c.push(Tier::Sync, format!("after-flood-{p}").as_bytes())
            .unwrap_or_else(|e| panic!("producer {p} after the flood: {e}"));
    }
    keeper.push(Tier::Sync, b"keeper-after").unwrap();
    let stats = d.ctl(&["stats", "--flat"]);
    eprintln!(
        "accept_failures {}, connections_refused {}, connections_accepted {}",
        stat(&stats, "accept_failures"),
        stat(&stats, "connections_refused"),
        stat(&stats, "connections_accepted")
    );

    // The reserve held, so accept() never ran out above. Now run out for
    // real: lower the running daemon's limit to a few descriptors above
    // what it holds (as a descriptor leak elsewhere would), and flood again.
    // Only the daemon's own reserve is left (or accept() fails with
    // EMFILE): producers are refused, the loop pauses and logs at most
    // about one line per second, not spin and flood the log, and the
    // shards keep their descriptors (no ERROR from a segment it could not
    // open).
    assert!(
        wait_until(Duration::from_secs(10), || fd_count(pid) < base_fds + 20),
        "the daemon still holds {} descriptors after the flood closed (started with {base_fds})",
        fd_count(pid)
    );
    let tight = fd_count(pid) as u64 + 16;
    set_soft_nofile_of(pid, tight, LIMIT);
    let log_before = d
        .stderr()
        .lines()
        .filter(|l| l.contains("accept failed"))
        .count();
    let exhausted_at = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..400 {
        if let Ok(s) = connect_nonblocking(d.socket_path()) {
            flood.push(s);
        }
    }
    thread::sleep(Duration::from_secs(3));
    assert!(
        d.is_running(),
        "the daemon died with its descriptors exhausted"
    );
    keeper
        .push(Tier::Sync, b"keeper-exhausted")
        .unwrap_or_else(|e| {
            panic!("push on an existing connection with descriptors exhausted: {e}")
        });
    let secs = exhausted_at.elapsed().as_secs_f64();
    let log_bytes = fs::metadata(d.stderr_log_path()).unwrap().len();
    let accept_lines = d
        .stderr()
        .lines()
        .filter(|l| l.contains("accept failed"))
        .count()
        - log_before;
    eprintln!(
        "descriptors exhausted (limit {tight}, {} held): {} connects queued, {accept_lines} 'accept failed' \
         lines in {secs:.1} s, log {log_bytes} bytes",
        fd_count(pid),
        flood.len()
    );
    assert!(
        accept_lines <= secs.ceil() as usize + 2,
        "{accept_lines} 'accept failed' lines in {secs:.1} s (at most one per second promised)"
    );
    assert!(
        log_bytes < 200 * 1024,
        "the log grew to {log_bytes} bytes with descriptors exhausted"
    );
    // Descriptors free again (the limit back where it was, as an operator
    // would fix it): the queued connections are dealt with, new producers
    // get in, and rotation works.
    drop(flood);
    set_soft_nofile_of(pid, LIMIT, LIMIT);
    for p in 0..3 {
        let mut c = connect_healthy(&d, Duration::from_secs(10));
        c.push(Tier::Sync, format!("after-exhaustion-{p}").as_bytes())
            .unwrap_or_else(|e| panic!("producer {p} after the exhaustion: {e}"));
    }
    let sealed_before = sealed_segments(&d);
    for batch in 0..3 {
        let recs: Vec<&[u8]> = (0..16).map(|_| &big[..]).collect();
        keeper
            .push_batch(Tier::Sync, &recs)
            .unwrap_or_else(|e| panic!("batch {batch} after the exhaustion: {e}"));
    }
    assert!(
        wait_until(Duration::from_secs(10), || sealed_segments(&d) >= sealed_before + 2),
        "no rotation after the descriptors were freed ({sealed_before} sealed before, {} now); log:\n{}",
        sealed_segments(&d),
        d.stderr()
    );
    let stats = d.ctl(&["stats", "--flat"]);
    eprintln!(
        "after exhaustion: accept_failures {}",
        stat(&stats, "accept_failures")
    );
    assert!(
        stat(&stats, "accept_failures") > 0,
        "no accept failure counted: the test did not exhaust the descriptors\n{stats}"
    );
    let log = d.stderr();
    assert_eq!(
        shard_stat_sum(&stats, "up"),
        2,
        "a shard is down after fd pressure:\n{stats}"
    );
    let errors: Vec<String> = alarming_lines(&log)
        .into_iter()
        .filter(|l| l.contains("ERROR"))
        .collect();
    assert!(
        errors.is_empty(),
        "ERROR lines under fd pressure:\n{errors:#?}"
    );
    d.terminate();
    let got = texts(&d.read_all_records());
    for p in [
        "keeper-before",
        "keeper-19",
        "after-flood-4",
        "keeper-after",
    ] {
        assert!(got.iter().any(|g| g == p), "{p} missing from the WAB");
    }
}

// ---------------------------------------------------------------- 5. idle timeout

/// A producer that never reads its acks is closed after the idle timeout,
/// not the (short) read timeout: while it waits it costs nothing but its
/// unwritten acks, and closing it sooner only invites it to reconnect and
/// push another window of records. Until then it is served in order.
#[test]
fn a_peer_that_reads_no_acks_is_closed_at_the_idle_timeout_not_the_read_timeout() {
    let d = Daemon::start(
        "[server]\nshards = 1\nconnection_read_timeout_ms = 300\nconnection_idle_timeout_ms = 3000\n",
    );
    let mut all = Vec::new();
    for i in 0..40_000 {
        all.extend(push_frame(
            Tier::Buffered,
            format!("unread-{i:05}").as_bytes(),
        ));
    }
    // Stalled for 4 read timeouts, then read: still open, every ack in order.
    let patient = d.raw();
    let mut writer = patient.stream.try_clone().unwrap();
    let bytes = all.clone();
    let w = thread::spawn(move || writer.write_all(&bytes));
    thread::sleep(Duration::from_millis(1200));
    let mut patient = patient;
    for i in 0..40_000 {
        match patient.read_frame_within(Duration::from_secs(5)) {
            ReadOutcome::Frame(f) => assert_eq!(f, expected_ack(), "answer {i}"),
            other => panic!("answer {i}: {other:?} (closed at the read timeout?)"),
        }
    }
    w.join().unwrap().unwrap();
    patient.expect_health();

    // Never read: closed once the idle timeout has passed without progress.
    let t0 = Instant::now();
    let never = d.raw();
    let mut writer = never.stream.try_clone().unwrap();
    // The write blocks once the daemon stops reading, and fails when the
    // daemon closes the connection.
    let w = thread::spawn(move || writer.write_all(&all));
    let closed = wait_until(Duration::from_secs(15), || {
        stat(&d.ctl(&["stats", "--flat"]), "write_timeouts") == 1
    });
    let after = t0.elapsed();
    assert!(closed, "a peer reading no acks was not closed within 15 s");
    assert!(
        after >= Duration::from_millis(2900),
        "closed after {after:?}, before the 3 s idle timeout"
    );
    assert!(
        w.join().unwrap().is_err(),
        "the never-reader's write did not fail"
    );
    drop(never);
}

#[test]
fn idle_connections_time_out() {
    let d = Daemon::start("[server]\nconnection_idle_timeout_ms = 1000\n");
    let mut idle = raw_healthy(&d, Duration::from_secs(5));
    let t0 = Instant::now();
    // A connection that pushes every 300 ms is never idle for 1 s.
    let mut busy = d.client();
    let pusher = thread::spawn(move || {
        for i in 0..12 {
            busy.push(Tier::Sync, format!("busy-{i}").as_bytes())
                .map_err(|e| format!("push {i} on a busy connection: {e}"))?;
            thread::sleep(Duration::from_millis(300));
        }
        busy.health().map_err(|e| format!("health at the end: {e}"))
    });
    match idle.read_frame_within(Duration::from_secs(5)) {
        ReadOutcome::Closed => {}
        other => {
            panic!("an idle connection was not closed within 5 s of a 1 s idle timeout: {other:?}")
        }
    }
    let after = t0.elapsed();
    eprintln!("idle connection closed after {after:?}");
    assert!(
        after >= Duration::from_millis(900),
        "closed after {after:?}, before the 1 s idle timeout"
    );
    assert!(
        after <= Duration::from_secs(3),
        "closed only after {after:?} (1 s idle timeout)"
    );
    pusher
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}: a busy connection was closed as idle"));

    // Idle holders of every slot are timed out, letting a new producer in
    // (eviction off: this is about the idle timeout; idle_eviction.rs is
    // about evicting them sooner).
    let d = Daemon::start(
        "[server]\nconnection_idle_timeout_ms = 1000\nconnections_max = 4\nevict_idle_connections = false\n",
    );
    let mut holders: Vec<RawConn> = (0..4)
        .map(|_| raw_healthy(&d, Duration::from_secs(5)))
        .collect();
    let t1 = Instant::now();
    let mut fifth = d.raw();
    let _ = fifth.try_send(&health_frame());
    match fifth.read_frame_within(Duration::from_secs(2)) {
        ReadOutcome::Closed => {}
        other => panic!("a 5th connection with 4 of 4 slots held was not refused: {other:?}"),
    }
    assert!(
        t1.elapsed() < Duration::from_millis(900),
        "the refusal took {:?}: the holders may have timed out meanwhile",
        t1.elapsed()
    );
    for (i, h) in holders.iter_mut().enumerate() {
        match h.read_frame_within(Duration::from_secs(4)) {
            ReadOutcome::Closed => {}
            other => panic!("idle holder {i} was not closed: {other:?}"),
        }
    }
    let mut c = connect_healthy(&d, Duration::from_secs(3));
    c.push(Tier::Sync, b"after-idle-holders").unwrap();
    let stats = d.ctl(&["stats", "--flat"]);
    assert!(
        stat(&stats, "idle_timeouts") >= 4,
        "idle_timeouts counter:\n{stats}"
    );
    assert!(stat(&stats, "connections_refused") >= 1, "{stats}");
    assert!(texts(&d.read_all_records()).contains(&"after-idle-holders".to_string()));
}

// ---------------------------------------------------------------- 6. stalled frames

#[test]
fn stalled_huge_frames_hold_bounded_memory() {
    const CONNS: usize = 400;
    const DECLARED: usize = 16 * MIB as usize;
    const SENT: usize = 15 * MIB as usize;
    // The default server.read_buffer_bytes_max, set explicitly so the
    // bound below is the one the daemon runs with.
    const BUDGET: u64 = 128 * MIB;
    const ALLOWANCE: u64 = 128 * MIB;
    let d = Daemon::start(&format!(
        "[server]\nconnection_read_timeout_ms = 20000\nread_buffer_bytes_max = {BUDGET}\n"
    ));
    let pid = d.pid().unwrap();
    let idle_kib = status_kib(pid, "VmRSS");

    // The header of a Push declaring 16 MiB (both CRCs right for the zeros
    // it would carry; the frame is never finished anyway).
    let header = frame(msg::PUSH, Tier::Sync.as_byte(), 0, &vec![0u8; DECLARED])[..16].to_vec();
    let total = header.len() + SENT;
    let zeros = vec![0u8; MIB as usize];
    let mut conns: Vec<(UnixStream, usize)> = (0..CONNS)
        .map(|i| {
            let s = UnixStream::connect(d.socket_path())
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            s.set_nonblocking(true).unwrap();
            (s, 0)
        })
        .collect();

    // A well-behaved producer meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let mut good = d.client();
    let good_stop = stop.clone();
    let producer = thread::spawn(move || {
        let mut acked = 0u64;
        let mut worst = Duration::ZERO;
        while !good_stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            good.push(Tier::Sync, format!("good:{acked}").as_bytes())
                .map_err(|e| format!("good push {acked}: {e}"))?;
            worst = worst.max(t.elapsed());
            acked += 1;
            thread::sleep(Duration::from_millis(20));
        }
        Ok::<_, String>((acked, worst))
    });

    // Write what each connection's socket takes, round robin, for a bounded
    // time; measure the daemon while most writers are blocked.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(12);
    let mut peak_rss = 0u64;
    let mut last_sample = Instant::now() - Duration::from_secs(1);
    let mut write_errors = Vec::new();
    while Instant::now() < deadline {
        let mut progress = false;
        for (i, (s, sent)) in conns.iter_mut().enumerate() {
            if *sent >= total {
                continue;
            }
            let chunk: &[u8] = if *sent < header.len() {
                &header[*sent..]
            } else {
                let at = *sent - header.len();
                &zeros[..(SENT - at).min(zeros.len())]
            };
            match s.write(chunk) {
                Ok(n) => {
                    *sent += n;
                    progress |= n > 0;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => {
                    write_errors.push(format!("connection {i} after {sent} bytes: {e}"));
                    *sent = total;
                }
            }
        }
        if last_sample.elapsed() >= Duration::from_millis(100) {
            peak_rss = peak_rss.max(status_kib(pid, "VmRSS"));
            last_sample = Instant::now();
        }
        if !progress {
            thread::sleep(Duration::from_millis(5));
        }
    }
    let stats = d.ctl(&["stats", "--flat"]);
    peak_rss = peak_rss.max(status_kib(pid, "VmRSS"));
    let hwm = status_kib(pid, "VmHWM");
    stop.store(true, Ordering::Relaxed);
    let (acked, worst) = producer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("the well-behaved producer failed: {e}"));

    let complete = conns.iter().filter(|(_, s)| *s >= total).count();
    let written: usize = conns.iter().map(|(_, s)| *s).sum();
    let reserved = stat(&stats, "read_buffer_bytes");
    eprintln!(
        "stalled frames: {CONNS} connections, {complete} wrote all 15 MiB, {:.0} MiB written in total; \
         daemon RSS idle {:.1} MiB, peak sampled {:.1} MiB, VmHWM {:.1} MiB (bound {} MiB); \
         read_buffer_bytes {:.1} MiB, read_buffer_pauses {}; good producer: {acked} acks, worst {worst:?}",
        written as f64 / MIB as f64,
        mib(idle_kib),
        mib(peak_rss),
        mib(hwm),
        (BUDGET + ALLOWANCE) / MIB,
        reserved as f64 / MIB as f64,
        stat(&stats, "read_buffer_pauses"),
    );
    assert!(
        write_errors.is_empty(),
        "stalled connections were closed during the measurement (read timeout is 20 s): {:?}",
        &write_errors[..write_errors.len().min(5)]
    );
    // The test only means something if the daemon did take in large frames.
    assert!(
        reserved >= BUDGET / 2,
        "only {reserved} bytes of read buffer reserved: the stalled frames did not arrive"
    );
    assert!(
        hwm.max(peak_rss) * 1024 <= BUDGET + ALLOWANCE,
        "daemon peak RSS {:.1} MiB (VmHWM) / {:.1} MiB (sampled) with {CONNS} stalled 16 MiB frames: \
         over server.read_buffer_bytes_max (128 MiB) + 128 MiB",
        mib(hwm),
        mib(peak_rss)
    );
    assert!(acked >= 20, "only {acked} good pushes acked in 12 s");
    drop(conns);
    let mut c = connect_healthy(&d, Duration::from_secs(10));
    c.push(Tier::Sync, b"after-stall").unwrap();
    // Every reservation goes back to the budget once its connection is gone.
    let mut left = u64::MAX;
    let released = wait_until(Duration::from_secs(10), || {
        left = stat(&d.ctl(&["stats", "--flat"]), "read_buffer_bytes");
        left == 0
    });
    assert!(
        released,
        "{left} bytes of read buffer still reserved 10 s after every stalled connection closed"
    );
}

// ---------------------------------------------------------------- 7. million-record batch

#[test]
fn a_pushbatch_of_millions_of_one_byte_records_costs_bounded_memory() {
    // Just under 16 MiB: 4-byte count + n x (4-byte length + 1 byte).
    const N: usize = (16 * MIB as usize - 4) / 5;
    // Test defaults: 1 MiB segments, so the 57 MB of records (with their
    // headers) is also a group larger than a segment.
    let d = Daemon::start("");
    let pid = d.pid().unwrap();
    let mut payload = Vec::with_capacity(4 + 5 * N);
    payload.extend_from_slice(&(N as u32).to_le_bytes());
    for i in 0..N {
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.push(b'a' + (i % 26) as u8);
    }
    let f = frame(msg::PUSH_BATCH, Tier::Sync.as_byte(), 0, &payload);
    drop(payload);
    let frame_bytes = f.len() as u64;
    let mut c = d.raw();
    c.expect_health();
    thread::sleep(Duration::from_millis(300));
    let idle_kib = status_kib(pid, "VmRSS");
    let hwm_before = status_kib(pid, "VmHWM");

    let t = Instant::now();
    c.send(&f);
    drop(f);
    let answer = c.read_frame_within(Duration::from_secs(120));
    let took = t.elapsed();
    let hwm_after = status_kib(pid, "VmHWM");
    let rss_after = status_kib(pid, "VmRSS");
    let growth = hwm_after.saturating_sub(idle_kib) * 1024;
    eprintln!(
        "PushBatch of {N} one-byte records ({:.1} MiB frame) answered in {took:?}: daemon RSS idle {:.1} MiB, \
         VmHWM {:.1} MiB before, {:.1} MiB after (RSS now {:.1} MiB): peak growth {:.1} MiB = {:.1}x the frame",
        frame_bytes as f64 / MIB as f64,
        mib(idle_kib),
        mib(hwm_before),
        mib(hwm_after),
        mib(rss_after),
        growth as f64 / MIB as f64,
        growth as f64 / frame_bytes as f64
    );
    match answer {
        ReadOutcome::Frame(got) => assert_eq!(
            got,
            expected_ack_batch(N as u32),
            "the batch of {N} records was not acked whole"
        ),
        other => panic!("no answer to the batch of {N} records: {other:?}"),
    }
    let stats = d.ctl(&["stats", "--flat"]);
    assert_eq!(
        shard_stat_sum(&stats, "records_written"),
        N as u64,
        "{stats}"
    );
    let bound = 2 * 16 * MIB + 16 * MIB;
    assert!(
        growth <= bound,
        "a {:.1} MiB PushBatch of {N} one-byte records raised the daemon's peak RSS by {:.1} MiB \
         ({:.1}x the frame); target: at most 2x the frame plus 16 MiB ({} MiB)",
        frame_bytes as f64 / MIB as f64,
        growth as f64 / MIB as f64,
        growth as f64 / frame_bytes as f64,
        bound / MIB
    );
}

#[test]
fn a_burst_of_big_batches_leaves_no_resident_memory_behind() {
    // PushBatches of just under 2 MiB come from the heap (under the
    // daemon's mmap threshold), so once they are written their buffers
    // stay resident unless the daemon hands them back. All connections
    // send at once, so many frames are held together (up to the read
    // budget).
    const CONNS: usize = 64;
    const RECORDS: usize = 29;
    const RAISED_KIB: u64 = 20 * 1024;
    const ALLOWANCE_KIB: u64 = 12 * 1024;
    let d = Daemon::start("[sink]\ntype = \"noop\"\n");
    let pid = d.pid().unwrap();
    let record = vec![b'r'; 64 * 1024];
    let batch: Vec<&[u8]> = vec![&record; RECORDS];
    let mut clients: Vec<Client> = (0..CONNS).map(|_| d.client()).collect();
    clients[0].push_batch(Tier::Sync, &batch).unwrap();
    let idle_kib = status_kib(pid, "VmRSS");
    let hwm_before = status_kib(pid, "VmHWM");
    let start = std::sync::Barrier::new(CONNS);
    thread::scope(|s| {
        for mut c in clients {
            let (batch, start) = (&batch, &start);
            s.spawn(move || {
                start.wait();
                assert_eq!(c.push_batch(Tier::Sync, batch).unwrap(), RECORDS as u32);
            });
        }
    });
    // The peak, not the RSS now: the trim (2 s after the last large
    // frame) may already have run.
    let peak_kib = status_kib(pid, "VmHWM");
    let t = Instant::now();
    let mut now_kib = status_kib(pid, "VmRSS");
    while now_kib > idle_kib + ALLOWANCE_KIB && t.elapsed() < Duration::from_secs(20) {
        thread::sleep(Duration::from_millis(100));
        now_kib = status_kib(pid, "VmRSS");
    }
    eprintln!(
        "{CONNS} connections, one PushBatch of {RECORDS} x 64 KiB each at once: daemon RSS \
         {:.1} MiB before (peak {:.1}), peak {:.1} MiB during the burst, {:.1} MiB {:?} after",
        mib(idle_kib),
        mib(hwm_before),
        mib(peak_kib),
        mib(now_kib),
        t.elapsed()
    );
    assert!(
        peak_kib >= hwm_before.max(idle_kib + RAISED_KIB),
        "the burst raised the daemon's peak RSS to only {:.1} MiB (idle {:.1} MiB): it held too \
         few frames at once to show anything",
        mib(peak_kib),
        mib(idle_kib)
    );
    assert!(
        now_kib <= idle_kib + ALLOWANCE_KIB,
        "the daemon still holds {:.1} MiB 20 s after a burst of big PushBatches (idle {:.1} MiB; \
         allowed {} MiB more)",
        mib(now_kib),
        mib(idle_kib),
        ALLOWANCE_KIB / 1024
    );
}

#[test]
fn a_steady_stream_of_big_batches_reuses_its_frame_buffers() {
    // PushBatches of 1 MiB of payload, 4 in flight on one connection: each
    // frame's buffer is kept and taken back by a later frame once its
    // records are written (actors/src/ingest/frame_buffers.rs).
    // Freed to glibc instead, a buffer at the top of the heap went back to
    // the system at once and every frame was faulted in again 4 KiB at a
    // time: about 134 faults per MiB moved. Counted on the connection
    // threads (the arbiters, `actix-rt|...`), and apart on the drain's,
    // whose read-ahead chunks are reused the same way.
    const BATCHES: usize = 256;
    const WINDOW: usize = 4;
    let d = Daemon::start("[sink]\ntype = \"noop\"\n");
    let pid = d.pid().unwrap();
    let record = vec![b'r'; 64 * 1024];
    let batch: Vec<&[u8]> = vec![&record; 16];
    let mut c = d.client();
    let mut stream = |n: usize| {
        let mut p = c.pipeline(WINDOW);
        let mut in_flight = 0;
        for _ in 0..n {
            if in_flight == WINDOW {
                assert_eq!(p.recv().unwrap(), Reply::AckBatch(16));
                in_flight -= 1;
            }
            p.push_batch(Tier::Sync, &batch).unwrap();
            in_flight += 1;
        }
        for _ in 0..in_flight {
            assert_eq!(p.recv().unwrap(), Reply::AckBatch(16));
        }
    };
    // Every record delivered (the noop sink), so the drain's read-ahead
    // is counted over the same records.
    let delivered = |n: usize| {
        let want = (n * 16) as u64;
        let mut got = 0;
        wait_until(Duration::from_secs(30), || {
            got = shard_stat_sum(&d.ctl(&["stats", "--flat"]), "delivered_records");
            got >= want
        });
        assert_eq!(got, want, "records delivered by the noop sink");
    };
    // Warm up: the heap grows to what the stream holds at once.
    stream(32);
    delivered(32);
    let (before, drain_before) = (minor_faults(pid, "actix-rt"), minor_faults(pid, "drain"));
    stream(BATCHES);
    let faults = minor_faults(pid, "actix-rt") - before;
    delivered(32 + BATCHES);
    let drain_faults = minor_faults(pid, "drain") - drain_before;
    let per_mib = faults as f64 / BATCHES as f64;
    let drain_per_mib = drain_faults as f64 / BATCHES as f64;
    eprintln!(
        "{BATCHES} PushBatches of 16 x 64 KiB, {WINDOW} in flight: {faults} minor faults on the \
         daemon's connection threads ({per_mib:.1} per MiB), {drain_faults} on its drain threads \
         ({drain_per_mib:.1} per MiB)"
    );
    assert!(
        per_mib < 16.0,
        "{faults} minor page faults on the daemon's connection threads for {BATCHES} MiB pushed ({per_mib:.1} per MiB, \
         at most 16 allowed): frame buffers are given back to the system and faulted in again"
    );
    // The drain reads ahead in 256 KiB chunks and reads into a chunk again
    // once the records delivered from it are dropped, across segments too
    // (wab/src/reader.rs, SPARE_CHUNKS): 1.8-2.6 faults per MiB; when each
    // segment's reader started with new chunks and kept 16, 319-336.
    assert!(
        drain_per_mib < 32.0,
        "{drain_faults} minor page faults on the daemon's drain threads for {BATCHES} MiB \
         delivered ({drain_per_mib:.1} per MiB, at most 32 allowed): read-ahead chunks are \
         zeroed and faulted in again instead of being read into again"
    );
    // The kept buffers are shown, bounded, and let go once large frames
    // stop coming (the daemon looks every 2 s).
    let kept = stat(&d.ctl(&["stats", "--flat"]), "frame_buffers_kept_bytes");
    assert!(
        (1 << 20..=32 << 20).contains(&kept),
        "frame_buffers_kept_bytes {kept} right after the stream: expected 1-32 MiB"
    );
    let t = Instant::now();
    let mut left = kept;
    while left > 0 && t.elapsed() < Duration::from_secs(15) {
        thread::sleep(Duration::from_millis(200));
        left = stat(&d.ctl(&["stats", "--flat"]), "frame_buffers_kept_bytes");
    }
    eprintln!(
        "frame buffers kept: {kept} bytes after the stream, {left} {:?} later",
        t.elapsed()
    );
    assert_eq!(
        left, 0,
        "frame buffers still kept 15 s after the last large frame"
    );
}

// ---------------------------------------------------------------- 8. quiet log

/// Push from several connections at once with every kind of push; returns
/// every payload (each one acked).
fn push_mixed(d: &Daemon, run: &str) -> Vec<String> {
    let modes = [
        ("sync", Mode::Single(Tier::Sync), 600),
        ("buffered", Mode::Single(Tier::Buffered), 600),
        ("batch", Mode::Batch(Tier::Batched, 50), 1000),
        ("pipelined", Mode::Pipelined(Tier::Sync, 32), 800),
    ];
    let handles: Vec<_> = modes
        .iter()
        .map(|&(name, mode, n)| {
            let mut c = d.client();
            let tag = format!("{run}-{name}");
            thread::spawn(move || produce(&mut c, &tag, mode, n))
        })
        .collect();
    let mut payloads = Vec::new();
    for (h, &(_, _, n)) in handles.into_iter().zip(&modes) {
        let o = h.join().expect("producer thread");
        assert!(
            o.error.is_empty() && o.acked == n,
            "{}: {} of {n} acked, error {:?}",
            o.tag,
            o.acked,
            o.error
        );
        payloads.extend((0..n).map(|i| format!("{}:{i}", o.tag)));
    }
    payloads
}

#[test]
fn a_normal_run_is_quiet() {
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&format!(
        "[sink]\ntype = \"http\"\nurl = \"{}\"\nlinger_ms = 20\n",
        rx.url()
    ));
    for run in ["first", "second"] {
        if run == "second" {
            d.spawn();
        }
        let expected = push_mixed(&d, run);
        rx.wait_for_payloads(&expected, Duration::from_secs(30));
        d.terminate();
        let log = d.stderr();
        let alarming = alarming_lines(&log);
        assert!(
            alarming.is_empty(),
            "the {run} run of a normal start, push, deliver, stop logged WARN/ERROR lines:\n{}\n\nfull log:\n{log}",
            alarming.join("\n")
        );
    }

    // A log level tracing would misread is refused, naming the key.
    let bad = Daemon::configure("[log]\nlevel = \"verbose!!\"\n");
    let out = run_spillway(
        &["check".as_ref(), bad.config_path().as_os_str()],
        Duration::from_secs(20),
    );
    assert!(
        !out.status.success(),
        "spillway check accepted log.level = \"verbose!!\": {out:?}"
    );
    assert!(out.stderr.contains("log.level"), "{}", out.stderr);
    let out = bad.run_to_exit(Duration::from_secs(20));
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stderr.contains("log.level"), "{}", out.stderr);
}
