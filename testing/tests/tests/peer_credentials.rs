//! Peer credentials on the Unix socket (`server.allowed_uids`,
//! `server.allowed_gids`), against the real binary: a peer whose uid and
//! gid are not allowed is closed at accept before a byte is answered,
//! counted as `connections_refused{reason="peer_uid"}` and logged with its
//! uid, gid and pid; an allowed one pushes as usual. As root, a forked
//! child that drops to another uid and gid is the refused peer, and an
//! allowed gid lets it in.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use spillway_tests::tls::Ca;
use spillway_tests::*;

/// `connections_refused{reason="REASON"}` of `ctl stats`.
fn refused(d: &Daemon, reason: &str) -> u64 {
    let stats = d.ctl(&["stats", "--flat"]);
    let prefix = format!("connections_refused{{reason=\"{reason}\"}} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in ctl stats:\n{stats}"))
}

fn own_ids() -> (u32, u32) {
    // SAFETY: getuid and getgid cannot fail.
    unsafe { (libc::getuid(), libc::getgid()) }
}

/// An id that is not `id` (and not u32::MAX, which is no id).
fn other_than(id: u32) -> u32 {
    if id == 4242 {
        4243
    } else {
        4242
    }
}

#[test]
fn a_peer_not_allowed_is_closed_at_accept_counted_and_logged() {
    let (uid, gid) = own_ids();
    let mut d = Daemon::configure(&format!(
        "[server]\nallowed_uids = [{}]\nallowed_gids = [{}]\n",
        other_than(uid),
        other_than(gid)
    ));
    d.spawn_listening();
    let mut c = d.raw();
    let _ = c.try_send(&health_frame());
    c.expect_closed_within(Duration::from_secs(5));
    assert_eq!(refused(&d, "peer_uid"), 1);
    assert_eq!(refused(&d, "connections_max"), 0);
    let stats = d.ctl(&["stats", "--flat"]);
    assert!(stats.contains("connections_refused 1\n"), "{stats}");
    let metrics = d.ctl(&["metrics"]);
    assert!(
        metrics.contains("spillway_connections_refused_total{reason=\"peer_uid\"} 1"),
        "{metrics}"
    );
    let log = d.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("connection refused: the peer's uid and gid"))
        .unwrap_or_else(|| panic!("no refusal logged:\n{log}"));
    assert!(
        line.contains(&format!("uid {uid} gid {gid} pid {}", std::process::id())),
        "the log names the peer's uid, gid and pid: {line}"
    );
    // Nothing of it reached the daemon's records.
    assert!(d.read_all_records().is_empty());
}

#[test]
fn a_peer_matching_either_list_pushes() {
    let (uid, gid) = own_ids();
    for config in [
        format!("[server]\nallowed_uids = [{}, {uid}]\n", other_than(uid)),
        format!(
            "[server]\nallowed_uids = [{}]\nallowed_gids = [{gid}]\n",
            other_than(uid)
        ),
    ] {
        let d = Daemon::start(&config);
        let mut client = d.client();
        client
            .push(Tier::Sync, b"let in")
            .unwrap_or_else(|e| panic!("{config}: {e}"));
        assert_eq!(refused(&d, "peer_uid"), 0, "{config}");
    }
}

#[test]
fn an_empty_list_is_a_config_error_naming_the_key() {
    for key in ["allowed_uids", "allowed_gids"] {
        let d = Daemon::configure(&format!("[server]\n{key} = []\n"));
        let out = run_spillway(
            &["check".as_ref(), d.config_path().as_os_str()],
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{key} = [] was accepted");
        let text = out.stderr + &out.stdout;
        assert!(
            text.contains(&format!("server.{key}")) && text.contains("empty"),
            "{text}"
        );
    }
}

/// What a forked child that dropped to `uid`/`gid` saw when it sent a
/// health check: `Some(true)` answered, `Some(false)` closed unanswered.
/// Only async-signal-safe calls run in the child (the test is threaded).
fn health_as(uid: u32, gid: u32, socket: &Path) -> Option<bool> {
    let path = CString::new(socket.as_os_str().as_bytes()).unwrap();
    // SAFETY: an all-zero sockaddr_un is valid; the path fits (checked).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_bytes_with_nul();
    assert!(bytes.len() <= addr.sun_path.len());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let frame = health_frame();
    let timeout = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    // SAFETY: the child calls only async-signal-safe functions on memory
    // prepared before the fork, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                libc::_exit(10);
            }
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            if fd < 0 {
                libc::_exit(11);
            }
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            );
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            if libc::connect(fd, &addr as *const _ as *const libc::sockaddr, len) != 0 {
                libc::_exit(12);
            }
            // A refused peer may find the socket closed before its write.
            libc::send(
                fd,
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                libc::MSG_NOSIGNAL,
            );
            let mut buf = [0u8; 64];
            let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
            libc::_exit(match n {
                0 => 0,
                n if n > 0 => 1,
                _ if *libc::__errno_location() == libc::ECONNRESET => 0,
                _ => 13,
            });
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
        Some(0) => Some(false),
        Some(1) => Some(true),
        other => {
            eprintln!("child dropping to uid {uid} gid {gid} failed: exit {other:?} (10 setuid, 11 socket, 12 connect, 13 read)");
            None
        }
    }
}

