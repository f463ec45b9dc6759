//! The operator's kit, end to end: log layout and colour, systemd's
//! readiness protocol, who may connect to the producer socket, and the
//! service files in `deploy/`.
//!
//! 1. Logs: a log file gets no ANSI codes, a terminal does unless
//!    `NO_COLOR` is set, and `log.format = "json"` writes one object per
//!    line with a timestamp, a level and `fields.message`.
//! 2. `NOTIFY_SOCKET`: a datagram socket bound here receives `READY=1` only
//!    once the producer socket answers a health check, `WATCHDOG=1` when
//!    asked for, `STOPPING=1` after SIGTERM, and nothing from a daemon that
//!    fails to start.
//! 3. `server.socket_mode` / `server.socket_group`: the mode and group are
//!    on the socket file; as root, a process in the group may connect and
//!    one outside it may not; an unknown group is refused at start.
//! 4. `deploy/`: the example config passes `spillway check` and starts, the
//!    unit carries the keys the docs promise (and `systemd-analyze verify`
//!    accepts it where the tool exists), the Dockerfile runs what the unit
//!    runs, and (as root) the daemon runs in its runtime stage's layout as
//!    its unprivileged user: uid and gid 10001, a 0700 data folder, a 0710
//!    socket folder.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::io::FromRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::*;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root, two folders above testing/tests/")
}

fn deploy_file(name: &str) -> PathBuf {
    repo_root().join("deploy").join(name)
}

fn read_text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o7777
}

// ---------------------------------------------------------------- 1. logs

const ESC_BRACKET: &[u8] = b"\x1b[";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Start, push, stop: a run that logs at start and at stop.
fn run_once(d: &mut Daemon, adjust: impl FnOnce(&mut Command)) {
    d.spawn_with(adjust);
    d.client().push(Tier::Sync, b"a record").unwrap();
    d.terminate();
}

#[test]
fn logs_written_to_a_file_carry_no_colour() {
    let mut d = Daemon::configure("");
    // NO_COLOR unset: only stderr being a file keeps the colour away.
    run_once(&mut d, |cmd| {
        cmd.env_remove("NO_COLOR");
    });
    let raw = fs::read(d.stderr_log_path()).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains("INFO") && text.contains("spillway is listening"),
        "the daemon logged nothing to look at:\n{text}"
    );
    assert!(
        !contains(&raw, ESC_BRACKET),
        "ANSI escape codes in a log file:\n{text:?}"
    );
}

/// A pseudo-terminal: (master, slave), both close-on-exec so that other
/// tests' children do not inherit them.
fn open_pty() -> (File, File) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: two out-pointers; no name, termios or window size.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: fds just returned by openpty.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // SAFETY: each fd is owned by exactly one File from here on.
    unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) }
}

/// What the daemon wrote to the terminal before it exited: read without
/// blocking (the writer is gone; what it wrote waits in the buffer).
fn drain_pty(master: &mut File) -> Vec<u8> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a valid fd; only the O_NONBLOCK flag changes.
    unsafe {
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EAGAIN: nothing more; EIO: the other side is closed.
            Err(_) => break,
        }
    }
    out
}

#[test]
fn a_terminal_gets_colour_unless_no_color_is_set() {
    for no_color in [None, Some("1"), Some("")] {
        let mut d = Daemon::configure("");
        let (mut master, slave) = open_pty();
        run_once(&mut d, move |cmd| {
            match no_color {
                None => cmd.env_remove("NO_COLOR"),
                Some(v) => cmd.env("NO_COLOR", v),
            };
            cmd.stderr(Stdio::from(slave));
        });
        let raw = drain_pty(&mut master);
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.contains("spillway is listening"),
            "NO_COLOR={no_color:?}: nothing logged to the terminal:\n{text:?}"
        );
        assert_eq!(
            contains(&raw, ESC_BRACKET),
            no_color.is_none(),
            "NO_COLOR={no_color:?}: colour on a terminal only without NO_COLOR:\n{text:?}"
        );
    }
}

