//! What a second attack found (issue 17), each fault end to end against
//! the real binary: a reload to a library that is not a spillway plugin, a
//! reload held in a slow build (a 30 s health check, a host that drops
//! SYNs, a build past its deadline), 1,500 connections held to the metrics
//! address under a low descriptor limit, `ctl` against a stopped daemon and
//! a socket that floods, `check` on a FIFO, `/dev/zero` and a deep file,
//! `push` of an oversized line, `/ready` while a delivery hangs, and `check`
//! and `run` refusing the same configs.
//!
//! Timing is bounded only from above, by liveness bounds far above the
//! usual latency (milliseconds) and far below the faults' (seconds).

use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spillway_tests::plugins::*;
use spillway_tests::receiver::HttpReceiver;
use spillway_tests::*;

/// What "answers within its usual latency" is held to while a reload
/// blocks: milliseconds usually, a second at worst on a loaded CI machine,
/// against the 5 to 30 s the faults froze them for.
const PROMPT: Duration = Duration::from_secs(1);
/// The same for `spillway ctl health` measured end to end (a new process
/// each time) while a reload is held 30 s: exec and loading a large binary
/// on a loaded 2-core CI machine took 1.2 s once (the daemon's own answers
/// in that run were 16 ms and 4 ms); waiting for the reload would take tens
/// of seconds. (Where a build is held only 1.5 s, `PROMPT` stays the bound.)
const PROCESS_PROMPT: Duration = Duration::from_secs(3);
/// A sink that confirms everything at once, so `ctl health` says ready.
const NOOP_SINK: &str = "[sink]\ntype = \"noop\"\n";
/// Upper bound for "eventually delivered".
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A `[sink]` table for an HTTP receiver, with quick retries.
fn http_sink(rx: &HttpReceiver) -> String {
    format!(
        "[sink]\ntype = \"http\"\nurl = \"{}\"\nlinger_ms = 5\nretry_initial_ms = 20\nretry_max_ms = 300\n",
        rx.url()
    )
}

/// An `[admin]` table serving `GET /ready` on a loopback port the daemon
/// picks ([`Daemon::metrics_port`] reads it from the log).
fn metrics_on() -> String {
    format!("[admin]\nmetrics_address = \"{METRICS_ON_ANY_PORT}\"\n")
}

/// Push `"{tag}:{i}"` for `i in 0..n` at Sync, then wait until `rx` accepted
/// every one: the running sink still delivers.
fn still_delivers(d: &Daemon, rx: &HttpReceiver, tag: &str, n: usize) {
    let mut c = d.client();
    let want: Vec<String> = (0..n).map(|i| format!("{tag}:{i}")).collect();
    for p in &want {
        c.push(Tier::Sync, p.as_bytes())
            .unwrap_or_else(|e| panic!("push {p}: {e}; log:\n{}", d.stderr()));
    }
    rx.wait_for_payloads(&want, DELIVERY_TIMEOUT);
}

/// `spillway <args>`, waiting at most `timeout`; also how long it took.
fn spillway_timed(args: &[&str], timeout: Duration) -> (Finished, Duration) {
    let argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let started = Instant::now();
    let f = run_spillway(&argv, timeout);
    (f, started.elapsed())
}

/// `spillway check <config>`.
fn check(config: &Path) -> Finished {
    run_spillway(
        &["check".as_ref(), config.as_os_str()],
        Duration::from_secs(30),
    )
}

fn assert_names(what: &str, text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{what}: {n:?} missing from:\n{text}");
    }
}

/// `ctl reload` (finished as `f`) failed and said each of `needles`;
/// returns what it said. `what` names the change that was offered.
/// `ctl reload` succeeded, with a warning naming each of `needles` and
/// saying the sink was applied all the same; what it said.
fn assert_reload_applied_with_warning(f: &Finished, needles: &[&str]) -> String {
    let said = format!("{}{}", f.stdout, f.stderr);
    assert!(f.status.success(), "the reload was refused: {said}");
    let mut all = vec!["warning: ", "applied all the same"];
    all.extend_from_slice(needles);
    assert_names("ctl reload", &said, &all);
    said
}

/// Points the daemon's sink back at `rx` and reloads (which must succeed
/// without a warning).
fn back_to(d: &mut Daemon, rx: &HttpReceiver) {
    d.reconfigure(&format!("{}{}", http_sink(rx), metrics_on()));
    let f = ctl_socket(&admin_socket(d), &["reload"]);
    let said = format!("{}{}", f.stdout, f.stderr);
    assert!(
        f.status.success() && !said.contains("warning"),
        "the reload back to {}: {said}",
        rx.url()
    );
}

fn assert_reload_refused(f: &Finished, what: &str, needles: &[&str]) -> String {
    let said = format!("{}{}", f.stdout, f.stderr);
    assert!(!f.status.success(), "{what} was accepted: {said}");
    assert_names("ctl reload", &said, needles);
    said
}

// ---------------------------------------------------------------- 1. a foreign .so

/// The AddressSanitizer runtime gcc installs (its constructors end the
/// process when it is loaded after libc), else libc itself: a real shared
/// library of this machine that is not a spillway plugin.
fn foreign_system_library() -> PathBuf {
    let out = Command::new("cc")
        .arg("-print-file-name=libasan.so")
        .output()
        .expect("this test asks `cc` where libasan is (apt-get install gcc)");
    let asan = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if asan.is_absolute() && asan.exists() {
        return fs::canonicalize(asan).unwrap();
    }
    ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("neither libasan.so nor libc.so.6 found to use as a foreign library")
}