#[test]
fn a_child_dropped_to_another_uid_is_refused_unless_its_gid_is_allowed() {
    let (uid, _) = own_ids();
    if uid != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs the tests as root; this one drops a child's privileges and needs it"
        );
        eprintln!("SKIPPED: not root, so no child can drop to another uid (CI runs it as root)");
        return;
    }
    const NOBODY: u32 = 65534;
    for (allowed_gids, answered) in [
        (String::new(), false),
        (format!("allowed_gids = [{NOBODY}]\n"), true),
    ] {
        // Socket 0666 in folders others may enter: the file modes let the
        // child in, so only the peer check can refuse it.
        let d = Daemon::start(&format!(
            "[server]\nsocket_mode = \"0666\"\nallowed_uids = [0]\n{allowed_gids}"
        ));
        let run = d.socket_path().parent().unwrap();
        for dir in [run, run.parent().unwrap()] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        let got = health_as(NOBODY, NOBODY, d.socket_path())
            .expect("the child could not reach the socket");
        assert_eq!(
            got, answered,
            "uid {NOBODY} gid {NOBODY} with allowed_uids = [0] {allowed_gids:?}"
        );
        assert_eq!(refused(&d, "peer_uid"), u64::from(!answered));
        if !answered {
            assert!(
                d.stderr()
                    .contains(&format!("uid {NOBODY} gid {NOBODY} pid ")),
                "{}",
                d.stderr()
            );
        }
        // The daemon's own user (root, allowed) still pushes.
        d.client().push(Tier::Sync, b"root").expect("root pushes");
    }
}

/// `spillway check` on `d`'s config: whether it passed, and what it said.
fn check(d: &Daemon) -> (bool, String) {
    let out = std::process::Command::new(spillway_bin())
        .arg("check")
        .arg(d.config_path())
        .env("NO_COLOR", "1")
        .output()
        .expect("running spillway check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// `allowed_uids` (or `allowed_gids`) beside `[server.tcp]` or
/// `[server.http]` with `tls = false`: a uid refused on the socket could
/// push through the door, so `check` and `run` both refuse the config,
/// naming the list, the door's `tls` and what to do. The same doors with
/// TLS on, or the plaintext doors without a list, still pass both.
#[test]
fn a_uid_list_beside_a_plaintext_door_is_refused_by_check_and_run() {
    for (list, door) in [
        ("allowed_uids = [0]", "tcp"),
        ("allowed_uids = [0]", "http"),
        ("allowed_gids = [0]", "tcp"),
    ] {
        let list_key = format!("server.{}", list.split(' ').next().unwrap());
        let mut d = Daemon::configure(&format!(
            "[server]\n{list}\n[server.{door}]\nlisten = \"127.0.0.1:{}\"\ntls = false\n",
            free_port()
        ));
        let want = [
            list_key.as_str(),
            &format!("server.{door}.tls = false"),
            "ca_file",
            &format!("remove [server.{door}]"),
        ];
        let (passed, said) = check(&d);
        assert!(
            !passed && want.iter().all(|w| said.contains(w)),
            "check of {list} with a plaintext {door} door did not refuse it naming {want:?}:\n{said}"
        );
        let StartOrExit::Exited(run) = d.run_to_exit_or_start(Duration::from_secs(30)) else {
            panic!("run started with {list} beside a plaintext {door} door");
        };
        assert!(
            !run.status.success() && want.iter().all(|w| run.stderr.contains(w)),
            "run of {list} with a plaintext {door} door did not refuse it naming {want:?}:\n{}",
            run.stderr
        );
    }
    // TLS on (mutual) with the list, and plaintext without it: both start.
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("spillway test CA");
    let (cert, key) = ca
        .leaf("spillway", &["localhost", "127.0.0.1"], false)
        .write(tmp.path(), "server");
    let client_ca = tmp.path().join("client-ca.crt");
    std::fs::write(&client_ca, ca.cert.pem()).unwrap();
    let tls = format!("cert_file = {cert:?}\nkey_file = {key:?}\nca_file = {client_ca:?}\n");
    for config in [
        format!(
            "[server]\nallowed_uids = [0]\n[server.tcp]\nlisten = \"127.0.0.1:{}\"\n{tls}[server.http]\nlisten = \"127.0.0.1:{}\"\n{tls}",
            free_port(),
            free_port()
        ),
        format!(
            "[server]\n[server.tcp]\nlisten = \"127.0.0.1:{}\"\ntls = false\n[server.http]\nlisten = \"127.0.0.1:{}\"\ntls = false\n",
            free_port(),
            free_port()
        ),
    ] {
        let mut d = Daemon::configure(&config);
        let (passed, said) = check(&d);
        assert!(passed, "check refused\n{config}\n{said}");
        assert!(
            matches!(
                d.run_to_exit_or_start(Duration::from_secs(30)),
                StartOrExit::Started
            ),
            "run did not start on\n{config}\n{}",
            d.stderr()
        );
    }
}