#[test]
fn json_logs_are_one_object_per_line() {
    let mut d = Daemon::configure("[log]\nformat = \"json\"\n");
    d.spawn_with(|cmd| {
        cmd.env_remove("NO_COLOR");
    });
    d.client().push(Tier::Sync, b"a record").unwrap();
    // The layout is chosen at start: a reload reports the change.
    d.reconfigure("[log]\nformat = \"text\"\n");
    let report = d.ctl(&["reload"]);
    assert!(
        report.contains("log.format changed: needs a restart"),
        "{report}"
    );
    d.terminate();
    let raw = fs::read(d.stderr_log_path()).unwrap();
    assert!(!contains(&raw, ESC_BRACKET), "ANSI codes in JSON logs");
    let text = String::from_utf8(raw).expect("the JSON log is UTF-8");
    let mut messages = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log line {} is not JSON ({e}): {line:?}", i + 1));
        let timestamp = v["timestamp"].as_str().unwrap_or_default();
        assert!(
            timestamp.len() >= 20 && timestamp.as_bytes()[4] == b'-' && timestamp.contains('T'),
            "line {}: no RFC 3339 timestamp: {line}",
            i + 1
        );
        let level = v["level"].as_str().unwrap_or_default();
        assert!(
            ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"].contains(&level),
            "line {}: no level: {line}",
            i + 1
        );
        let message = v["fields"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("line {}: no fields.message: {line}", i + 1));
        assert!(v["target"].is_string(), "line {}: no target: {line}", i + 1);
        messages.push((level.to_string(), message.to_string(), v.clone()));
    }
    let listening = messages
        .iter()
        .find(|(_, m, _)| m == "spillway is listening")
        .unwrap_or_else(|| panic!("no start line:\n{text}"));
    // Structured fields sit beside the message, typed.
    assert_eq!(listening.0, "INFO");
    assert_eq!(listening.2["fields"]["shards"], 2, "{}", listening.2);
    assert!(
        messages.iter().any(|(_, m, _)| m == "stopped"),
        "no stop line:\n{text}"
    );
}

// ---------------------------------------------------------------- 2. systemd notify

/// A datagram socket standing in for systemd's notify socket.
struct NotifySocket {
    socket: UnixDatagram,
    /// The value for `NOTIFY_SOCKET`.
    env: String,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn at_path() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        NotifySocket {
            socket,
            env: path.display().to_string(),
            _dir: dir,
        }
    }

    fn abstract_name() -> NotifySocket {
        use std::os::linux::net::SocketAddrExt;
        let name = format!(
            "spillway-tests-notify-{}-{:?}",
            std::process::id(),
            thread::current().id()
        );
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&addr).unwrap();
        NotifySocket {
            socket,
            env: format!("@{name}"),
            _dir: tempfile::tempdir().unwrap(),
        }
    }

    fn wait_for(&self, line: &str, within: Duration) -> (String, Vec<String>) {
        wait_for(&self.socket, line, within)
    }

    /// Whatever is already queued (a daemon that exited sent it all).
    fn queued(&self) -> Vec<String> {
        self.socket.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        self.socket.set_nonblocking(false).unwrap();
        out
    }
}

/// The next datagram, or `None` once `deadline` passed.
fn next_datagram(socket: &UnixDatagram, deadline: Instant) -> Option<String> {
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => return Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => panic!("receiving from the notify socket: {e}"),
        }
    }
}

/// Datagrams until one has the line `line`: that one, and the ones before.
fn wait_for(socket: &UnixDatagram, line: &str, within: Duration) -> (String, Vec<String>) {
    let deadline = Instant::now() + within;
    let mut before = Vec::new();
    while let Some(msg) = next_datagram(socket, deadline) {
        if msg.lines().any(|l| l == line) {
            return (msg, before);
        }
        before.push(msg);
    }
    panic!("no {line} within {within:?}; received {before:?}");
}

/// READY=1 arrives only when the producer socket answers (checked the
/// moment it arrives), WATCHDOG=1 follows when asked for, STOPPING=1 after
/// SIGTERM.
fn ready_then_stopping(notify: NotifySocket) {
    let mut d = Daemon::configure("");
    let socket = d.socket_path().to_path_buf();
    let receiver = notify.socket.try_clone().unwrap();
    let watcher = thread::spawn(move || {
        let (ready, before) = wait_for(&receiver, "READY=1", START_TIMEOUT);
        // Right now, before anything else: the socket must exist and answer.
        let answered = answers_health(&socket);
        (ready, before, answered)
    });
    let env = notify.env.clone();
    d.spawn_with(move |cmd| {
        cmd.env("NOTIFY_SOCKET", &env)
            .env("WATCHDOG_USEC", "200000")
            .env_remove("WATCHDOG_PID");
    });
    let (ready, before, answered) = watcher.join().expect("the notify watcher panicked");
    assert!(
        answered,
        "READY=1 arrived before the producer socket answered a health check: {ready:?}; log:\n{}",
        d.stderr()
    );
    assert!(before.is_empty(), "datagrams before READY=1: {before:?}");
    assert!(
        ready.lines().any(|l| l.starts_with("STATUS=listening on")),
        "{ready:?}"
    );
    d.client().push(Tier::Sync, b"after ready").unwrap();
    // WATCHDOG_USEC = 0.2 s: pings every 0.1 s (the bound is liveness only).
    notify.wait_for("WATCHDOG=1", Duration::from_secs(10));
    d.terminate();
    let (_, between) = notify.wait_for("STOPPING=1", Duration::from_secs(5));
    assert!(
        between.iter().all(|m| m == "WATCHDOG=1"),
        "unexpected datagrams before STOPPING=1: {between:?}"
    );
}

