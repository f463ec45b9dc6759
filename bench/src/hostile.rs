//! The `hostile` scenario: a well-behaved serial Sync producer measured
//! with and without 200 hostile connections attacking the same daemon at
//! the same time, plus the daemon's peak resident memory during the attack.
//!
//! The attackers are threads of the bench, each holding one connection at a
//! time to the daemon's Unix socket (nothing else is contacted). There are
//! six kinds, in roughly equal shares ([`KINDS`]); each kind is one function
//! below. Every attacker loop is bounded in count ([`CYCLES_MAX`]) and time
//! (the stop flag, and a hard deadline should the bench itself hang); every
//! blocking call on a socket has a timeout of at most [`POLL`], so a thread
//! notices the end of the run within that time and exits by itself. When the
//! daemon closes an attacker's connection, the attacker opens a new one, so
//! the attack keeps its strength during the whole measurement.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use spillway_protocol::{encode_frame, encode_push, Tier, HEADER_LEN};

use super::context::Ctx;
use super::daemon::{rss_kib, strip_ansi, BenchDaemon, Overrides};
use super::load::{self, LoadError, Plan, Sample};
use super::report::{ReportRow, P50, P99};

/// Hostile connections in all.
pub const ATTACKERS: usize = 200;
/// `server.connection_read_timeout_ms` of the hostile scenario's daemon: a
/// frame that has started arriving must be complete within this time. The
/// daemon's default (10 s) is longer than a measurement, so no stalled frame
/// would ever be closed during one; at 1 s every slowloris and stalled huge
/// frame is closed (and re-established) about once a second.
pub const READ_TIMEOUT_MS: u64 = 1000;
/// The longest any blocking socket call of an attacker waits.
const POLL: Duration = Duration::from_millis(100);
/// Pause between two connections of the churning kinds (garbage after its
/// close, connect-and-vanish): each such attacker opens at most ~50
/// connections a second.
const CHURN_PAUSE: Duration = Duration::from_millis(20);
/// Pause before re-opening a connection the daemon closed (holding kinds).
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);
/// Slowloris: one payload byte this often.
const DRIP_EVERY: Duration = Duration::from_millis(300);
/// Slowloris: the payload length its header declares.
const DRIP_PAYLOAD: usize = 4096;
/// Stalled huge frame: declared payload, and how much of it is sent.
const HUGE_DECLARED: usize = 16 * 1024 * 1024;
const HUGE_SENT: usize = 15 * 1024 * 1024;
/// Garbage: bytes per attempt (a full header and then some).
const GARBAGE_BYTES: usize = 64;
/// Never-reads-acks: Push frames per write buffer.
const PIPELINE_FRAMES: usize = 256;
/// Bound on the cycles (connections, drips, writes) of one attacker.
const CYCLES_MAX: u64 = 1_000_000;
/// How long to wait for every attacker to reach its attacking state.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// After every attacker is ready, before the producer starts.
const SETTLE: Duration = Duration::from_millis(200);
/// Between the end of one phase and the start of the next.
const PHASE_GAP: Duration = Duration::from_millis(500);
/// The discarded producer run on a fresh daemon, before either phase.
const WARM_RUN: Duration = Duration::from_secs(1);
/// How often the sampler reads VmRSS and the open-connection gauges.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);
const ATTACKER_STACK: usize = 256 * 1024;

/// The six kinds of hostile connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Garbage,
    Slowloris,
    StalledHuge,
    Idle,
    Vanish,
    NeverReads,
}

/// Every kind, in the order attackers are assigned (round robin).
const KINDS: [Kind; 6] = [
    Kind::Garbage,
    Kind::Slowloris,
    Kind::StalledHuge,
    Kind::Idle,
    Kind::Vanish,
    Kind::NeverReads,
];

/// The kinds to attack with: every kind, or only those named in
/// `SPILLWAY_BENCH_HOSTILE_KINDS` (comma-separated names, e.g.
/// `stalled_huge,never_reads`) to find which attacker costs what.
fn chosen_kinds() -> Vec<Kind> {
    let Ok(names) = std::env::var("SPILLWAY_BENCH_HOSTILE_KINDS") else {
        return KINDS.to_vec();
    };
    let chosen: Vec<Kind> = KINDS
        .iter()
        .copied()
        .filter(|k| names.split(',').any(|n| n.trim() == k.name()))
        .collect();
    if chosen.is_empty() {
        super::progress::line(&format!(
            "SPILLWAY_BENCH_HOSTILE_KINDS={names:?} names no kind; using every kind"
        ));
        return KINDS.to_vec();
    }
    chosen
}

impl Kind {
    /// The name used in figure keys.
    fn name(self) -> &'static str {
        match self {
            Kind::Garbage => "garbage",
            Kind::Slowloris => "slowloris",
            Kind::StalledHuge => "stalled_huge",
            Kind::Idle => "idle",
            Kind::Vanish => "vanish",
            Kind::NeverReads => "never_reads",
        }
    }

    fn attack(self) -> fn(&Attacker) {
        match self {
            Kind::Garbage => garbage,
            Kind::Slowloris => slowloris,
            Kind::StalledHuge => stalled_huge_frame,
            Kind::Idle => idle_holder,
            Kind::Vanish => connect_and_vanish,
            Kind::NeverReads => never_reads_acks,
        }
    }
}