/// Reload from a running HTTP sink to the plugin at `so`: refused, the
/// message names each of `names`, the daemon still runs and delivers to
/// its old sink; `check` on the same file fails naming them too.
fn plugin_reload_is_refused(so: &Path, names: &[&str]) {
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&http_sink(&rx));
    still_delivers(&d, &rx, "before", 5);
    d.reconfigure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\n",
        toml_str(so.display().to_string())
    ));
    let f = ctl_socket(&admin_socket(&d), &["reload"]);
    let said = assert_reload_refused(
        &f,
        &format!("a reload to {}", so.display()),
        &["reload rejected"],
    );
    assert_names("ctl reload", &said, names);
    assert!(
        d.is_running(),
        "the daemon died on a reload to {}; log:\n{}",
        so.display(),
        d.stderr()
    );
    still_delivers(&d, &rx, "after", 10);
    let c = check(d.config_path());
    assert!(!c.status.success(), "check passed {}: {c:?}", so.display());
    assert_names("check", &c.stderr, names);
    d.terminate();
}

#[test]
fn a_reload_to_a_foreign_system_library_is_refused_without_loading_it() {
    let lib = foreign_system_library();
    plugin_reload_is_refused(
        &lib,
        &[&lib.display().to_string(), "spillway_sink_plugin_v1"],
    );
}

#[test]
fn a_reload_to_a_shared_object_without_the_entry_symbol_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(
        dir.path(),
        "libnot_a_plugin",
        "int not_a_plugin(void) { return 42; }\n",
    );
    plugin_reload_is_refused(&so, &[&so.display().to_string(), "spillway_sink_plugin_v1"]);
}

// ---------------------------------------------------------------- 2. a build that blocks

/// The sink ABI v1 in C (`sink-sdk/src/abi.rs`), with `owned` (a string the
/// plugin hands the host) and `free_string`: what every C plugin below
/// starts with.
const C_PLUGIN_ABI: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char *ptr; size_t len; } spw_owned_str;
typedef struct { uint64_t max_records; uint64_t max_bytes; } spw_limits;
typedef struct {
    uint32_t shard; uint8_t tier; uint64_t seq; uint64_t arrival_unix_us;
    const uint8_t *payload; size_t payload_len;
} spw_record;
typedef struct {
    uint32_t kind; uint64_t retry_after_ms; spw_owned_str reason;
    uint8_t *record_codes; spw_owned_str *record_reasons; size_t records_len;
} spw_outcome;
typedef struct {
    uint32_t abi_version; void *ctx;
    void (*log)(void *ctx, uint8_t level, const uint8_t *target, size_t target_len,
                const uint8_t *msg, size_t msg_len);
    _Bool (*log_enabled)(void *ctx, uint8_t level);
} spw_host_api;
typedef struct {
    uint32_t abi_version;
    const char *sdk_version, *plugin_name, *plugin_version;
    void *(*create)(const uint8_t *options_toml, size_t options_len,
                    const spw_host_api *host, spw_owned_str *out_error);
    void (*destroy)(void *instance);
    int32_t (*limits)(void *instance, spw_limits *out);
    int32_t (*deliver)(void *instance, const spw_record *records, size_t n,
                       spw_outcome *out);
    int32_t (*health)(void *instance, spw_owned_str *out_msg);
    void (*free_string)(spw_owned_str *s);
    void (*free_outcome)(spw_outcome *out);
} spw_vtable;

static spw_owned_str owned(const char *text) {
    spw_owned_str s = { malloc(strlen(text)), strlen(text) };
    if (s.ptr) memcpy(s.ptr, text, s.len); else s.len = 0;
    return s;
}

static void free_string(spw_owned_str *s) { free(s->ptr); s->ptr = NULL; s->len = 0; }
"#;

/// A C plugin whose health check writes `started` (an option) and then
/// sleeps `health_sleep_s` seconds (an option) before saying it is
/// unhealthy; it delivers by committing everything.
const SLOW_HEALTH_BODY: &str = r#"
typedef struct { int sleep_s; char started[4096]; } slow;

static void *create(const uint8_t *options, size_t len, const spw_host_api *h,
                    spw_owned_str *out_error) {
    (void)h;
    slow *s = calloc(1, sizeof *s);
    char *text = calloc(1, len + 1);
    if (!s || !text) { *out_error = owned("out of memory"); free(s); free(text); return NULL; }
    memcpy(text, options, len);
    const char *at = strstr(text, "health_sleep_s = ");
    if (at) s->sleep_s = atoi(at + strlen("health_sleep_s = "));
    at = strstr(text, "started = \"");
    if (at) sscanf(at + strlen("started = \""), "%4095[^\"]", s->started);
    free(text);
    return s;
}

static void destroy(void *instance) { free(instance); }

static int32_t limits(void *instance, spw_limits *out) {
    (void)instance;
    out->max_records = 1000;
    out->max_bytes = 1 << 20;
    return 0;
}

static int32_t deliver(void *instance, const spw_record *records, size_t n,
                       spw_outcome *out) {
    (void)instance; (void)records; (void)n;
    out->kind = 0; /* committed */
    return 0;
}

static int32_t health(void *instance, spw_owned_str *out_msg) {
    slow *s = instance;
    if (s->started[0]) {
        FILE *f = fopen(s->started, "w");
        if (f) fclose(f);
    }
    sleep((unsigned)s->sleep_s);
    *out_msg = owned("slept through its health check");
    return 1; /* unhealthy */
}

static void free_outcome(spw_outcome *out) { free_string(&out->reason); }

static const spw_vtable VTABLE = {
    1, "0.1.0", "slow-health", "1.0.0",
    create, destroy, limits, deliver, health, free_string, free_outcome,
};

const spw_vtable *spillway_sink_plugin_v1(void) { return &VTABLE; }
"#;