#[test]
fn ready_comes_once_the_socket_answers_and_stopping_after_sigterm() {
    ready_then_stopping(NotifySocket::at_path());
}

#[test]
fn notify_socket_may_be_an_abstract_name() {
    ready_then_stopping(NotifySocket::abstract_name());
}

#[test]
fn without_notify_socket_nothing_is_sent_and_the_daemon_runs() {
    // The harness starts daemons without NOTIFY_SOCKET; one set to an
    // unusable value is warned about, never fatal.
    let mut d = Daemon::configure("");
    d.spawn_with(|cmd| {
        cmd.env("NOTIFY_SOCKET", "relative/not-a-socket");
    });
    d.client().push(Tier::Sync, b"x").unwrap();
    d.terminate();
    let log = d.stderr();
    assert!(
        log.contains("NOTIFY_SOCKET") && log.contains("relative/not-a-socket"),
        "an unusable NOTIFY_SOCKET was not reported:\n{log}"
    );
}

// ---------------------------------------------------------------- 3. socket access

/// The effective gid and its group's name.
fn my_group() -> (u32, String) {
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let name = group_name(gid).unwrap_or_else(|| panic!("gid {gid} has no name"));
    (gid, name)
}

/// The name of group `gid`, from /etc/group.
fn group_name(gid: u32) -> Option<String> {
    groups()
        .into_iter()
        .find(|(g, _)| *g == gid)
        .map(|(_, n)| n)
}

/// (gid, name) of every group in /etc/group.
fn groups() -> Vec<(u32, String)> {
    read_text(Path::new("/etc/group"))
        .lines()
        .filter_map(|l| {
            let mut parts = l.split(':');
            let name = parts.next()?.to_string();
            let gid = parts.nth(1)?.parse().ok()?;
            Some((gid, name))
        })
        .collect()
}

#[test]
fn socket_mode_and_group_are_on_the_socket_file() {
    let (gid, name) = my_group();
    let mut d = Daemon::start(&format!(
        "[server]\nsocket_mode = \"0660\"\nsocket_group = {name:?}\n"
    ));
    let socket = d.socket_path().to_path_buf();
    let admin = d.dir().join("admin").join("admin.sock");
    assert_eq!(mode_of(&socket), 0o660, "server.socket_mode not applied");
    assert_eq!(fs::metadata(&socket).unwrap().gid(), gid);
    assert_eq!(mode_of(&admin), 0o600, "the admin socket must stay 0600");
    d.client()
        .push(Tier::Sync, b"through a 0660 socket")
        .unwrap();

    // A numeric gid works the same; the default is 0600 again. Both keys
    // take effect at a restart, and a reload says so.
    d.reconfigure(&format!(
        "[server]\nsocket_mode = \"0640\"\nsocket_group = {gid}\n"
    ));
    let report = d.ctl(&["reload"]);
    for key in ["server.socket_mode", "server.socket_group"] {
        assert!(
            report.contains(&format!("{key} changed: needs a restart")),
            "{report}"
        );
    }
    assert_eq!(mode_of(&socket), 0o660, "a reload changed the socket");
    d.restart();
    assert_eq!(mode_of(&socket), 0o640);
    assert_eq!(fs::metadata(&socket).unwrap().gid(), gid);
    d.reconfigure("");
    d.restart();
    assert_eq!(mode_of(&socket), 0o600, "the default socket mode is 0600");
    d.terminate();
}

#[test]
fn an_unknown_socket_group_fails_at_start_naming_the_key() {
    let notify = NotifySocket::at_path();
    let mut d = Daemon::configure("[server]\nsocket_group = \"no-such-group-spillway\"\n");
    let env = notify.env.clone();
    let out = match d.run_to_exit_or_start_with(START_TIMEOUT, move |cmd| {
        cmd.env("NOTIFY_SOCKET", &env);
    }) {
        StartOrExit::Exited(out) => out,
        StartOrExit::Started => panic!("started with an unknown socket_group"),
    };
    assert!(!out.status.success(), "{out:?}");
    assert!(
        out.stderr.contains("server.socket_group") && out.stderr.contains("no-such-group-spillway"),
        "the error does not name the key and the group:\n{}",
        out.stderr
    );
    assert!(!d.socket_path().exists(), "a socket was bound anyway");
    assert_eq!(
        notify.queued(),
        Vec::<String>::new(),
        "a daemon that failed to start notified the service manager"
    );
    // The same for a gid nobody has.
    d.reconfigure("[server]\nsocket_group = 3999999999\n");
    let out = d.run_to_exit(Duration::from_secs(20));
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stderr.contains("server.socket_group"), "{}", out.stderr);
}