/// Counters of one kind, shared by its attackers and the sampler.
#[derive(Debug, Default)]
struct KindStats {
    /// Connections open right now.
    open: AtomicI64,
    connects: AtomicU64,
    /// `connect` failed (backlog full, refused).
    connect_failures: AtomicU64,
    /// The daemon closed (EOF, reset or broken pipe), not the attacker.
    closed_by_daemon: AtomicU64,
    /// Attackers that reached their attacking state at least once.
    ready: AtomicU64,
    /// Attack bytes written.
    bytes_sent: AtomicU64,
}

/// What every attacker shares.
struct Attack {
    socket: PathBuf,
    stop: AtomicBool,
    /// A backstop: attackers stop here even if nobody sets `stop`.
    deadline: Instant,
    stats: [KindStats; 6],
    /// The first `HUGE_SENT` bytes of a frame declaring `HUGE_DECLARED`.
    huge_prefix: Vec<u8>,
}

impl Attack {
    fn over(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    fn stats(&self, kind: Kind) -> &KindStats {
        &self.stats[KINDS.iter().position(|k| *k == kind).expect("a known kind")]
    }
}

/// One attacker thread's view: the shared state, its kind and a PRNG.
struct Attacker {
    attack: Arc<Attack>,
    kind: Kind,
    seed: std::cell::Cell<u64>,
}

impl Attacker {
    fn stats(&self) -> &KindStats {
        self.attack.stats(self.kind)
    }

    fn over(&self) -> bool {
        self.attack.over()
    }