/// The worst of each latency measured while a reload was held.
#[derive(Debug, Default)]
struct Worst {
    samples: usize,
    /// Connect, push one Sync record, get its ack, on a new connection.
    new_connection: Duration,
    /// `spillway ctl health` (the process, end to end).
    ctl_health: Duration,
    /// `GET /ready` on a new connection.
    ready: Duration,
    /// `/ready` answers that were not 200 (the old sink is fine throughout).
    not_ready: Vec<String>,
}

/// Measures new connections, `ctl health` and `GET /ready` over and over
/// until `done()`, and returns the worst of each.
fn measure_while(d: &Daemon, metrics_port: u16, mut done: impl FnMut() -> bool) -> Worst {
    let mut w = Worst::default();
    let admin = admin_socket(d).display().to_string();
    let mut i = 0u64;
    while !done() {
        let t = Instant::now();
        let mut c = d.client();
        c.push(Tier::Sync, format!("during:{i}").as_bytes())
            .unwrap_or_else(|e| panic!("a push on a new connection during the reload: {e}"));
        w.new_connection = w.new_connection.max(t.elapsed());
        drop(c);

        let (f, took) = spillway_timed(
            &["ctl", "--admin-socket", &admin, "health"],
            Duration::from_secs(30),
        );
        // Answered (0: ready, 3: degraded, 1: not ready), never "could
        // not ask" (2).
        assert!(
            matches!(f.status.code(), Some(0 | 1 | 3)),
            "ctl health during the reload: {f:?}"
        );
        w.ctl_health = w.ctl_health.max(took);

        let t = Instant::now();
        let answer = http_get(metrics_port, "/ready");
        w.ready = w.ready.max(t.elapsed());
        if !answer.starts_with("HTTP/1.1 200") {
            w.not_ready.push(answer);
        }
        w.samples += 1;
        i += 1;
        thread::sleep(Duration::from_millis(200));
    }
    w
}

fn assert_prompt(w: &Worst, what: &str) {
    eprintln!(
        "{what}: {} samples; worst new connection + Sync ack {:?}, ctl health {:?}, GET /ready {:?}",
        w.samples, w.new_connection, w.ctl_health, w.ready
    );
    assert!(w.samples >= 3, "{what}: too few samples: {w:?}");
    assert!(
        w.new_connection < PROMPT && w.ctl_health < PROCESS_PROMPT && w.ready < PROMPT,
        "{what}: something waited for the reload: {w:?}"
    );
    assert!(
        w.not_ready.is_empty(),
        "{what}: /ready said not ready while the old sink delivered: {:?}",
        w.not_ready
    );
}

/// Starts `ctl reload` (deadline `timeout`) on a thread of its own.
fn reload_in_background(d: &Daemon, timeout_s: u64) -> thread::JoinHandle<(Finished, Duration)> {
    let admin = admin_socket(d).display().to_string();
    thread::spawn(move || {
        spillway_timed(
            &[
                "ctl",
                "--admin-socket",
                &admin,
                "--timeout",
                &timeout_s.to_string(),
                "reload",
            ],
            Duration::from_secs(timeout_s + 30),
        )
    })
}

#[test]
fn a_reload_held_in_a_30_s_health_check_keeps_connections_ctl_and_ready_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(
        dir.path(),
        "libslow_health",
        &format!("{C_PLUGIN_ABI}{SLOW_HEALTH_BODY}"),
    );
    let started = dir.path().join("health-started");
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&format!("{}{}", http_sink(&rx), metrics_on()));
    let port = d.metrics_port();
    still_delivers(&d, &rx, "before", 5);

    d.reconfigure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\nbuild_timeout_ms = 60000\n[sink.options]\nhealth_sleep_s = 30\nstarted = {}\n{}",
        toml_str(so.display().to_string()),
        toml_str(started.display().to_string()),
        metrics_on()
    ));
    let reload = reload_in_background(&d, 90);
    assert!(
        wait_until(Duration::from_secs(20), || started.exists()),
        "the new sink's health check never began; log:\n{}",
        d.stderr()
    );
    let held_from = Instant::now();
    let worst = measure_while(&d, port, || {
        held_from.elapsed() > Duration::from_secs(25) || reload.is_finished()
    });
    let (f, took) = reload.join().unwrap();
    assert_prompt(&worst, "30 s health check");
    // Unhealthy is applied with the answer as a warning (an operator
    // re-points a sink during an outage); the check still held the reload.
    let said = assert_reload_applied_with_warning(&f, &["slept through its health check"]);
    assert!(
        took >= Duration::from_secs(28),
        "the reload returned after {took:?}: the health check did not hold it ({said})"
    );
    back_to(&mut d, &rx);
    still_delivers(&d, &rx, "after", 10);
    d.terminate();
}

#[test]
fn a_health_check_past_build_timeout_ms_is_a_warning_and_never_holds_the_next_reload() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(
        dir.path(),
        "libhour_health",
        &format!("{C_PLUGIN_ABI}{SLOW_HEALTH_BODY}"),
    );
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&format!("{}{}", http_sink(&rx), metrics_on()));
    let port = d.metrics_port();
    d.reconfigure(&format!(
        "[sink]\ntype = \"plugin\"\npath = {}\nbuild_timeout_ms = 1500\n[sink.options]\nhealth_sleep_s = 3600\n{}",
        toml_str(so.display().to_string()),
        metrics_on()
    ));
    let reload = reload_in_background(&d, 30);
    let worst = measure_while(&d, port, || reload.is_finished());
    let (f, took) = reload.join().unwrap();
    assert_reload_applied_with_warning(&f, &["sink.build_timeout_ms = 1500"]);
    assert!(
        took < Duration::from_secs(10),
        "the reload took {took:?} with a 1.5 s deadline"
    );
    assert!(worst.samples >= 1, "{worst:?}");
    assert!(
        worst.new_connection < PROMPT && worst.ctl_health < PROMPT && worst.ready < PROMPT,
        "something waited for the build: {worst:?}"
    );
    // The hour-long check still runs: the next reload is applied at once
    // all the same (its own check is not run, and it says so), so an
    // operator can always re-point the sink.
    d.reconfigure(&format!("{}{}", http_sink(&rx), metrics_on()));
    let f = ctl_socket(&admin_socket(&d), &["reload"]);
    assert_reload_applied_with_warning(&f, &["an earlier health check has been running"]);
    still_delivers(&d, &rx, "after", 10);
    d.terminate();
}