/// Connect to `socket` from a child running as `uid`/`gid` with exactly
/// `groups` as its supplementary groups: `Ok` or the errno of `connect`.
fn connect_as(uid: u32, gid: u32, groups: &[u32], socket: &Path) -> Result<(), i32> {
    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = socket.as_os_str().as_bytes();
    assert!(bytes.len() < addr.sun_path.len());
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let groups: Vec<libc::gid_t> = groups.to_vec();
    const SETUP_FAILED: i32 = 200;
    // SAFETY: the child only makes raw system calls and _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: in the forked child; plain system calls on prepared data.
        unsafe {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(SETUP_FAILED);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(SETUP_FAILED + 1);
            }
            let rc = libc::connect(
                fd,
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            });
        }
    }
    let mut status = 0;
    // SAFETY: our own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", io::Error::last_os_error());
    assert!(libc::WIFEXITED(status), "the child died: status {status}");
    match libc::WEXITSTATUS(status) {
        0 => Ok(()),
        code if code >= SETUP_FAILED => {
            panic!("the child could not become uid {uid} (exit {code})")
        }
        errno => Err(errno),
    }
}

#[test]
fn a_producer_in_the_socket_group_may_connect_and_others_may_not() {
    if !require_root("connect as nobody with chosen groups") {
        return;
    }
    const NOBODY: u32 = 65534;
    // A group of this machine that is neither root's nor nobody's.
    let (group, group_name) = groups()
        .into_iter()
        .find(|(g, _)| *g != 0 && *g != NOBODY)
        .expect("a group other than root and nogroup in /etc/group");
    let mut d = Daemon::configure(&format!(
        "[server]\nsocket_mode = \"0660\"\nsocket_group = {group_name:?}\n"
    ));
    // The layout of deploy/spillway.service: the path down to the socket's
    // folder may be traversed, the folder (0710, the socket's group) may be
    // entered by the group and written by the daemon alone.
    fs::set_permissions(d.dir(), fs::Permissions::from_mode(0o711)).unwrap();
    let run = d.socket_path().parent().unwrap().to_path_buf();
    fs::create_dir(&run).unwrap();
    fs::set_permissions(&run, fs::Permissions::from_mode(0o710)).unwrap();
    std::os::unix::fs::chown(&run, None, Some(group)).unwrap();
    d.spawn();
    let socket = d.socket_path().to_path_buf();
    assert_eq!(mode_of(&socket), 0o660);
    assert_eq!(fs::metadata(&socket).unwrap().gid(), group, "not chowned");
    assert_eq!(
        connect_as(NOBODY, NOBODY, &[NOBODY, group], &socket),
        Ok(()),
        "a member of {group_name} could not connect; log:\n{}",
        d.stderr()
    );
    assert_eq!(
        connect_as(NOBODY, NOBODY, &[NOBODY], &socket),
        Err(libc::EACCES),
        "a user outside {group_name} connected"
    );
    // The same member, with the socket back at its default 0600.
    d.reconfigure(&format!("[server]\nsocket_group = {group_name:?}\n"));
    d.restart();
    assert_eq!(
        connect_as(NOBODY, NOBODY, &[NOBODY, group], &socket),
        Err(libc::EACCES),
        "a 0600 socket let its group connect"
    );
    d.terminate();
}

// ---------------------------------------------------------------- 4. deploy/

fn deploy_config() -> toml::Value {
    let path = deploy_file("spillway.toml");
    read_text(&path)
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn deploy_str<'a>(cfg: &'a toml::Value, section: &str, key: &str) -> &'a str {
    cfg[section][key]
        .as_str()
        .unwrap_or_else(|| panic!("deploy/spillway.toml has no {section}.{key} string"))
}