    /// xorshift64*: enough randomness for garbage bytes.
    fn random(&self) -> u64 {
        let mut x = self.seed.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Sleeps up to `d`, waking early at the end of the run.
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.over() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(POLL));
        }
    }

    /// A connection counted in the kind's gauges, or `None` (counted as a
    /// failure, after a pause) if the daemon did not take it.
    fn connect(&self) -> Option<Conn<'_>> {
        match connect_nonblocking(&self.attack.socket) {
            Ok(stream) => {
                let _ = stream.set_read_timeout(Some(POLL));
                let _ = stream.set_write_timeout(Some(POLL));
                let stats = self.stats();
                stats.connects.fetch_add(1, Ordering::Relaxed);
                stats.open.fetch_add(1, Ordering::Relaxed);
                Some(Conn { stream, stats })
            }
            Err(_) => {
                self.stats()
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.pause(RECONNECT_PAUSE);
                None
            }
        }
    }

    fn mark_ready(&self, already: &mut bool) {
        if !*already {
            *already = true;
            self.stats().ready.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// An attack connection; leaves the open gauge when dropped.
struct Conn<'a> {
    stream: UnixStream,
    stats: &'a KindStats,
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How a hold or a write ended.
#[derive(Debug, PartialEq, Eq)]
enum Io {
    /// Time is up (or the socket would block): the connection is still open.
    Open,
    /// The daemon closed the connection.
    Closed,
    /// The run is over.
    Over,
}

impl Conn<'_> {
    fn closed(&self) -> Io {
        self.stats.closed_by_daemon.fetch_add(1, Ordering::Relaxed);
        Io::Closed
    }

    /// Reads (and discards) whatever the daemon sends for up to `d`;
    /// `Closed` as soon as it closes the connection.
    fn hold(&mut self, d: Duration, a: &Attacker) -> Io {
        let until = Instant::now() + d;
        let mut scratch = [0u8; 512];
        while Instant::now() < until {
            if a.over() {
                return Io::Over;
            }
            match self.stream.read(&mut scratch) {
                Ok(0) => return self.closed(),
                Ok(_) => {}
                Err(e) if would_block(&e) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.closed(),
            }
        }
        Io::Open
    }

    /// One `write` of `buf` (at most [`POLL`] of waiting); the bytes taken.
    fn write_some(&mut self, buf: &[u8]) -> Result<usize, Io> {
        match self.stream.write(buf) {
            Ok(n) => {
                self.stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                Ok(n)
            }
            Err(e) if would_block(&e) || e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(_) => Err(self.closed()),
        }
    }

    /// Writes all of `buf` unless the daemon closes or the run ends.
    fn write_all(&mut self, mut buf: &[u8], a: &Attacker) -> Io {
        while !buf.is_empty() {
            if a.over() {
                return Io::Over;
            }
            match self.write_some(buf) {
                Ok(n) => buf = &buf[n..],
                Err(io) => return io,
            }
        }
        Io::Open
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// `connect(2)` on a non-blocking socket, so a full accept backlog is an
/// immediate `EAGAIN` instead of an unbounded wait; the stream it returns
/// is blocking (with the timeouts its caller sets).
fn connect_nonblocking(path: &Path) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the result is checked.
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
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let stream = UnixStream::from(fd);
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; the descriptor is ours.
    let rc = unsafe {
        libc::connect(
            std::os::fd::AsRawFd::as_raw_fd(&stream),
            &addr as *const libc::sockaddr_un as *const libc::sockaddr,
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// The first 16 bytes of a valid Push header declaring `payload_len`.
fn push_header(payload_len: usize) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_push(Tier::Sync, &vec![0u8; payload_len], &mut out);
    out[..HEADER_LEN].to_vec()
}

/// (a) Garbage: connects, sends [`GARBAGE_BYTES`] of rubbish (in turn: random
/// bytes, a frame with bad magic, a bad header CRC, an unknown version, an
/// unknown message type), reads until the daemon closes the connection
/// (every one of these is a closing nack) or for at most one read timeout,
/// then pauses [`CHURN_PAUSE`] and does it again.
fn garbage(a: &Attacker) {
    let mut ready = false;
    let mut good = BytesMut::new();
    encode_push(Tier::Sync, &[b'x'; GARBAGE_BYTES - 20], &mut good);
    for cycle in 0..CYCLES_MAX {
        if a.over() {
            return;
        }
        let bytes: Vec<u8> = match cycle % 5 {
            0 => (0..GARBAGE_BYTES).map(|_| a.random() as u8).collect(),
            1 => {
                let mut f = good.to_vec();
                f[..4].copy_from_slice(b"XEIR");
                f
            }
            2 => {
                let mut f = good.to_vec();
                f[12] ^= 0xff;
                f
            }
            3 => {
                let mut f = good.to_vec();
                f[4] = 9;
                f
            }
            _ => {
                let mut out = BytesMut::new();
                encode_frame(0x7e, Tier::Sync.as_byte(), 0, &[b'x'; 44], &mut out);
                out.to_vec()
            }
        };
        let Some(mut conn) = a.connect() else {
            continue;
        };
        if conn.write_all(&bytes, a) == Io::Open {
            a.mark_ready(&mut ready);
            // The daemon closes after its nack; if it does not, we do.
            let _ = conn.hold(Duration::from_millis(READ_TIMEOUT_MS), a);
        }
        drop(conn);
        a.pause(CHURN_PAUSE);
    }
}

/// (b) Slowloris: a valid Push header declaring [`DRIP_PAYLOAD`] bytes, then
/// one payload byte every [`DRIP_EVERY`]; when the daemon closes the
/// connection (its read timeout), opens a new one and starts over.
fn slowloris(a: &Attacker) {
    let mut frame = BytesMut::new();
    encode_push(Tier::Sync, &[b's'; DRIP_PAYLOAD], &mut frame);
    let mut ready = false;
    let mut cycles = 0u64;
    while !a.over() && cycles < CYCLES_MAX {
        let Some(mut conn) = a.connect() else {
            cycles += 1;
            continue;
        };
        let mut io = conn.write_all(&frame[..HEADER_LEN], a);
        let mut at = HEADER_LEN;
        while io == Io::Open && at < frame.len() && cycles < CYCLES_MAX {
            a.mark_ready(&mut ready);
            cycles += 1;
            io = conn.hold(DRIP_EVERY, a);
            if io == Io::Open {
                io = conn.write_all(&frame[at..at + 1], a);
                at += 1;
            }
        }
        drop(conn);
        if io == Io::Closed {
            a.pause(RECONNECT_PAUSE);
        }
    }
}

/// (c) Stalled huge frame: a valid Push header declaring 16 MiB, 15 MiB of
/// the payload, then nothing: holds the socket open until the daemon closes
/// it (its read timeout), then does it again on a new connection.
fn stalled_huge_frame(a: &Attacker) {
    let mut ready = false;
    for _ in 0..CYCLES_MAX {
        if a.over() {
            return;
        }
        let Some(mut conn) = a.connect() else {
            continue;
        };
        let mut io = conn.write_all(&a.attack.huge_prefix, a);
        while io == Io::Open {
            a.mark_ready(&mut ready);
            io = conn.hold(Duration::from_secs(3600), a);
        }
        drop(conn);
        if io == Io::Closed {
            a.pause(RECONNECT_PAUSE);
        }
    }
}

/// (d) Idle holder: connects and sends nothing; if the daemon closes the
/// connection (an idle timeout, where there is one), connects again.
fn idle_holder(a: &Attacker) {
    let mut ready = false;
    for _ in 0..CYCLES_MAX {
        if a.over() {
            return;
        }
        let Some(mut conn) = a.connect() else {
            continue;
        };
        a.mark_ready(&mut ready);
        let io = conn.hold(Duration::from_secs(3600), a);
        drop(conn);
        if io == Io::Closed {
            a.pause(RECONNECT_PAUSE);
        }
    }
}

/// (e) Connect and vanish: connects, every other time sends the first half
/// of a valid header, closes at once, pauses [`CHURN_PAUSE`], again.
fn connect_and_vanish(a: &Attacker) {
    let half = push_header(64);
    let mut ready = false;
    for cycle in 0..CYCLES_MAX {
        if a.over() {
            return;
        }
        if let Some(mut conn) = a.connect() {
            if cycle % 2 == 1 {
                let _ = conn.write_all(&half[..HEADER_LEN / 2], a);
            }
            a.mark_ready(&mut ready);
        }
        a.pause(CHURN_PAUSE);
    }
}

/// (f) Never reads its acks: pipelines 5-byte Sync Push frames as fast as
/// the socket takes them and never reads a byte. The daemon's acks fill the
/// socket, the daemon stops reading, and the attacker's writes block (each
/// for at most [`POLL`]); it keeps trying, and reconnects if the daemon
/// closes the connection. Its records are valid and are written to the WAB.
fn never_reads_acks(a: &Attacker) {
    let mut frames = BytesMut::new();
    for _ in 0..PIPELINE_FRAMES {
        encode_push(Tier::Sync, load::PAYLOAD, &mut frames);
    }
    let mut ready = false;
    let mut cycles = 0u64;
    while !a.over() && cycles < CYCLES_MAX {
        let Some(mut conn) = a.connect() else {
            cycles += 1;
            continue;
        };
        let mut at = 0;
        let closed = loop {
            cycles += 1;
            if a.over() || cycles >= CYCLES_MAX {
                break false;
            }
            match conn.write_some(&frames[at..]) {
                // Whole frames only: the buffer is a whole number of frames.
                Ok(0) => a.mark_ready(&mut ready),
                Ok(n) => at = (at + n) % frames.len(),
                Err(_) => break true,
            }
        };
        drop(conn);
        if closed {
            a.pause(RECONNECT_PAUSE);
        }
    }
}

/// A running attack: the threads and what they share.
struct Running {
    attack: Arc<Attack>,
    threads: Vec<JoinHandle<()>>,
}

fn start_attack(socket: &Path, horizon: Duration) -> Result<Running, String> {
    let mut huge = BytesMut::with_capacity(HEADER_LEN);
    huge.extend_from_slice(&push_header(0));
    // The header of a frame declaring HUGE_DECLARED, without building one:
    // only the length field and the header CRC differ from an empty Push.
    huge[8..12].copy_from_slice(&(HUGE_DECLARED as u32).to_le_bytes());
    let crc = crc32(&huge[..12]);
    huge[12..16].copy_from_slice(&crc.to_le_bytes());
    let mut huge_prefix = huge.to_vec();
    huge_prefix.resize(HEADER_LEN + HUGE_SENT, b'h');
    let attack = Arc::new(Attack {
        socket: socket.to_path_buf(),
        stop: AtomicBool::new(false),
        deadline: Instant::now() + horizon,
        stats: Default::default(),
        huge_prefix,
    });
    let mut running = Running {
        attack: attack.clone(),
        threads: Vec::with_capacity(ATTACKERS),
    };
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let kinds = chosen_kinds();
    for i in 0..ATTACKERS {
        let kind = kinds[i % kinds.len()];
        let attacker = Attacker {
            attack: attack.clone(),
            kind,
            seed: std::cell::Cell::new((base ^ (i as u64).wrapping_mul(0x9e37_79b9)) | 1),
        };
        let spawned = std::thread::Builder::new()
            .name(format!("hostile-{}-{i}", kind.name()))
            .stack_size(ATTACKER_STACK)
            .spawn(move || {
                yield_to_the_daemon();
                (attacker.kind.attack())(&attacker)
            });
        match spawned {
            Ok(handle) => running.threads.push(handle),
            Err(e) => {
                running.stop();
                return Err(format!("starting attacker thread {i}: {e}"));
            }
        }
    }
    Ok(running)
}

/// Nice level of every attacker thread.
const ATTACKER_NICE: libc::c_int = 19;

/// Run this attacker thread at the lowest priority. The 200 attackers are
/// the bench's own threads on the same cores as the daemon and the victim;
/// at normal priority the measurement showed how the kernel shares two
/// cores among 200 busy threads, not what the daemon does with hostile
/// input. At nice 19 they still get every idle cycle (and the daemon still
/// does all the work they cause).
fn yield_to_the_daemon() {
    // SAFETY: gettid and setpriority have no memory effects; a failure
    // only leaves the thread at normal priority.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, ATTACKER_NICE);
    }
}

impl Running {
    fn ready(&self) -> u64 {
        self.attack
            .stats
            .iter()
            .map(|s| s.ready.load(Ordering::Relaxed))
            .sum()
    }

    /// Waits (bounded) until every attacker has reached its attacking state.
    fn wait_ready(&self) -> u64 {
        let until = Instant::now() + READY_TIMEOUT;
        while self.ready() < ATTACKERS as u64 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.ready()
    }

    /// Stops every attacker and waits for its thread; the panics seen.
    fn stop(&mut self) -> usize {
        self.attack.stop.store(true, Ordering::Relaxed);
        self.threads
            .drain(..)
            .map(JoinHandle::join)
            .filter(Result::is_err)
            .count()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CRC-32 (zlib), as the weir header uses.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Per-kind counter values at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    connects: u64,
    connect_failures: u64,
    closed_by_daemon: u64,
    bytes_sent: u64,
}

fn counts(attack: &Attack) -> [Counts; 6] {
    let mut out = [Counts::default(); 6];
    for (o, s) in out.iter_mut().zip(&attack.stats) {
        *o = Counts {
            connects: s.connects.load(Ordering::Relaxed),
            connect_failures: s.connect_failures.load(Ordering::Relaxed),
            closed_by_daemon: s.closed_by_daemon.load(Ordering::Relaxed),
            bytes_sent: s.bytes_sent.load(Ordering::Relaxed),
        };
    }
    out
}

/// Samples the daemon's VmRSS (peak, whole attack) and the open-connection
/// gauges (averaged while `measuring` is set).
struct Sampler {
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    handle: JoinHandle<(u64, [f64; 6])>,
}

impl Sampler {
    fn start(pid: u32, attack: Arc<Attack>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let measuring = Arc::new(AtomicBool::new(false));
        let (flag, window) = (stop.clone(), measuring.clone());
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            let (mut sums, mut n) = ([0i64; 6], 0u64);
            while !flag.load(Ordering::Relaxed) && !attack.over() {
                peak = peak.max(rss_kib(pid).unwrap_or(0));
                if window.load(Ordering::Relaxed) {
                    for (sum, s) in sums.iter_mut().zip(&attack.stats) {
                        *sum += s.open.load(Ordering::Relaxed).max(0);
                    }
                    n += 1;
                }
                std::thread::sleep(SAMPLE_EVERY);
            }
            let avg = sums.map(|s| s as f64 / n.max(1) as f64);
            (peak.max(rss_kib(pid).unwrap_or(0)), avg)
        });
        Sampler {
            stop,
            measuring,
            handle,
        }
    }

    /// The peak VmRSS (KiB) and the average open connections of each kind.
    fn finish(self) -> (u64, [f64; 6]) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or((0, [0.0; 6]))
    }
}

/// The global counters of `ctl stats` that an attack moves (one the
/// daemon does not report is left out of the figures).
const DAEMON_COUNTERS: [&str; 4] = [
    "connections_accepted",
    "connections_refused",
    "read_timeouts",
    "idle_timeouts",
];

/// `key value` lines of `ctl stats`, with every `nacks{...}` line summed
/// as `nacks`.
fn daemon_counters(daemon: &BenchDaemon) -> Result<Vec<(String, u64)>, String> {
    let body = spillway_ctl::call(daemon.admin_socket(), "stats")
        .map_err(|e| format!("ctl stats: {e}"))?;
    Ok(parse_counters(&body))
}

fn parse_counters(body: &str) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut nacks = 0;
    for line in body.lines() {
        let Some((key, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        if key.starts_with("nacks{") {
            nacks += value;
        } else if DAEMON_COUNTERS.contains(&key) {
            out.push((key.to_string(), value));
        }
    }
    out.push(("nacks".to_string(), nacks));
    out
}

/// CPU time (user + system) a process has used, from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| Duration::from_secs_f64(ticks as f64 / hz as f64))
}

fn counter(list: &[(String, u64)], key: &str) -> Option<u64> {
    list.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

/// The daemon's log from byte `from` on.
fn log_since(daemon: &BenchDaemon, from: usize) -> String {
    let text = std::fs::read(daemon.dir().join("daemon.log")).unwrap_or_default();
    String::from_utf8_lossy(text.get(from..).unwrap_or_default()).into_owned()
}

/// `(level, message)` of a tracing line `TIME LEVEL target: message k=v ...`.
fn log_message(line: &str) -> Option<(String, String)> {
    let mut words = line.split_whitespace().skip(1);
    let level = words.next()?.to_string();
    let _target = words.next()?;
    let is_field = |w: &str| {
        w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let message: Vec<&str> = words.take_while(|w| !is_field(w)).collect();
    Some((level, message.join(" ")))
}

/// The most frequent log messages of `text`, with their counts, most first.
fn top_messages(text: &str, n: usize) -> Vec<(u64, String)> {
    let mut counts: Vec<(u64, String)> = Vec::new();
    for (level, message) in strip_ansi(text).lines().filter_map(log_message) {
        let key = format!("{level} {message}");
        match counts.iter_mut().find(|(_, k)| *k == key) {
            Some((c, _)) => *c += 1,
            None => counts.push((1, key)),
        }
    }
    counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    counts.truncate(n);
    counts
}

/// Slices per phase and repeat: the producer alternates between no attack
/// and under attack, `SLICES` times each, in the order B A A B B A (A B B A
/// A B on odd repeats), each slice a `1/SLICES` share of `--duration`, so a
/// drift of the machine over the repeat (other work, the disk) weighs on
/// both phases alike.
const SLICES: u32 = 3;
/// With `--quick`: one slice of each (B A, or A B), the whole `--duration`.
const QUICK_SLICES: u32 = 1;

/// What the attack slices of one repeat add up to.
#[derive(Default)]
struct Totals {
    /// The producer's time under attack (its connect, warm-up and measurement).
    window: Duration,
    /// Per kind: open connections × seconds, and counters, over the windows.
    open_secs: [f64; 6],
    closed: [u64; 6],
    connects: [u64; 6],
    connect_failures: [u64; 6],
    bytes: [u64; 6],
    /// `ctl stats` deltas over the windows, and over whole attacks.
    daemon: Vec<(String, u64)>,
    daemon_attack: Vec<(String, u64)>,
    /// The daemon's CPU time over the windows (`None` if unreadable).
    daemon_cpu: Option<Duration>,
    /// The daemon's log from each attack's start to the end of its window.
    log: String,
    log_secs: f64,
    peak_kib: u64,
    rss_before_kib: Option<u64>,
    rss_after_kib: u64,
    /// The fewest attackers attacking when a producer window started.
    ready_min: Option<u64>,
    panics: usize,
    stop_ms_max: f64,
    /// The longest wait from an attack's start until every attacker attacked.
    ramp_max: Duration,
}

/// Adds `b - a` of every counter to `into`.
fn add_deltas(into: &mut Vec<(String, u64)>, a: &[(String, u64)], b: &[(String, u64)]) {
    for (key, after) in b {
        let Some(before) = counter(a, key) else {
            continue;
        };
        let d = after.saturating_sub(before);
        match into.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v += d,
            None => into.push((key.clone(), d)),
        }
    }
}

fn add_cpu(total: &mut Option<Duration>, first: bool, a: Option<Duration>, b: Option<Duration>) {
    *total = match (b.zip(a), *total, first) {
        (Some((b, a)), Some(t), false) => Some(t + b.saturating_sub(a)),
        (Some((b, a)), _, true) => Some(b.saturating_sub(a)),
        _ => None,
    };
}

/// One attack slice: starts the attack, waits until it is established, runs
/// the producer while it goes on, stops it; the producer's sample.
fn under_attack(
    daemon: &BenchDaemon,
    plan: Plan,
    t: &mut Totals,
    first: bool,
) -> Result<Sample, LoadError> {
    let pid = daemon.pid();
    t.rss_before_kib = t.rss_before_kib.or(rss_kib(pid));
    let log_start = std::fs::metadata(daemon.dir().join("daemon.log")).map_or(0, |m| m.len());
    let before = daemon_counters(daemon)?;
    // Long enough for the readiness wait, the producer's warm-up (each push
    // may take a client timeout) and its run; the stop flag ends it sooner.
    let horizon = READY_TIMEOUT + SETTLE + plan.duration * 2 + Duration::from_secs(120);
    let attack_started = Instant::now();
    let mut running = start_attack(daemon.socket(), horizon)?;
    let sampler = Sampler::start(pid, running.attack.clone());
    let ready = running.wait_ready();
    t.ramp_max = t.ramp_max.max(attack_started.elapsed());
    std::thread::sleep(SETTLE);
    let c0 = counts(&running.attack);
    let d0 = daemon_counters(daemon);
    let cpu0 = cpu_time(pid);
    let started = Instant::now();
    sampler.measuring.store(true, Ordering::Relaxed);
    let sample = load::serial_push(daemon.socket(), Tier::Sync, plan);
    sampler.measuring.store(false, Ordering::Relaxed);
    let window = started.elapsed();
    let cpu1 = cpu_time(pid);
    let c1 = counts(&running.attack);
    let d1 = daemon_counters(daemon);
    let log_end = Instant::now();
    t.log.push_str(&log_since(daemon, log_start as usize));
    let stopping = Instant::now();
    t.panics += running.stop();
    t.stop_ms_max = t.stop_ms_max.max(stopping.elapsed().as_secs_f64() * 1000.0);
    let (peak_kib, open_avg) = sampler.finish();
    // A dead (or zombie) daemon has no VmRSS.
    if rss_kib(pid).is_none() {
        return Err(LoadError::Failed(format!(
            "the daemon exited during the attack; its log ends:\n{}",
            daemon.log_excerpt()
        )));
    }
    let sample = sample?;
    std::thread::sleep(PHASE_GAP);
    let after = daemon_counters(daemon)?;
    t.window += window;
    t.log_secs += (log_end - attack_started).as_secs_f64();
    t.peak_kib = t.peak_kib.max(peak_kib);
    t.rss_after_kib = rss_kib(pid).unwrap_or(0);
    t.ready_min = Some(t.ready_min.map_or(ready, |r| r.min(ready)));
    for i in 0..KINDS.len() {
        t.open_secs[i] += open_avg[i] * window.as_secs_f64();
        t.closed[i] += c1[i].closed_by_daemon - c0[i].closed_by_daemon;
        t.connects[i] += c1[i].connects - c0[i].connects;
        t.connect_failures[i] += c1[i].connect_failures - c0[i].connect_failures;
        t.bytes[i] += c1[i].bytes_sent - c0[i].bytes_sent;
    }
    if let (Ok(d0), Ok(d1)) = (&d0, &d1) {
        add_deltas(&mut t.daemon, d0, d1);
    }
    add_deltas(&mut t.daemon_attack, &before, &after);
    add_cpu(&mut t.daemon_cpu, first, cpu0, cpu1);
    Ok(sample)
}

/// The figures of the attack, for the under-attack row.
fn attack_figures(t: &Totals) -> Vec<(String, f64)> {
    let mut f: Vec<(String, f64)> = Vec::new();
    let mut put = |k: String, v: f64| f.push((k, v));
    let mib = |kib: u64| kib as f64 / 1024.0;
    put("rss_peak_mib".into(), mib(t.peak_kib));
    put("rss_peak_worst_mib".into(), mib(t.peak_kib));
    put("rss_before_mib".into(), mib(t.rss_before_kib.unwrap_or(0)));
    put("rss_after_mib".into(), mib(t.rss_after_kib));
    let secs = t.window.as_secs_f64().max(1e-9);
    put("attack_window_s".into(), secs);
    put("attack_ready".into(), t.ready_min.unwrap_or(0) as f64);
    put("attack_stop_ms".into(), t.stop_ms_max);
    put("attack_ramp_ms".into(), t.ramp_max.as_secs_f64() * 1000.0);
    let (mut open, mut closed, mut connects) = (0.0, 0, 0);
    for (i, kind) in KINDS.iter().enumerate() {
        let k = kind.name();
        open += t.open_secs[i] / secs;
        closed += t.closed[i];
        connects += t.connects[i];
        put(format!("{k}_open_avg"), t.open_secs[i] / secs);
        put(format!("{k}_closed_by_daemon"), t.closed[i] as f64);
        put(format!("{k}_connects"), t.connects[i] as f64);
        put(
            format!("{k}_connect_failures"),
            t.connect_failures[i] as f64,
        );
        put(
            format!("{k}_mib_per_s"),
            t.bytes[i] as f64 / secs / (1024.0 * 1024.0),
        );
    }
    put("attack_open_avg".into(), open);
    put("attack_closed_by_daemon".into(), closed as f64);
    put("attack_connects_per_s".into(), connects as f64 / secs);
    for (key, v) in &t.daemon {
        put(format!("daemon_{key}"), *v as f64);
    }
    for (key, v) in &t.daemon_attack {
        put(format!("daemon_{key}_attack_total"), *v as f64);
    }
    if let Some(cpu) = t.daemon_cpu {
        put(
            "daemon_cpu_percent".into(),
            cpu.as_secs_f64() / secs * 100.0,
        );
    }
    let lines = t.log.lines().count() as f64;
    put("log_lines".into(), lines);
    put("log_lines_per_s".into(), lines / t.log_secs.max(1e-9));
    put("log_kib".into(), t.log.len() as f64 / 1024.0);
    f
}

/// The producer alone for one slice; its sample and the daemon's CPU time.
fn alone(daemon: &BenchDaemon, plan: Plan) -> Result<(Sample, Option<Duration>), LoadError> {
    let cpu0 = cpu_time(daemon.pid());
    let sample = load::serial_push(daemon.socket(), Tier::Sync, plan)?;
    let cpu = cpu_time(daemon.pid())
        .zip(cpu0)
        .map(|(b, a)| b.saturating_sub(a));
    Ok((sample, cpu))
}

/// Adds a slice's sample to a phase's.
fn append(total: &mut Option<Sample>, slice: Sample) {
    match total {
        Some(t) => t.append(slice),
        None => *total = Some(slice),
    }
}

/// One repeat: a fresh daemon (so its peak memory is this repeat's), then
/// the producer alone and under attack in alternating slices.
pub fn hostile(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = ctx
        .launcher
        .ok_or_else(|| LoadError::Unsupported("needs a daemon started by the bench".into()))?;
    let daemon = launcher.start(
        "hostile",
        &Overrides {
            read_timeout_ms: Some(READ_TIMEOUT_MS),
            ..Overrides::default()
        },
    )?;
    // Neither phase may get the fresh daemon's start-up work (the first
    // segments, cold caches): a discarded run first.
    let warm = Plan {
        duration: ctx.plan.duration.min(WARM_RUN),
        ..ctx.plan
    };
    load::serial_push(daemon.socket(), Tier::Sync, warm)?;
    std::thread::sleep(PHASE_GAP);
    let slices = if ctx.quick { QUICK_SLICES } else { SLICES };
    let slice = Plan {
        duration: ctx.plan.duration / slices,
        ..ctx.plan
    };
    let (mut base, mut attacked, mut totals) = (None, None, Totals::default());
    let (mut base_cpu, mut base_time) = (Some(Duration::ZERO), Duration::ZERO);
    let attack_first = !ctx.round.is_multiple_of(2);
    for i in 0..2 * slices {
        // B A A B B A ..., or A B B A A B ...
        let attack = i.div_ceil(2) % 2 == 1;
        let attack = attack != attack_first;
        if attack {
            let first = attacked.is_none();
            let sample = under_attack(&daemon, slice, &mut totals, first)?;
            slice_progress(i, slices, "under attack", &sample);
            append(&mut attacked, sample);
        } else {
            let started = Instant::now();
            let (sample, cpu) = alone(&daemon, slice)?;
            base_time += started.elapsed();
            base_cpu = base_cpu.zip(cpu).map(|(a, b)| a + b);
            slice_progress(i, slices, "no attack", &sample);
            append(&mut base, sample);
            std::thread::sleep(PHASE_GAP);
        }
    }
    daemon
        .stop()
        .map_err(|e| format!("stopping the hostile daemon: {e}"))?;
    let (Some(base), Some(attacked)) = (base, attacked) else {
        return Err(LoadError::Failed("no slices were run".into()));
    };
    let mut base_row = base.to_outcome("hostile/no_attack");
    if let Some(cpu) = base_cpu {
        let secs = base_time.as_secs_f64().max(1e-9);
        base_row.set("daemon_cpu_percent", cpu.as_secs_f64() / secs * 100.0);
    }
    base_row.set("warmup_ms", base.warmup.as_secs_f64() * 1000.0);
    let mut row = attacked.to_outcome("hostile/under_attack");
    row.set("warmup_ms", attacked.warmup.as_secs_f64() * 1000.0);
    for (k, v) in attack_figures(&totals) {
        row.set(&k, v);
    }
    let ratio = |key: &str| Some(row.get(key)? / base_row.get(key)?.max(1e-9));
    if let (Some(p50), Some(p99)) = (ratio(P50), ratio(P99)) {
        let (b50, b99) = (base_row.get(P50), base_row.get(P99));
        row.set("p50_ratio", p50).set("p99_ratio", p99);
        row.set("baseline_p50_us", b50.unwrap_or(0.0))
            .set("baseline_p99_us", b99.unwrap_or(0.0));
    }
    let ready = totals.ready_min.unwrap_or(0);
    if ready < ATTACKERS as u64 {
        row.note(format!(
            "only {ready} of {ATTACKERS} attackers were attacking when a producer slice started"
        ));
    }
    if totals.panics > 0 {
        row.note(format!("{} attacker threads panicked", totals.panics));
    }
    let top = top_messages(&totals.log, 3);
    if !top.is_empty() {
        let shown: Vec<String> = top.iter().map(|(c, m)| format!("{c} x {m:?}")).collect();
        progress(&format!(
            "hostile: the daemon's log during the attacks: {}",
            shown.join("; ")
        ));
        let kinds: Vec<String> = top.iter().map(|(_, m)| format!("{m:?}")).collect();
        row.note(format!("most logged: {}", kinds.join(", ")));
    }
    Ok(vec![base_row, row])
}

/// One slice's figures on stderr, so the spread within a repeat shows.
fn slice_progress(i: u32, slices: u32, phase: &str, s: &Sample) {
    let q = |q: f64| s.latency.value_at_quantile(q) as f64 / 1000.0;
    progress(&format!(
        "hostile slice {}/{}, {phase}: {:.0} rec/s, p50 {:.1} µs, p99 {:.1} µs",
        i + 1,
        2 * slices,
        s.rate(),
        q(0.5),
        q(0.99)
    ));
}

fn progress(line: &str) {
    super::progress::line(line);
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_protocol::MessageType;

    #[test]
    fn crc_matches_the_codec() {
        let header = push_header(100);
        assert_eq!(
            crc32(&header[..12]),
            u32::from_le_bytes(header[12..16].try_into().unwrap())
        );
        assert_eq!(header[5], MessageType::Push.as_byte());
    }

    #[test]
    fn kinds_share_the_attackers_evenly() {
        let mut per_kind = [0usize; 6];
        for i in 0..ATTACKERS {
            per_kind[i % KINDS.len()] += 1;
        }
        assert!(per_kind.iter().all(|&n| n == 33 || n == 34), "{per_kind:?}");
    }

    #[test]
    fn counters_from_stats() {
        let body = "connections_open 3\nconnections_accepted 10\nread_timeouts 2\nnacks{reason=\"BadMagic\"} 4\nnacks{reason=\"BadCrc\"} 1\nshard{shard=\"0\"}.fsyncs 9\n";
        let c = parse_counters(body);
        assert_eq!(counter(&c, "connections_accepted"), Some(10));
        assert_eq!(counter(&c, "read_timeouts"), Some(2));
        assert_eq!(counter(&c, "nacks"), Some(5));
        assert_eq!(counter(&c, "connections_open"), None);
    }

    #[test]
    fn log_messages_without_fields() {
        let text = "\u{1b}[2m2026-12-01T09:43:44.088209Z\u{1b}[0m \u{1b}[33m WARN\u{1b}[0m \u{1b}[2mspillway_actors::connection\u{1b}[0m\u{1b}[2m:\u{1b}[0m refused a frame; closing the connection \u{1b}[3mconn\u{1b}[0m\u{1b}[2m=\u{1b}[0m1 \u{1b}[3mreason\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"bad_magic\"\n\
            2026-12-01T09:43:45Z  WARN spillway_actors::ingest::connection: a frame stalled; closing conn=4 timeout_ms=1000\n\
            2026-12-01T09:43:46Z  WARN spillway_actors::ingest::connection: refused a frame; closing the connection conn=9\n";
        let top = top_messages(text, 3);
        assert_eq!(
            top,
            vec![
                (
                    2,
                    "WARN refused a frame; closing the connection".to_string()
                ),
                (1, "WARN a frame stalled; closing".to_string()),
            ]
        );
    }

    #[test]
    fn vanishing_connect_to_nothing_fails_fast() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        assert!(connect_nonblocking(&dir.path().join("none.sock")).is_err());
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