/// A loopback TCP port whose accept queue is full, so the kernel drops new
/// SYNs there (as a host behind a firewall that drops them does): a
/// listener with a backlog of 0 that never accepts, and the connections
/// that filled it.
struct SynDropper {
    _listener: TcpListener,
    _filling: Vec<TcpStream>,
    addr: SocketAddr,
}

impl SynDropper {
    fn start() -> SynDropper {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen(2) on a socket we own; a second listen only
        // changes the backlog.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let addr = listener.local_addr().unwrap();
        let mut filling = Vec::new();
        for _ in 0..64 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(s) => filling.push(s),
                Err(_) => {
                    return SynDropper {
                        _listener: listener,
                        _filling: filling,
                        addr,
                    }
                }
            }
        }
        panic!("64 connections to a backlog-0 listener all completed: SYNs are not dropped here");
    }
}

#[test]
fn a_reload_to_an_http_host_that_drops_syns_keeps_connections_ctl_and_ready_prompt() {
    let dropper = SynDropper::start();
    let rx = HttpReceiver::start();
    let mut d = Daemon::start(&format!("{}{}", http_sink(&rx), metrics_on()));
    let port = d.metrics_port();
    d.reconfigure(&format!(
        "[sink]\ntype = \"http\"\nurl = \"http://{}/ingest\"\n{}",
        dropper.addr,
        metrics_on()
    ));
    let reload = reload_in_background(&d, 30);
    let worst = measure_while(&d, port, || reload.is_finished());
    let (f, took) = reload.join().unwrap();
    eprintln!("reload to a SYN-dropping host answered after {took:?}: {f:?}");
    assert_prompt(&worst, "SYN-dropping host");
    // A host that never answers fails the health check: applied, with the
    // answer as a warning; the records wait for a sink that answers.
    assert_reload_applied_with_warning(&f, &["fails its health check"]);
    let mut c = d.client();
    c.push(Tier::Sync, b"held:0").unwrap();
    back_to(&mut d, &rx);
    rx.wait_for_payloads(&["held:0"], DELIVERY_TIMEOUT);
    still_delivers(&d, &rx, "after", 10);
    d.terminate();
}

// ---------------------------------------------------------------- 3. descriptors