#[test]
fn the_example_config_passes_check_and_starts() {
    let path = deploy_file("spillway.toml");
    let help = run_spillway(
        &["check".as_ref(), "--help".as_ref()],
        Duration::from_secs(20),
    );
    let mut args: Vec<&std::ffi::OsStr> = vec!["check".as_ref()];
    // Where `check` also probes the machine (the sink, the group, ...), the
    // example's /run and /var/lib paths and its collector are not here.
    if help.stdout.contains("--no-environment") {
        args.push("--no-environment".as_ref());
    }
    args.push(path.as_os_str());
    let out = run_spillway(&args, Duration::from_secs(20));
    assert!(
        out.status.success(),
        "spillway check {} failed:\n{}{}",
        path.display(),
        out.stdout,
        out.stderr
    );

    let cfg = deploy_config();
    assert_eq!(
        deploy_str(&cfg, "admin", "metrics_address"),
        "127.0.0.1:9898"
    );
    assert!(deploy_str(&cfg, "server", "socket_path").starts_with("/run/spillway/"));
    assert!(deploy_str(&cfg, "admin", "socket_path").starts_with("/run/spillway/"));
    assert!(deploy_str(&cfg, "server", "data_dir").starts_with("/var/lib/spillway/"));
    assert_eq!(deploy_str(&cfg, "sink", "type"), "http");

    // And it runs: the same file with its folders moved into a temporary
    // one, its group made ours and its metrics port left to the system.
    let tmp = tempfile::Builder::new().prefix("swd").tempdir().unwrap();
    let (_, my_group) = my_group();
    let text = read_text(&path)
        .replace(
            "/run/spillway",
            &tmp.path().join("run").display().to_string(),
        )
        .replace(
            "/var/lib/spillway",
            &tmp.path().join("lib").display().to_string(),
        )
        .replace(
            "socket_group = \"spillway\"",
            &format!("socket_group = {my_group:?}"),
        )
        .replace("127.0.0.1:9898", "127.0.0.1:0");
    let config = tmp.path().join("spillway.toml");
    fs::write(&config, text).unwrap();
    let log = tmp.path().join("stderr.log");
    let mut child = run_command(tmp.path())
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let socket = tmp.path().join("run").join("spillway.sock");
    let started = wait_until(START_TIMEOUT, || {
        answers_health(&socket) || child.try_wait().unwrap().is_some()
    });
    let alive = child.try_wait().unwrap().is_none();
    if !(started && alive) {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "the example config did not start:\n{}",
            String::from_utf8_lossy(&fs::read(&log).unwrap_or_default())
        );
    }
    assert_eq!(mode_of(&socket), 0o660, "the example's socket_mode");
    // SAFETY: our child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_timeout(&mut child, STOP_TIMEOUT).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the daemon did not stop after SIGTERM")
    });
    assert!(status.success(), "exit {status} after SIGTERM");
}

/// A systemd unit as `section -> [(key, value)]`, in file order.
fn parse_unit(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(
            !line.ends_with('\\'),
            "line {}: continuation lines are not used here: {raw}",
            i + 1
        );
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.to_string(), Vec::new()));
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("line {}: not `Key=value`: {raw}", i + 1));
        let section = sections
            .last_mut()
            .unwrap_or_else(|| panic!("line {}: a key before any [Section]", i + 1));
        section
            .1
            .push((key.trim().to_string(), value.trim().to_string()));
    }
    sections
}

fn unit_value<'a>(
    unit: &'a [(String, Vec<(String, String)>)],
    section: &str,
    key: &str,
) -> &'a str {
    let (_, keys) = unit
        .iter()
        .find(|(s, _)| s == section)
        .unwrap_or_else(|| panic!("no [{section}] in deploy/spillway.service"));
    let found: Vec<&str> = keys
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        found.len(),
        1,
        "[{section}] {key}= appears {} times",
        found.len()
    );
    found[0]
}

/// `30`, `30s`, `2min`: a systemd time span in seconds (the forms used here).
fn seconds(span: &str) -> u64 {
    if let Some(m) = span.strip_suffix("min") {
        return m.trim().parse::<u64>().expect("minutes") * 60;
    }
    span.trim_end_matches('s').trim().parse().expect("seconds")
}

