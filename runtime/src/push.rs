//! `spillway push`: records from the command line or stdin to a running
//! daemon, as pipelined PushBatch frames, for a shell script or an
//! operator's smoke test.
//!
//! Input is streamed: stdin is read one batch at a time, so a million lines
//! never sit in memory, and a record is read no further than the payload
//! cap: a line over it is refused once its first `cap + 1` bytes are in,
//! never held whole. A retryable nack (Overloaded, InternalError) pauses
//! sending, collects the answers still owed, and resends the refused batches
//! in their order with a doubling back-off until `--retry-for` runs out. A
//! fatal nack, a lost connection or bad input ends the run with the line of
//! the first record not acked. Exit status 0 only when every record was acked.

use std::collections::VecDeque;
use std::io::{self, BufRead, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use spillway_client::{Client, Error, Options, Pipeline, Reply, Tier};
use spillway_protocol::PAYLOAD_BYTES_HARD_MAX;

use crate::config::Config;

/// Arguments of `spillway push`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// The daemon's producer socket (default: the config's server.socket_path).
    #[arg(long, conflicts_with_all = ["config", "connect"])]
    pub(crate) socket: Option<PathBuf>,
    /// The daemon's TCP door instead of its socket: `tcp://HOST:PORT`
    /// (`[server.tcp]` with `tls = false`, loopback only) or
    /// `tls://HOST:PORT` (with --ca, and --cert and --key for mutual TLS).
    #[arg(long, value_name = "URL")]
    connect: Option<String>,
    /// PEM file of the CA that signed the daemon's certificate (tls://).
    #[arg(long, value_name = "FILE", requires = "connect")]
    ca: Option<PathBuf>,
    /// PEM certificate this client presents (mutual TLS; with --key).
    #[arg(long, value_name = "FILE", requires_all = ["connect", "key"])]
    cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, value_name = "FILE", requires_all = ["connect", "cert"])]
    key: Option<PathBuf>,
    /// The name the daemon's certificate must carry (default: HOST of
    /// --connect).
    #[arg(long, value_name = "NAME", requires = "connect")]
    server_name: Option<String>,
    /// The daemon's config file, for its socket and payload cap (default:
    /// $SPILLWAY_CONFIG, ./spillway.toml, /etc/spillway/spillway.toml, else
    /// the embedded default config).
    #[arg(long, short)]
    pub(crate) config: Option<PathBuf>,
    /// Durability tier of every record.
    #[arg(long, value_enum, default_value_t = TierArg::Sync)]
    tier: TierArg,
    /// Records per PushBatch frame (fewer when the payload cap is reached).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch: u32,
    /// Frames in flight on the connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    window: u32,
    /// Stdin holds NUL-separated records instead of lines.
    #[arg(long, conflicts_with = "raw")]
    null: bool,
    /// Stdin as a whole is one record.
    #[arg(long)]
    raw: bool,
    /// Skip empty lines instead of stopping at the first one.
    #[arg(long)]
    skip_empty: bool,
    /// How long to keep resending a batch the daemon refused with a
    /// retryable nack (Overloaded, InternalError), in seconds.
    #[arg(long, default_value_t = 30.0)]
    retry_for: f64,
    /// Read and write timeout of the connection, in seconds.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
    /// Records to push (instead of stdin).
    records: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TierArg {
    Sync,
    Batched,
    Buffered,
}

impl TierArg {
    fn tier(self) -> Tier {
        match self {
            Self::Sync => Tier::Sync,
            Self::Batched => Tier::Batched,
            Self::Buffered => Tier::Buffered,
        }
    }
}

/// Where the records come from and how they are separated.
enum Input {
    Args(std::vec::IntoIter<String>),
    Stream {
        reader: Box<dyn BufRead>,
        separator: u8,
    },
    Raw(Option<Box<dyn Read>>),
}

/// The unit records are counted in, for messages.
fn unit(args: &PushArgs) -> &'static str {
    if !args.records.is_empty() {
        "argument"
    } else if args.null {
        "record"
    } else {
        "line"
    }
}