/// A TCP connection to loopback `port` started without waiting for it
/// (non-blocking connect): it completes, waits in the backlog, or is
/// dropped, without holding up the caller.
fn connect_tcp_nonblocking(port: u16) -> Option<OwnedFd> {
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid sockaddr_in and its size.
    let rc = unsafe {
        libc::connect(
            fd,
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    let in_progress = std::io::Error::last_os_error().raw_os_error() == Some(libc::EINPROGRESS);
    (rc == 0 || in_progress).then_some(owned)
}

/// Raises this process's soft descriptor limit to at least `n`.
fn raise_own_nofile(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct we pass.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        assert!(
            lim.rlim_max >= n as libc::rlim_t,
            "this test holds {n} sockets; the hard descriptor limit is {}",
            lim.rlim_max
        );
        if lim.rlim_cur < n as libc::rlim_t {
            lim.rlim_cur = n as libc::rlim_t;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

#[test]
fn holding_1500_connections_to_the_metrics_port_under_a_low_fd_limit_starves_nothing() {
    // 100 producers + 64 + (8 per shard + 2 per sink x 1 sink) x 2 shards
    // + 16 per admin listener x 2: the tightest limit the daemon accepts
    // for this config.
    const LIMIT: u64 = 100 + 64 + (8 + 2) * 2 + 16 * 2;
    raise_own_nofile(4096);
    let mut d = Daemon::configure(&format!(
        "[server]\nconnections_max = 100\n{NOOP_SINK}{}",
        metrics_on()
    ));
    d.spawn_with(nofile_limit(LIMIT));
    let pid = d.pid().unwrap();
    let port = d.metrics_port();
    let mut keeper = d.client();
    keeper.push(Tier::Sync, b"keeper-before").unwrap();

    let mut held: Vec<OwnedFd> = (0..1500)
        .filter_map(|_| connect_tcp_nonblocking(port))
        .collect();
    eprintln!("{} connections to the metrics port started", held.len());
    thread::sleep(Duration::from_millis(500));

    // Pushes keep acking, on the open connection and on new ones, through
    // segment rotation (1 MiB segments), which needs descriptors: a
    // segment is sealed, then deleted once the sink confirmed it.
    let rotated =
        |d: &Daemon| sealed_segments(d) as u64 + shard_stat_sum(&stats(d), "segments_deleted");
    let rotated_before = rotated(&d);
    let big = vec![b'r'; 64 * 1024];
    for batch in 0..6 {
        let recs: Vec<&[u8]> = (0..16).map(|_| &big[..]).collect();
        keeper
            .push_batch(Tier::Sync, &recs)
            .unwrap_or_else(|e| panic!("batch {batch} with the metrics port flooded: {e}"));
    }
    for p in 0..50 {
        let mut c = d.client();
        c.push(Tier::Sync, format!("fresh-{p}").as_bytes())
            .unwrap_or_else(|e| panic!("push {p} on a new connection, metrics port flooded: {e}"));
    }
    assert!(
        wait_until(Duration::from_secs(10), || rotated(&d)
            >= rotated_before + 4),
        "segments did not rotate with the metrics port flooded; log:\n{}",
        d.stderr()
    );
    // And the daemon is honest about it: nothing ran out, it is ready.
    let health = d.health();
    assert!(health.ends_with("ready\n"), "ctl health:\n{health}");
    let s = stats(&d);
    assert_eq!(stat(&s, "fd_exhaustion"), 0, "ctl stats:\n{s}");
    assert!(
        stat(&s, "admin_connections_refused") > 0,
        "no metrics connection was refused at admin.connections_max:\n{s}"
    );
    assert!(
        fd_count(pid) as u64 <= LIMIT,
        "{} descriptors",
        fd_count(pid)
    );
    held.clear();

    // Now run out for real, as a leak would: lower the running daemon's
    // limit to just above what it holds and open a few metrics
    // connections. The shortage is counted and /ready says so.
    assert!(
        wait_until(Duration::from_secs(15), || {
            let s = stats(&d);
            stat(&s, "connections_open") <= 1 && fd_count(pid) < 150
        }),
        "the flood's connections were not released"
    );
    let tight = fd_count(pid) as u64 + 3;
    set_soft_nofile_of(pid, tight, LIMIT);
    // More than the few descriptors left, fewer than admin.connections_max:
    // the listener runs out before it reaches its cap.
    let few: Vec<OwnedFd> = (0..12)
        .filter_map(|_| connect_tcp_nonblocking(port))
        .collect();
    let admin = admin_socket(&d).display().to_string();
    let mut last = String::new();
    let said_so = wait_until(Duration::from_secs(20), || {
        let (f, _) = spillway_timed(
            &["ctl", "--admin-socket", &admin, "--timeout", "2", "health"],
            Duration::from_secs(10),
        );
        last = format!("{}{}", f.stdout, f.stderr);
        last.contains("not ready") && last.contains("out of file descriptors")
    });
    assert!(
        said_so,
        "ctl health never said the daemon ran out of descriptors; last answer:\n{last}"
    );
    drop(few);
    set_soft_nofile_of(pid, LIMIT, LIMIT);
    let s = stats(&d);
    assert!(stat(&s, "fd_exhaustion") > 0, "ctl stats:\n{s}");
    assert!(
        wait_until(Duration::from_secs(20), || d.health().ends_with("ready\n")),
        "not ready again after the shortage ended:\n{}",
        d.health()
    );
    keeper.push(Tier::Sync, b"keeper-after").unwrap();
    d.terminate();
}

#[test]
fn a_reload_that_adds_sinks_beyond_the_descriptor_reserve_is_refused_and_changes_nothing() {
    // 100 producers + 64 + (8 per shard + 2 per sink x 2 sinks) x 2 shards
    // + 16 per admin listener x 2: room for two sinks, not three.
    const LIMIT: u64 = 100 + 64 + (8 + 2 * 2) * 2 + 16 * 2;
    let server = "[server]\nconnections_max = 100\nshards = 2\n";
    let sinks = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| format!("[sinks.{n}]\ntype = \"noop\"\n"))
            .collect()
    };
    let mut d = Daemon::configure(&format!("{server}{}{}", sinks(&["a"]), metrics_on()));
    d.spawn_with(nofile_limit(LIMIT));
    let mut c = d.client();
    c.push(Tier::Sync, b"before").unwrap();

    d.reconfigure(&format!("{server}{}{}", sinks(&["a", "b"]), metrics_on()));
    let two = d.ctl(&["reload"]);
    assert!(
        two.contains("sink b added"),
        "adding a second sink that fits: {two}"
    );

    d.reconfigure(&format!(
        "{server}{}{}",
        sinks(&["a", "b", "c"]),
        metrics_on()
    ));
    let f = ctl_socket(&admin_socket(&d), &["reload"]);
    assert_reload_refused(
        &f,
        "a third sink beyond the reserve",
        &[
            "reload rejected",
            "3 sinks instead of 2",
            &format!("file descriptor limit of {LIMIT}"),
        ],
    );
    // Nothing changed: two sinks run, pushes ack, the daemon is ready.
    let out = d.ctl(&["--json", "stats"]);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let running: Vec<&String> = s["sinks"].as_object().unwrap().keys().collect();
    assert_eq!(running, ["a", "b"], "ctl --json stats:\n{s}");
    assert_eq!(s["reloads"]["failed"], 1, "{s}");
    c.push(Tier::Sync, b"after").unwrap();
    assert!(d.health().ends_with("ready\n"), "{}", d.health());
    d.terminate();
}

// ---------------------------------------------------------------- 7. tools that hang or balloon

#[test]
fn ctl_and_push_against_a_stopped_daemon_time_out_naming_the_timeout() {
    let mut d = Daemon::start(NOOP_SINK);
    let pid = d.pid().unwrap() as libc::pid_t;
    let admin = admin_socket(&d).display().to_string();
    let socket = d.socket_path().display().to_string();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let (f, took) = spillway_timed(
        &["ctl", "--admin-socket", &admin, "--timeout", "1", "health"],
        Duration::from_secs(20),
    );
    let (json, json_took) = spillway_timed(
        &["ctl", "--admin-socket", &admin, "--json", "stats"],
        Duration::from_secs(20),
    );
    let (push, push_took) = spillway_timed(
        &["push", "--socket", &socket, "--timeout", "1", "a-record"],
        Duration::from_secs(20),
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };

    assert_eq!(
        f.status.code(),
        Some(2),
        "a daemon that does not answer: {f:?}"
    );
    assert_names(
        "ctl --timeout 1",
        &f.stderr,
        &["timed out after 1.0 s", &admin],
    );
    assert!(
        took < Duration::from_secs(5),
        "ctl --timeout 1 took {took:?}"
    );
    assert_eq!(json.status.code(), Some(2), "{json:?}");
    assert_names(
        "ctl --json stats",
        &json.stdout,
        &["{\"error\":", "timed out after 5.0 s"],
    );
    assert!(
        json_took < Duration::from_secs(10),
        "ctl with the default timeout took {json_took:?}"
    );
    assert!(!push.status.success(), "{push:?}");
    assert_names(
        "push --timeout 1",
        &push.stderr,
        &["timed out: no answer from the daemon within --timeout 1.0 s"],
    );
    assert!(
        !push.stderr.contains("temporarily unavailable"),
        "{}",
        push.stderr
    );
    assert!(
        push_took < Duration::from_secs(5),
        "push took {push_took:?}"
    );
    // Running again, it answers.
    assert!(d.health().ends_with("ready\n"));
    d.terminate();
}

#[test]
fn ctl_against_a_socket_that_keeps_sending_stops_at_the_reply_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake-admin.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let flood = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let block = vec![b'x'; 64 * 1024];
        let mut sent = 0u64;
        // Until ctl hangs up; 1 GiB at most.
        while sent < 1 << 30 && s.write_all(&block).is_ok() {
            sent += block.len() as u64;
        }
        sent
    });
    let (f, took) = spillway_timed(
        &[
            "ctl",
            "--admin-socket",
            &path.display().to_string(),
            "--timeout",
            "60",
            "stats",
        ],
        Duration::from_secs(90),
    );
    let sent = flood.join().unwrap();
    eprintln!("the fake socket sent {sent} bytes before ctl hung up after {took:?}");
    assert!(!f.status.success(), "{f:?}");
    assert_names(
        "ctl",
        &f.stderr,
        &["passed 67108864 bytes; stopped reading"],
    );
    assert!(
        sent < 1 << 30,
        "ctl read all of 1 GiB from a socket that kept sending"
    );
}