#[test]
fn the_systemd_unit_carries_the_documented_keys() {
    let unit = parse_unit(&read_text(&deploy_file("spillway.service")));
    let names: Vec<&str> = unit.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["Unit", "Service", "Install"]);
    for (key, want) in [
        ("Type", "notify"),
        (
            "ExecStart",
            "/usr/bin/spillway run --config /etc/spillway/spillway.toml",
        ),
        ("ExecReload", "/bin/kill -HUP $MAINPID"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("StateDirectory", "spillway"),
        ("RuntimeDirectory", "spillway"),
        ("Restart", "on-failure"),
        ("User", "spillway"),
    ] {
        assert_eq!(unit_value(&unit, "Service", key), want, "[Service] {key}=");
    }
    assert_eq!(
        unit_value(&unit, "Install", "WantedBy"),
        "multi-user.target"
    );

    // Nobody but the daemon may write the socket's folder (docs/security.md).
    let runtime_mode = u32::from_str_radix(unit_value(&unit, "Service", "RuntimeDirectoryMode"), 8)
        .expect("RuntimeDirectoryMode is octal");
    assert_eq!(
        runtime_mode & 0o022,
        0,
        "RuntimeDirectoryMode lets others write"
    );
    assert_eq!(runtime_mode & 0o700, 0o700);

    let cfg = deploy_config();
    let connections_max = cfg["server"]["connections_max"]
        .as_integer()
        .unwrap_or(1024) as u64;
    let nofile: u64 = unit_value(&unit, "Service", "LimitNOFILE").parse().unwrap();
    assert!(
        nofile > connections_max + 1024,
        "LimitNOFILE={nofile} leaves too little beside connections_max = {connections_max}"
    );
    let shutdown_ms = cfg["server"]["shutdown_timeout_ms"]
        .as_integer()
        .unwrap_or(5000) as u64;
    let stop_s = seconds(unit_value(&unit, "Service", "TimeoutStopSec"));
    assert!(
        stop_s * 1000 > shutdown_ms,
        "TimeoutStopSec={stop_s}s is not above server.shutdown_timeout_ms = {shutdown_ms}"
    );
    assert!(seconds(unit_value(&unit, "Service", "WatchdogSec")) >= 2);

    // The unit's folders are the config's.
    let socket = deploy_str(&cfg, "server", "socket_path");
    let runtime = unit_value(&unit, "Service", "RuntimeDirectory");
    assert_eq!(
        Path::new(socket).parent(),
        Some(Path::new("/run").join(runtime).as_path())
    );
    let state = unit_value(&unit, "Service", "StateDirectory");
    assert!(Path::new(deploy_str(&cfg, "server", "data_dir"))
        .starts_with(Path::new("/var/lib").join(state)));
    assert_eq!(
        deploy_str(&cfg, "server", "socket_group"),
        unit_value(&unit, "Service", "Group"),
        "the socket's group is the service's group"
    );
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    let probe = Command::new("systemd-analyze").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        // Optional tool, also in CI: the unit is still parsed above.
        eprintln!(
            "SKIPPED: systemd-analyze is not installed; the unit was not verified by systemd"
        );
        return;
    }
    // verify checks that ExecStart's binary exists: point it at this build.
    let tmp = tempfile::tempdir().unwrap();
    let unit = tmp.path().join("spillway.service");
    let bin = spillway_bin();
    let text = read_text(&deploy_file("spillway.service"))
        .replace("/usr/bin/spillway", &bin.display().to_string());
    fs::write(&unit, text).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // verify exits 0 on unknown keys but names them: any line about the
    // unit is a finding.
    let findings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("spillway.service"))
        .collect();
    assert!(
        out.status.success() && findings.is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
}