/// One PushBatch: its records, back to back, and where each ends.
struct Frame {
    /// Input position (1-based) of its first record.
    first: u64,
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// First refusal of this frame, for the retry deadline.
    refused_at: Option<Instant>,
}

impl Frame {
    fn new(first: u64) -> Self {
        Self {
            first,
            bytes: Vec::new(),
            ends: Vec::new(),
            refused_at: None,
        }
    }

    fn records(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let r = &self.bytes[start..end];
                start = end;
                r
            })
            .collect()
    }

    /// PushBatch payload bytes: count, then a length prefix per record.
    fn payload_len(&self) -> usize {
        4 + 4 * self.ends.len() + self.bytes.len()
    }
}

/// What the run did, printed at the end either way.
#[derive(Default)]
struct Summary {
    acked: u64,
    frames: u64,
    resends: u64,
    skipped_empty: u64,
}

/// Runs `spillway push`; `Ok` only when every record was acked.
pub fn run(mut args: PushArgs) -> Result<String, String> {
    let (socket, cap) = target(&args)?;
    let options = Options {
        timeout: Some(seconds("--timeout", args.timeout)?),
        payload_bytes_max: cap,
    };
    let retry_for = seconds("--retry-for", args.retry_for)?;
    let unit = unit(&args);
    let mut input = if !args.records.is_empty() {
        Input::Args(std::mem::take(&mut args.records).into_iter())
    } else if args.raw {
        Input::Raw(Some(Box::new(io::stdin())))
    } else {
        Input::Stream {
            reader: Box::new(io::BufReader::with_capacity(1 << 20, io::stdin())),
            separator: if args.null { 0 } else { b'\n' },
        }
    };
    let mut client = connect(&socket, &args, options)?;
    let started = Instant::now();
    let mut sender = Sender {
        tls: args.connect.is_some().then(|| TlsHints::of(&args)),
        timeout: options.timeout.unwrap_or_default(),
        pipeline: client.pipeline(args.window as usize),
        tier: args.tier.tier(),
        window: args.window as usize,
        retry_for,
        unit,
        summary: Summary::default(),
        inflight: VecDeque::new(),
        refused: Vec::new(),
    };
    let result = sender.run(&mut input, &args, cap);
    let summary = std::mem::take(&mut sender.summary);
    let secs = started.elapsed().as_secs_f64();
    let rate = summary.acked as f64 / secs.max(1e-9);
    let tier = args.tier.tier().name();
    let text = if args.json {
        serde_json::json!({
            "ok": result.is_ok(),
            "error": result.as_ref().err(),
            "acked": summary.acked,
            "frames": summary.frames,
            "resends": summary.resends,
            "skipped_empty": summary.skipped_empty,
            "seconds": secs,
            "records_per_s": rate,
            "tier": tier,
        })
        .to_string()
            + "\n"
    } else {
        let mut line = format!(
            "acked {} records ({tier}) in {} frames, {secs:.2} s, {rate:.0} records/s",
            summary.acked, summary.frames
        );
        if summary.resends > 0 {
            line += &format!(", {} frames resent after retryable nacks", summary.resends);
        }
        if summary.skipped_empty > 0 {
            line += &format!(", {} empty {unit}s skipped", summary.skipped_empty);
        }
        line + "\n"
    };
    match result {
        Ok(()) => Ok(text),
        Err(e) => {
            crate::say(&text);
            Err(e)
        }
    }
}