#[test]
fn check_refuses_a_fifo_dev_zero_and_a_deep_file_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let fifo_s = toml_str(fifo.display().to_string());
    let data = toml_str(dir.path().join("wab").display().to_string());
    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "a FIFO as the file sink's path",
            format!("[server]\ndata_dir = {data}\n[sink]\ntype = \"file\"\npath = {fifo_s}\n"),
            vec!["sink.path".into(), fifo.display().to_string()],
        ),
        (
            "a FIFO as the plugin",
            format!("[server]\ndata_dir = {data}\n[sink]\ntype = \"plugin\"\npath = {fifo_s}\n"),
            vec!["sink.path".into(), fifo.display().to_string()],
        ),
        (
            "/dev/zero as the plugin",
            format!(
                "[server]\ndata_dir = {data}\n[sink]\ntype = \"plugin\"\npath = \"/dev/zero\"\n"
            ),
            vec!["sink.path".into(), "/dev/zero".into()],
        ),
    ];
    for (what, text, names) in cases {
        let config = dir.path().join("case.toml");
        fs::write(&config, text).unwrap();
        let (f, took) = spillway_timed(
            &["check", &config.display().to_string()],
            Duration::from_secs(20),
        );
        assert!(!f.status.success(), "{what}: check passed: {f:?}");
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_names(what, &f.stderr, &names);
        assert!(took < Duration::from_secs(5), "{what}: check took {took:?}");
    }
    // The config itself: a FIFO, /dev/zero, and 100,000 levels of nesting.
    let deep = dir.path().join("deep.toml");
    fs::write(
        &deep,
        format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    for (what, config, needle) in [
        (
            "a FIFO as the config",
            fifo.display().to_string(),
            "not a regular file",
        ),
        (
            "/dev/zero as the config",
            "/dev/zero".to_string(),
            "/dev/zero",
        ),
        ("a 100,000-deep config", deep.display().to_string(), "nest"),
    ] {
        let (f, took) = spillway_timed(&["check", &config], Duration::from_secs(20));
        assert!(!f.status.success(), "{what}: check passed: {f:?}");
        assert_names(what, &f.stderr, &[needle]);
        assert!(took < Duration::from_secs(5), "{what}: check took {took:?}");
    }
}