/// What the Dockerfile says, checked against the unit, the example config
/// and the repository (no Docker engine runs here to build it; the next
/// test runs its runtime stage's layout).
#[test]
fn the_dockerfile_runs_what_the_unit_runs_from_files_that_exist() {
    let path = deploy_file("Dockerfile");
    let text = read_text(&path);
    // Instructions with their continuation lines joined.
    let mut instructions: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => pending.push_str(part),
            None => {
                pending.push_str(line);
                instructions.push(std::mem::take(&mut pending));
            }
        }
    }
    let stages: Vec<&String> = instructions
        .iter()
        .filter(|i| i.starts_with("FROM "))
        .collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    assert_eq!(stages[0], "FROM rust:1-bookworm AS builder");
    assert_eq!(stages[1], "FROM debian:bookworm-slim");
    let runtime_at = instructions.iter().position(|i| i == stages[1]).unwrap();
    let (build, runtime) = instructions.split_at(runtime_at);
    assert!(
        build.iter().any(|i| i.starts_with("RUN ")
            && i.contains("cargo build --release")
            && i.contains("-p spillway")),
        "no `cargo build --release -p spillway` in the builder stage"
    );
    let user = runtime
        .iter()
        .filter_map(|i| i.strip_prefix("USER "))
        .next_back()
        .expect("the runtime stage sets USER");
    let user = user.split(':').next().unwrap();
    assert!(user != "root" && user != "0", "runs as {user}");
    assert!(
        runtime
            .iter()
            .any(|i| i.starts_with("RUN ") && i.contains("useradd") && i.contains(user)),
        "the user {user} is not created"
    );
    let volume = runtime
        .iter()
        .find_map(|i| i.strip_prefix("VOLUME "))
        .expect("a VOLUME");
    let volumes: Vec<String> = serde_json::from_str(volume).expect("VOLUME in JSON form");
    let last = |name: &str| -> Vec<String> {
        let v = runtime
            .iter()
            .filter_map(|i| i.strip_prefix(name))
            .next_back()
            .unwrap_or_else(|| panic!("no {name}"));
        serde_json::from_str(v).unwrap_or_else(|e| panic!("{name}not in JSON form: {e}"))
    };
    assert_eq!(last("ENTRYPOINT "), ["spillway"]);
    let cmd = last("CMD ");
    assert_eq!(cmd, ["run", "--config", "/etc/spillway/spillway.toml"]);

    // What it runs is what the unit runs, on the example config's folders.
    let unit = parse_unit(&read_text(&deploy_file("spillway.service")));
    assert_eq!(
        unit_value(&unit, "Service", "ExecStart"),
        format!("/usr/bin/spillway {}", cmd.join(" "))
    );
    assert!(
        runtime
            .iter()
            .any(|i| i == "COPY deploy/spillway.toml /etc/spillway/spillway.toml"),
        "the example config is not installed where CMD reads it"
    );
    let cfg = deploy_config();
    for (section, key) in [
        ("server", "socket_path"),
        ("server", "data_dir"),
        ("admin", "socket_path"),
    ] {
        let p = Path::new(deploy_str(&cfg, section, key));
        assert!(
            volumes.iter().any(|v| p.starts_with(v)),
            "{section}.{key} = {} is on no VOLUME {volumes:?}",
            p.display()
        );
    }
    // Every file copied from the build context exists, and the context
    // leaves the build output out.
    for i in &instructions {
        let Some(args) = i.strip_prefix("COPY ") else {
            continue;
        };
        if args.starts_with("--from") {
            continue;
        }
        let src = args.split_whitespace().next().unwrap();
        assert!(repo_root().join(src).exists(), "COPY {src}: no such file");
    }
    let ignore = read_text(&deploy_file("Dockerfile.dockerignore"));
    assert!(ignore.lines().any(|l| l.trim() == "target/"), "{ignore}");
}