fn seconds(flag: &str, s: f64) -> Result<Duration, String> {
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(format!("{flag} {s}: give seconds in (0, 86400]"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Where `push` connects.
#[derive(Debug, PartialEq, Eq)]
enum Door {
    Tcp(String),
    Tls { addr: String, host: String },
}

/// `tcp://HOST:PORT` or `tls://HOST:PORT`, checked against the TLS flags.
fn door(url: &str, args: &PushArgs) -> Result<Door, String> {
    let bad = |why: &str| format!("--connect {url:?}: {why}");
    let (scheme, addr) = url
        .split_once("://")
        .ok_or_else(|| bad("expected tcp://HOST:PORT or tls://HOST:PORT"))?;
    let host = match addr.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {
            h.trim_start_matches('[').trim_end_matches(']').to_string()
        }
        _ => {
            return Err(bad(
                "expected HOST:PORT after the scheme, a port in 1..=65535",
            ))
        }
    };
    match scheme {
        "tcp" => {
            if let Some(flag) = [
                ("--ca", args.ca.is_some()),
                ("--cert", args.cert.is_some()),
                ("--server-name", args.server_name.is_some()),
            ]
            .iter()
            .find_map(|(f, set)| set.then_some(*f))
            {
                return Err(bad(&format!(
                    "{flag} is for tls://; tcp:// is the door without TLS"
                )));
            }
            Ok(Door::Tcp(addr.to_string()))
        }
        "tls" => {
            if args.ca.is_none() {
                return Err(bad(
                    "tls:// needs --ca FILE, the CA that signed the daemon's certificate",
                ));
            }
            Ok(Door::Tls {
                addr: addr.to_string(),
                host,
            })
        }
        other => Err(bad(&format!(
            "unknown scheme {other:?}; expected tcp:// or tls://"
        ))),
    }
}

/// The connection `push` sends over: the socket, or the door --connect names.
fn connect(socket: &std::path::Path, args: &PushArgs, options: Options) -> Result<Client, String> {
    let Some(url) = &args.connect else {
        return Client::connect_with(socket, options).map_err(|e| {
            let why = match &e {
                Error::Connect { source, .. } => {
                    spillway_ctl::access::why_not_connected("server.socket_path", socket, source)
                }
                _ => "is the daemon running, and is this its server.socket_path?".to_string(),
            };
            format!("{e}: {why}")
        });
    };
    let connected = match door(url, args)? {
        Door::Tcp(addr) => Client::connect_tcp(addr.as_str(), options),
        Door::Tls { addr, host } => {
            let ca = args.ca.as_deref().expect("door() checked --ca");
            let identity = args.cert.as_deref().zip(args.key.as_deref());
            let config = spillway_client::tls_config(ca, identity).map_err(|e| e.to_string())?;
            let name = args.server_name.clone().unwrap_or(host);
            Client::connect_tls(addr.as_str(), &name, config, options)
        }
    };
    connected.map_err(|e| {
        let advice = TlsHints::of(args)
            .advice(&e.to_string())
            .unwrap_or_else(|| "is the daemon's [server.tcp] door listening there?".to_string());
        format!("connecting to {url}: {e}: {advice}")
    })
}

/// What `push` was given for TLS, to say what to change when a
/// handshake fails.
struct TlsHints {
    cert: Option<PathBuf>,
    server_name: Option<String>,
}

impl TlsHints {
    fn of(args: &PushArgs) -> Self {
        TlsHints {
            cert: args.cert.clone(),
            server_name: args.server_name.clone(),
        }
    }

    /// What to change, from a TLS error's text (the alert the daemon
    /// sent, or what this side refused), if it names a cause.
    fn advice(&self, error: &str) -> Option<String> {
        let cert = || {
            self.cert
                .as_ref()
                .map_or("this client's certificate".to_string(), |c| {
                    c.display().to_string()
                })
        };
        let alert = |name: &str| error.contains("alert") && error.contains(name);
        let advice = if alert("AccessDenied") {
            format!("the daemon refused {}: it chains to the door's ca_file but carries none of its allowed_names (the daemon's log names the names it carried); use a certificate with one of them, or add its name to allowed_names", cert())
        } else if alert("CertificateRequired") || (alert("HandshakeFailure") && self.cert.is_none())
        {
            "the door asks for a client certificate (it has ca_file): give --cert and --key"
                .to_string()
        } else if alert("UnknownCA") {
            format!("the daemon does not trust the CA that signed {}: it must chain to the door's ca_file", cert())
        } else if alert("CertificateExpired") {
            format!("the daemon says {} has expired or is not valid yet", cert())
        } else if alert("BadCertificate") {
            format!("the daemon could not use {} (is it a client certificate, with clientAuth in its extended key usage?)", cert())
        } else if error.contains("UnknownIssuer") {
            "the daemon's certificate is not signed by the CA in --ca".to_string()
        } else if error.contains("NotValidForName") {
            let name = self
                .server_name
                .as_deref()
                .unwrap_or("the host of --connect");
            format!("the daemon's certificate does not carry {name}: give --server-name with a name among its subject alternative names")
        } else if error.contains("Expired") {
            "the daemon's certificate has expired or is not valid yet".to_string()
        } else {
            return None;
        };
        Some(advice)
    }
}

/// The socket to connect to and the payload cap to check records against.
fn target(args: &PushArgs) -> Result<(PathBuf, u32), String> {
    if let Some(socket) = &args.socket {
        return Ok((socket.clone(), PAYLOAD_BYTES_HARD_MAX));
    }
    let cfg = match &args.config {
        Some(path) => Config::load(path).map_err(|e| e.to_string())?,
        None => Config::embedded_default(),
    };
    let cap = u32::try_from(cfg.server.payload_bytes_max).unwrap_or(PAYLOAD_BYTES_HARD_MAX);
    Ok((cfg.server.socket_path, cap.min(PAYLOAD_BYTES_HARD_MAX)))
}

struct Sender<'c> {
    /// `--timeout`, for the message when it expires.
    timeout: Duration,
    pipeline: Pipeline<'c>,
    tier: Tier,
    window: usize,
    retry_for: Duration,
    unit: &'static str,
    summary: Summary,
    /// Frames sent whose answers are owed, oldest first.
    inflight: VecDeque<Frame>,
    /// Frames refused with a retryable nack, in input order.
    refused: Vec<Frame>,
    /// Over TLS: what to change, from an error's text.
    tls: Option<TlsHints>,
}

impl Sender<'_> {
    fn run(&mut self, input: &mut Input, args: &PushArgs, cap: u32) -> Result<(), String> {
        let cap = cap as usize;
        let max_records = args.batch as usize;
        let mut position = 0u64;
        // A record read that did not fit the previous frame's payload.
        let mut carry: Option<Vec<u8>> = None;
        loop {
            let mut frame = Frame::new(position + 1);
            let mut bad: Option<String> = None;
            let mut at_end = false;
            while frame.ends.len() < max_records {
                let start = frame.bytes.len();
                // Read at most one byte past what a record may hold.
                let most = cap.saturating_sub(8) + 1;
                if let Some(r) = carry.take() {
                    frame.bytes.extend_from_slice(&r);
                } else if !next_record(input, &mut frame.bytes, most)
                    .map_err(|e| format!("reading stdin: {e}"))?
                {
                    at_end = true;
                    break;
                }
                let len = frame.bytes.len() - start;
                let cut = len == most;
                if !frame.ends.is_empty() && frame.payload_len() + 4 > cap {
                    // Over the cap with this record: it opens the next frame.
                    carry = Some(frame.bytes.split_off(start));
                    break;
                }
                position += 1;
                if frame.ends.is_empty() {
                    frame.first = position;
                }
                if len == 0 {
                    if args.skip_empty {
                        self.summary.skipped_empty += 1;
                        if frame.ends.is_empty() {
                            frame.first = position + 1;
                        }
                        continue;
                    }
                    bad = Some(format!(
                        "{} {position} is empty (a record has at least one byte); \
                         use --skip-empty to skip empty {}s",
                        self.unit, self.unit
                    ));
                    break;
                }
                if 8 + len > cap {
                    frame.bytes.truncate(start);
                    let size = if cut {
                        format!("over {} bytes (read no further)", len - 1)
                    } else {
                        format!("{len} bytes")
                    };
                    bad = Some(format!(
                        "{} {position} is {size}: over the daemon's payload cap of {cap} bytes \
                         (server.payload_bytes_max) less 8 bytes of batch framing",
                        self.unit
                    ));
                    break;
                }
                frame.ends.push(frame.bytes.len());
            }
            if !frame.ends.is_empty() {
                self.send(frame)?;
            }
            if let Some(bad) = bad {
                self.settle_all()?;
                return Err(bad);
            }
            if at_end {
                return self.settle_all();
            }
        }
    }

    /// Sends `frame`, first taking answers so the window is never exceeded.
    fn send(&mut self, frame: Frame) -> Result<(), String> {
        while self.inflight.len() >= self.window {
            self.take_answer()?;
        }
        if !self.refused.is_empty() {
            // A retryable nack: collect what is owed, resend the refused
            // frames, and only then go on.
            self.settle_all()?;
        }
        self.write(frame)
    }

    fn write(&mut self, frame: Frame) -> Result<(), String> {
        let result = self
            .pipeline
            .push_batch(self.tier, &frame.records())
            .and_then(|()| self.pipeline.flush());
        self.summary.frames += 1;
        self.inflight.push_back(frame);
        result.map_err(|e| self.connection_lost(&e))
    }

    /// Reads the oldest answer owed and settles its frame.
    fn take_answer(&mut self) -> Result<(), String> {
        let answer = self.pipeline.recv();
        let mut frame = self.inflight.pop_front().expect("an answer is owed");
        match answer {
            Ok(Reply::AckBatch(n)) => {
                self.summary.acked += u64::from(n);
                Ok(())
            }
            Ok(other) => Err(format!("daemon answered {other:?} to a PushBatch")),
            Err(e) if e.is_retryable() => {
                let now = Instant::now();
                let since = *frame.refused_at.get_or_insert(now);
                if now.duration_since(since) >= self.retry_for {
                    return Err(format!(
                        "{e}; gave up after --retry-for {:.1} s: the {} records from {} {} on \
                         were not acked",
                        self.retry_for.as_secs_f64(),
                        frame.ends.len(),
                        self.unit,
                        frame.first
                    ));
                }
                self.refused.push(frame);
                Ok(())
            }
            Err(e) => {
                self.inflight.push_front(frame);
                Err(self.connection_lost(&e))
            }
        }
    }

    fn connection_lost(&self, e: &Error) -> String {
        let e = if e.is_timeout() {
            format!(
                "timed out: no answer from the daemon within --timeout {:.1} s",
                self.timeout.as_secs_f64()
            )
        } else {
            // With TLS 1.3 a refused client certificate is told on the
            // first read, after a handshake that looked complete.
            let text = e.to_string();
            match self.tls.as_ref().and_then(|t| t.advice(&text)) {
                Some(a) => format!("{text}: {a}"),
                None => text,
            }
        };
        let first = self
            .refused
            .iter()
            .chain(self.inflight.iter())
            .map(|f| f.first)
            .min();
        match first {
            Some(first) => format!(
                "{e}; the records from {} {first} on were not all acked",
                self.unit
            ),
            None => e,
        }
    }

    /// Collects every answer owed and resends the refused frames (in input
    /// order, after a doubling back-off) until all are acked.
    fn settle_all(&mut self) -> Result<(), String> {
        let mut backoff = Duration::from_millis(50);
        loop {
            while !self.inflight.is_empty() {
                self.take_answer()?;
            }
            if self.refused.is_empty() {
                return Ok(());
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
            self.refused.sort_by_key(|f| f.first);
            for frame in std::mem::take(&mut self.refused) {
                while self.inflight.len() >= self.window {
                    self.take_answer()?;
                }
                self.summary.resends += 1;
                self.write(frame)?;
            }
        }
    }
}

/// Appends the next record (without its separator) to `buf`, at most
/// `most` bytes of it (a record that long is cut there, the rest unread);
/// false at the end of input.
fn next_record(input: &mut Input, buf: &mut Vec<u8>, most: usize) -> io::Result<bool> {
    match input {
        Input::Args(it) => Ok(it
            .next()
            .map(|r| buf.extend_from_slice(&r.as_bytes()[..r.len().min(most)]))
            .is_some()),
        Input::Raw(r) => {
            let Some(reader) = r.take() else {
                return Ok(false);
            };
            reader.take(most as u64).read_to_end(buf)?;
            Ok(true)
        }
        Input::Stream { reader, separator } => read_until_at_most(reader, *separator, buf, most),
    }
}

/// `BufRead::read_until` that stops after `most` bytes of the record (the
/// separator not counted, nor kept); false at the end of input.
fn read_until_at_most(
    reader: &mut dyn BufRead,
    separator: u8,
    buf: &mut Vec<u8>,
    most: usize,
) -> io::Result<bool> {
    let mut taken = 0;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any);
        }
        any = true;
        let room = most - taken;
        let (used, done) = match available.iter().position(|&b| b == separator) {
            Some(i) if i <= room => {
                buf.extend_from_slice(&available[..i]);
                (i + 1, true)
            }
            _ => {
                let n = available.len().min(room);
                buf.extend_from_slice(&available[..n]);
                (n, n == room)
            }
        };
        taken += used;
        reader.consume(used);
        if done {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each record of `input` as `read_until_at_most` gives it.
    fn records(input: &[u8], most: usize) -> Vec<Vec<u8>> {
        let mut reader = io::BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        loop {
            let mut buf = Vec::new();
            if !read_until_at_most(&mut reader, b'\n', &mut buf, most).unwrap() {
                return out;
            }
            out.push(buf);
        }
    }

    #[test]
    fn a_line_is_read_no_further_than_the_cap() {
        assert_eq!(
            records(b"ab\ncdefgh\n\nij", 5),
            [&b"ab"[..], b"cdefg", b"h", b"", b"ij"]
        );
        // Exactly the cap, then its separator: one record, the separator gone.
        assert_eq!(records(b"abcde\nf\n", 5), [&b"abcde"[..], b"f"]);
        assert!(records(b"", 5).is_empty());
    }

    fn args(line: &[&str]) -> PushArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            push: PushArgs,
        }
        let mut all = vec!["push"];
        all.extend_from_slice(line);
        <Cli as clap::Parser>::try_parse_from(all).unwrap().push
    }

    #[test]
    fn connect_takes_tcp_and_tls_urls_and_says_what_is_wrong_with_others() {
        let door_of = |line: &[&str]| {
            let a = args(line);
            door(a.connect.as_deref().unwrap(), &a)
        };
        assert_eq!(
            door_of(&["--connect", "tcp://127.0.0.1:7070"]),
            Ok(Door::Tcp("127.0.0.1:7070".into()))
        );
        assert_eq!(
            door_of(&["--connect", "tls://[::1]:7070", "--ca", "ca.crt"]),
            Ok(Door::Tls {
                addr: "[::1]:7070".into(),
                host: "::1".into()
            })
        );
        for (line, want) in [
            (
                &["--connect", "127.0.0.1:7070"][..],
                "expected tcp://HOST:PORT",
            ),
            (&["--connect", "udp://h:1"][..], "unknown scheme \"udp\""),
            (&["--connect", "tcp://h"][..], "expected HOST:PORT"),
            (&["--connect", "tcp://h:0"][..], "a port in 1..=65535"),
            (&["--connect", "tls://h:1"][..], "tls:// needs --ca FILE"),
            (
                &["--connect", "tcp://h:1", "--ca", "c"][..],
                "--ca is for tls://",
            ),
        ] {
            let e = door_of(line).unwrap_err();
            assert!(e.contains(want), "{line:?}: {e}");
        }
    }

    #[test]
    fn a_tls_alert_becomes_what_to_change() {
        let hints = TlsHints {
            cert: Some("client.crt".into()),
            server_name: None,
        };
        let advice = |e: &str| hints.advice(e).unwrap_or_default();
        assert!(advice("i/o: received fatal alert: AccessDenied")
            .contains("the daemon refused client.crt"));
        assert!(advice("received fatal alert: UnknownCA")
            .contains("does not trust the CA that signed client.crt"));
        assert!(advice("invalid peer certificate: UnknownIssuer")
            .contains("not signed by the CA in --ca"));
        assert!(advice("invalid peer certificate: NotValidForName").contains("give --server-name"));
        assert_eq!(hints.advice("connection refused"), None);
    }
}