#[test]
fn push_of_an_oversized_line_is_refused_without_reading_it_whole() {
    let mut d = Daemon::start("");
    let mut child = Command::new(spillway_bin())
        .args(["push", "--socket"])
        .arg(d.socket_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A 600 MiB line, written as push reads it; stops when push hangs up.
    let writer = thread::spawn(move || {
        let block = vec![b'a'; 64 * 1024];
        let mut written = 0u64;
        while written < 600 << 20 && stdin.write_all(&block).is_ok() {
            written += block.len() as u64;
        }
        written
    });
    let status = wait_timeout(&mut child, Duration::from_secs(60))
        .expect("push still running 60 s into a 600 MiB line");
    let written = writer.join().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    eprintln!("push read {written} bytes of a 600 MiB line before refusing it");
    assert!(!status.success(), "push accepted a 600 MiB line: {err}");
    assert_names(
        "push",
        &err,
        &[
            "line 1 is over 16777208 bytes (read no further)",
            "server.payload_bytes_max",
        ],
    );
    // The cap, the pipe's buffer and push's read buffer; never the line.
    assert!(
        written < 32 << 20,
        "push read {written} bytes of the line before refusing it"
    );
    d.terminate();
}

// ---------------------------------------------------------------- 9. /ready and check = run

#[test]
fn a_delivery_hanging_past_ready_stall_ms_degrades_and_fails_ready_only_when_required() {
    let rx = HttpReceiver::start();
    // By default a stalled sink degrades the daemon (200, `degraded`);
    // with `ready_requires_sinks` it makes it not ready (503).
    for (required, code) in [(false, "200"), (true, "503")] {
        let mut d = Daemon::start(&format!(
            "{}timeout_ms = 30000\n{}ready_stall_ms = 1000\nready_requires_sinks = {required}\n",
            http_sink(&rx),
            metrics_on()
        ));
        let port = d.metrics_port();
        let ready = http_get(port, "/ready");
        assert!(
            ready.starts_with("HTTP/1.1 200") && ready.contains("\"status\":\"ready\""),
            "{ready}"
        );
        rx.set_delay(Duration::from_secs(6));
        let pushed = Instant::now();
        let payload = format!("slow-to-deliver-{required}");
        d.client().push(Tier::Sync, payload.as_bytes()).unwrap();
        let mut last = String::new();
        let stalled = wait_until(Duration::from_secs(5), || {
            last = http_get(port, "/ready");
            last.starts_with(&format!("HTTP/1.1 {code}")) && last.contains("\"state\":\"stalled\"")
        });
        assert!(
            stalled,
            "/ready (ready_requires_sinks = {required}) did not answer {code} naming the stall within 5 s of a delivery that takes 6 s; last:\n{last}"
        );
        assert!(
            pushed.elapsed() < Duration::from_secs(6),
            "said only once the delivery was done"
        );
        assert_names("/ready", &last, &["admin.ready_stall_ms = 1000"]);
        let (status, list) = if required {
            ("not ready", "failing")
        } else {
            ("degraded", "degraded")
        };
        let body: serde_json::Value =
            serde_json::from_str(last.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["status"], status, "{body}");
        assert_eq!(body[list][0]["sink"], "default", "{body}");
        assert_eq!(body["ready"], !required, "{body}");
        // `ctl health` agrees, by its verdict line and its exit status
        // (`health()` checks the pair).
        let health = d.health();
        let verdict = health.lines().last().unwrap();
        assert!(
            verdict.starts_with(&format!("{status}: sink default of shard "))
                && verdict.contains(" stalled since "),
            "{health}"
        );
        rx.set_delay(Duration::ZERO);
        rx.wait_for_payloads(&[payload.as_str()], DELIVERY_TIMEOUT);
        assert!(
            wait_until(Duration::from_secs(10), || http_get(port, "/ready")
                .contains("\"status\":\"ready\"")),
            "not ready again after the delivery finished:\n{}",
            http_get(port, "/ready")
        );
        d.terminate();
    }
}

#[test]
fn check_and_run_refuse_the_same_configs() {
    let dir = tempfile::tempdir().unwrap();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let open_folder = dir.path().join("open-to-all");
    fs::create_dir(&open_folder).unwrap();
    fs::set_permissions(&open_folder, fs::Permissions::from_mode(0o777)).unwrap();
    let regular = dir.path().join("not-a-socket");
    fs::write(&regular, b"a regular file").unwrap();
    let not_ours = dir.path().join("someone-elses");
    fs::create_dir(&not_ours).unwrap();
    fs::write(not_ours.join("notes.txt"), b"mine").unwrap();
    let cases = [
        (
            "a busy metrics address",
            format!("[admin]\nmetrics_address = \"{busy_addr}\"\n"),
            vec![format!("admin.metrics_address {busy_addr}")],
        ),
        (
            "a metrics address that does not parse",
            "[admin]\nmetrics_address = \"nowhere\"\n".to_string(),
            vec!["admin.metrics_address nowhere".to_string()],
        ),
        (
            "a socket folder anyone can write",
            format!(
                "[server]\nsocket_path = {}\n",
                toml_str(open_folder.join("s.sock").display().to_string())
            ),
            vec![
                "server.socket_path".to_string(),
                "another user could replace".to_string(),
            ],
        ),
        (
            "a socket path that is a regular file",
            format!(
                "[server]\nsocket_path = {}\n",
                toml_str(regular.display().to_string())
            ),
            vec![
                "server.socket_path".to_string(),
                "exists and is not a socket".to_string(),
            ],
        ),
        (
            "a data folder holding someone else's files",
            format!(
                "[server]\ndata_dir = {}\n",
                toml_str(not_ours.display().to_string())
            ),
            vec![
                "server.data_dir".to_string(),
                "spillway did not make (notes.txt)".to_string(),
            ],
        ),
    ];
    for (what, overrides, names) in cases {
        let d = Daemon::configure(&overrides);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let c = check(d.config_path());
        assert!(!c.status.success(), "{what}: check passed: {c:?}");
        assert_names(&format!("{what} (check)"), &c.stderr, &names);
        let r = d.run_to_exit(Duration::from_secs(20));
        assert!(!r.status.success(), "{what}: run started: {r:?}");
        assert_names(&format!("{what} (run)"), &r.stderr, &names);
    }
    drop(busy);
}

/// The sockets a config puts in its own data folder (and their `.lock`
/// files) are spillway's: such a folder is not refused as someone else's;
/// anything else in it still is.
#[test]
fn sockets_the_config_puts_in_the_data_folder_count_as_spillways_own() {
    let mut d = Daemon::configure("");
    let data = d.data_dir().to_path_buf();
    fs::create_dir_all(data.join("shard-000")).unwrap();
    let mut listeners = Vec::new();
    for name in ["spillway.sock", "admin.sock"] {
        listeners.push(UnixListener::bind(data.join(name)).unwrap());
        fs::write(data.join(format!("{name}.lock")), b"").unwrap();
    }
    d.reconfigure(&format!(
        "[server]\nsocket_path = {}\n[admin]\nsocket_path = {}\n{NOOP_SINK}",
        toml_str(data.join("spillway.sock").display().to_string()),
        toml_str(data.join("admin.sock").display().to_string()),
    ));
    let c = check(d.config_path());
    assert!(c.status.success(), "{c:?}");
    fs::write(data.join("notes.txt"), b"mine").unwrap();
    let c = check(d.config_path());
    assert!(!c.status.success(), "{c:?}");
    assert_names(
        "check",
        &c.stderr,
        &["server.data_dir", "spillway did not make (notes.txt)"],
    );
    drop(listeners);
}

// ---------------------------------------------------------------- 10. a plugin that breaks the ABI

/// A C plugin that commits every other batch and answers the rest with a
/// split of one outcome too many (an ABI breach: the host panics, the
/// drain drops the instance and makes a new one). Each instance commits its
/// first batch, so the restart backoff starts over every time: a restart
/// every ~100 ms per shard, for as long as records come.
const BAD_SPLIT_BODY: &str = r#"
typedef struct { uint64_t calls; } bad;

static void *create(const uint8_t *options, size_t len, const spw_host_api *h,
                    spw_owned_str *out_error) {
    (void)options; (void)len; (void)h;
    bad *b = calloc(1, sizeof *b);
    if (!b) *out_error = owned("out of memory");
    return b;
}

static void destroy(void *instance) { free(instance); }

static int32_t limits(void *instance, spw_limits *out) {
    (void)instance;
    out->max_records = 100;
    out->max_bytes = 1 << 20;
    return 0;
}

static int32_t deliver(void *instance, const spw_record *records, size_t n,
                       spw_outcome *out) {
    bad *b = instance;
    (void)records;
    if (b->calls++ % 2 == 0) { out->kind = 0; return 0; }
    out->kind = 2; /* split */
    out->records_len = n + 1;
    out->record_codes = calloc(n + 1, 1);
    return 0;
}

static int32_t health(void *instance, spw_owned_str *out_msg) {
    (void)instance; (void)out_msg;
    return 0;
}

static void free_outcome(spw_outcome *out) {
    free_string(&out->reason);
    free(out->record_codes);
    out->record_codes = NULL;
}

static const spw_vtable VTABLE = {
    1, "0.1.0", "bad-split", "1.0.0",
    create, destroy, limits, deliver, health, free_string, free_outcome,
};

const spw_vtable *spillway_sink_plugin_v1(void) { return &VTABLE; }
"#;

/// Issue 39, item 8: RSS grew by 147 MB while such a plugin was restarted
/// over and over. Measured here (the daemon's VmRSS, 8 shards, about
/// 30 restarts a second): it rises while the shards' buffers warm up
/// (with the data read, not the restarts) and is then flat, so the
/// attack's figure was the warm-up, not a leak. The bound below allows
/// under 1 KiB per restart, which any per-restart leak of an instance, its
/// answer or its panic message would pass.
/// (`SPILLWAY_TEST_PLUGIN_RESTARTS`: how many restarts are measured, after
/// 800 to warm up; 800 by default. 6,000 in one run: +76 kB from the 1,801st
/// to the 6,300th, 17 bytes a restart.)
#[test]
fn a_plugin_that_breaks_the_abi_is_restarted_without_growing_memory() {
    const WARM: u64 = 800;
    const MEASURED: u64 = 800;
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(
        dir.path(),
        "libbad_split",
        &format!("{C_PLUGIN_ABI}{BAD_SPLIT_BODY}"),
    );
    let mut d = Daemon::start(&format!(
        "[server]\nshards = 8\n[sink]\ntype = \"plugin\"\npath = {}\nbatch_records_max = 5\nlinger_ms = 1\n",
        toml_str(so.display().to_string()),
    ));
    let pid = d.pid().expect("the daemon's pid");
    let stop = Arc::new(AtomicBool::new(false));
    // One connection per shard (connections are spread round-robin).
    let pushers: Vec<_> = (0..8)
        .map(|t| {
            let mut c = d.client();
            let stop = stop.clone();
            thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    c.push(Tier::Buffered, format!("p{t}:{i}").as_bytes())
                        .unwrap_or_else(|e| panic!("push p{t}:{i}: {e}"));
                    i += 1;
                    thread::sleep(Duration::from_millis(2));
                }
                i
            })
        })
        .collect();
    let restarts = || shard_stat_sum(&stats(&d), "sink_restarts");
    let rss_kib = || {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status:\n{status}"))
    };
    let reach = |n: u64| {
        assert!(
            wait_until(Duration::from_secs(600), || restarts() >= n),
            "{} sink restarts, waiting for {n}; log:\n{}",
            restarts(),
            d.stderr()
        );
    };
    let measured = std::env::var("SPILLWAY_TEST_PLUGIN_RESTARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MEASURED);
    reach(WARM);
    let (from_restarts, from_kib) = (restarts(), rss_kib());
    for quarter in 1..=4 {
        reach(WARM + measured * quarter / 4);
        say(&format!(
            "RSS {} kB after {} restarts",
            rss_kib(),
            restarts()
        ));
    }
    let (to_restarts, to_kib) = (restarts(), rss_kib());
    stop.store(true, Ordering::Relaxed);
    for p in pushers {
        p.join().unwrap();
    }
    let grown = to_kib.saturating_sub(from_kib);
    let per_restart = grown * 1024 / (to_restarts - from_restarts);
    say(&format!(
        "RSS {from_kib} kB after {from_restarts} restarts, {to_kib} kB after {to_restarts}: \
         +{grown} kB, {per_restart} bytes a restart\n"
    ));
    assert!(
        per_restart < 1024,
        "RSS grew {grown} kB over {} restarts of a plugin that breaks the ABI",
        to_restarts - from_restarts
    );
    assert!(d.is_running(), "the daemon died; log:\n{}", d.stderr());
    let s = stats(&d);
    assert_eq!(shard_stat_sum(&s, "dead_lettered"), 0, "{s}");
    assert!(
        d.stderr().contains("answered a split of"),
        "the log names the breach"
    );
    d.terminate();
}