/// The Dockerfile's runtime stage without Docker: the binary installed
/// 0755, the example config with its paths moved under a scratch root, the data
/// folder 0700 and the socket folder 0710 owned by 10001, and the daemon
/// started as uid and gid 10001 with no other group. It must start, take
/// a Sync record and stop cleanly on SIGTERM.
#[test]
fn the_container_layout_runs_the_daemon_as_its_unprivileged_user() {
    if !require_root("run the daemon as uid 10001") {
        return;
    }
    const ID: u32 = 10001;
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    let dir = |rel: &str, mode: u32, owned: bool| {
        let p = root.join(rel);
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        if owned {
            std::os::unix::fs::chown(&p, Some(ID), Some(ID)).unwrap();
        }
        p
    };
    let bin = dir("usr/bin", 0o755, false).join("spillway");
    fs::copy(spillway_bin(), &bin).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir("var/lib/spillway", 0o700, true);
    let run = dir("run/spillway", 0o710, true);
    let etc = dir("etc/spillway", 0o755, false);

    let mut cfg = deploy_config();
    let moved = |v: &str| {
        let v = v
            .replacen("/var/lib/spillway", &data.display().to_string(), 1)
            .replacen("/run/spillway", &run.display().to_string(), 1);
        toml::Value::String(v)
    };
    for (section, key) in [
        ("server", "socket_path"),
        ("server", "data_dir"),
        ("admin", "socket_path"),
    ] {
        let moved = moved(deploy_str(&cfg, section, key));
        cfg[section][key] = moved;
    }
    // The image's `spillway` group is the daemon's own gid, which this
    // machine's group database does not list: left out, the socket gets
    // the process's gid all the same.
    cfg["server"].as_table_mut().unwrap().remove("socket_group");
    cfg["server"]["shards"] = toml::Value::Integer(1);
    cfg["admin"]["metrics_address"] = toml::Value::String(METRICS_ON_ANY_PORT.into());
    let config = etc.join("spillway.toml");
    fs::write(&config, toml::to_string(&cfg).unwrap()).unwrap();
    let socket = PathBuf::from(cfg["server"]["socket_path"].as_str().unwrap());

    let log = File::create(root.join("stderr.log")).unwrap();
    let mut cmd = Command::new(&bin);
    cmd.args(["run", "--config"])
        .arg(&config)
        .current_dir(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: between fork and exec, only raw system calls.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let groups = [ID as libc::gid_t];
            if libc::setgroups(1, groups.as_ptr()) != 0
                || libc::setgid(ID) != 0
                || libc::setuid(ID) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let log_text = || fs::read_to_string(root.join("stderr.log")).unwrap_or_default();
    let mut port = 0;
    let answered = wait_until(Duration::from_secs(20), || {
        port = metrics_port_in_log(&log_text()).unwrap_or(0);
        port != 0
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            && http_get(port, "/health").starts_with("HTTP/1.1 200")
    });
    assert!(answered, "no /health answer; log:\n{}", log_text());
    assert_eq!(mode_of(&socket), 0o660);
    let meta = fs::metadata(&socket).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (ID, ID), "socket owner");
    let mut client = spillway_client::Client::connect(&socket).unwrap();
    client
        .push(spillway_client::Tier::Sync, b"from the container layout")
        .unwrap_or_else(|e| panic!("push: {e}; log:\n{}", log_text()));
    drop(client);
    let shard = data.join("wab").join("shard-000");
    for entry in fs::read_dir(&shard).unwrap().flatten() {
        let m = entry.metadata().unwrap();
        assert_eq!(
            m.uid(),
            ID,
            "{} is not the daemon's",
            entry.path().display()
        );
    }
    // Nothing listens on the shipped sink's address here: the sink
    // retries and the daemon is degraded (ctl health exits 3). The
    // image's HEALTHCHECK, run as written, must call that healthy: the
    // container has to stay up to buffer through the outage.
    let healthcheck = healthcheck_command(&bin, &config);
    let health = |argv: &[&str]| {
        Command::new(&bin)
            .args(["ctl", "--config"])
            .arg(&config)
            .args(argv)
            .output()
            .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(20), || health(&["health"])
            .status
            .code()
            == Some(3)),
        "not degraded with the sink's address closed: {:?}; log:\n{}",
        health(&["health"]),
        log_text()
    );
    let checked = Command::new("sh")
        .args(["-c", &healthcheck])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "the Dockerfile's HEALTHCHECK ({healthcheck}) calls a degraded daemon unhealthy: {checked:?}"
    );
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = wait_timeout(&mut child, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("still running 15 s after SIGTERM; log:\n{}", log_text()));
    assert!(status.success(), "{status}; log:\n{}", log_text());
    let checked = Command::new("sh")
        .args(["-c", &healthcheck])
        .output()
        .unwrap();
    assert!(
        !checked.status.success(),
        "the Dockerfile's HEALTHCHECK calls a stopped daemon healthy: {checked:?}"
    );
}

/// The Dockerfile's HEALTHCHECK command (the shell form), with `spillway`
/// and the image's config path replaced by `bin` and `config`.
fn healthcheck_command(bin: &Path, config: &Path) -> String {
    let dockerfile = read_text(&deploy_file("Dockerfile"));
    let joined = dockerfile.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.starts_with("HEALTHCHECK "))
        .expect("the Dockerfile has a HEALTHCHECK");
    let command = line
        .split_once(" CMD ")
        .expect("HEALTHCHECK ... CMD ...")
        .1
        .trim();
    assert!(
        !command.starts_with('['),
        "the HEALTHCHECK is in exec form, which cannot map ctl health's 3 (degraded) to healthy: {command}"
    );
    command
        .replacen("spillway ", &format!("{} ", bin.display()), 1)
        .replace("/etc/spillway/spillway.toml", &config.display().to_string())
}

/// deploy/README.md tells Prometheus to scrape the address the shipped
/// config serves metrics on, and describes only files that are there.
#[test]
fn the_deploy_readme_scrapes_the_shipped_metrics_address_and_lists_what_is_there() {
    let readme = read_text(&deploy_file("README.md"));
    let config = read_text(&deploy_file("spillway.toml"));
    let shipped = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("metrics_address = "))
        .map(|v| v.trim_matches('"').to_string())
        .expect("deploy/spillway.toml sets admin.metrics_address");
    assert!(
        readme.contains(&format!("metrics_address = \"{shipped}\"")),
        "deploy/README.md's [admin] example is not the shipped {shipped}"
    );
    assert!(
        readme.contains(&format!("targets: [\"{shipped}\"]")),
        "deploy/README.md's scrape target is not the shipped {shipped}"
    );
    assert!(
        !readme.contains("another change"),
        "deploy/README.md promises files another change adds"
    );
    for listed in readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
    {
        assert!(
            deploy_file(listed).exists(),
            "deploy/README.md lists {listed}, which is not in deploy/"
        );
    }
}
