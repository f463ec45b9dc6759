//! `tap_under_load`: does `spillway ctl tap` cost producers anything? A
//! pipelined Sync producer (64 deep) is timed against the bench daemon
//! four ways in one run: with no tap; with the tap an operator runs (the
//! default `--rate`, 100 records a second, read as they come); with a tap
//! of every record (`--rate 0`) nobody reads (its queue fills, the rest is
//! dropped: a stuck terminal); and with a tap of every record read as fast
//! as it comes (the firehose: formatting and reading every record takes
//! CPU of its own, which on a small machine is the producers'). The order
//! rotates with the repeat. Each tapped row gives its p99 over the
//! untapped one and the lines its reader read.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use spillway_protocol::Tier;

use crate::context::Ctx;
use crate::load::{self, LoadError, Sample};
use crate::report::{Kind, ReportRow};

const NAME: &str = "tap_under_load";
const WINDOW: usize = 64;

/// How the tap is read while the producer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    None,
    /// The default rate, read as it comes.
    Sampled,
    /// Every record, never read.
    Stalled,
    /// Every record, read as fast as it comes.
    Firehose,
}

const READERS: [Reader; 4] = [
    Reader::None,
    Reader::Sampled,
    Reader::Stalled,
    Reader::Firehose,
];

impl Reader {
    fn row(self) -> String {
        match self {
            Reader::None => NAME.to_string(),
            Reader::Sampled => format!("{NAME}/sampled"),
            Reader::Stalled => format!("{NAME}/stalled"),
            Reader::Firehose => format!("{NAME}/firehose"),
        }
    }

    fn command(self) -> &'static [u8] {
        match self {
            Reader::Sampled => b"tap --json\n",
            _ => b"tap --rate 0 --json\n",
        }
    }
}

/// A tap on the admin socket and what its reader counted.
struct Watcher {
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
    /// The stalled reader's connection, kept open (unread) until the end.
    held: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    fn start(admin: &std::path::Path, reader: Reader) -> Result<Watcher, LoadError> {
        let failed =
            |e: std::io::Error| LoadError::Failed(format!("tap on {}: {e}", admin.display()));
        let mut s = UnixStream::connect(admin).map_err(failed)?;
        s.write_all(reader.command()).map_err(failed)?;
        let stop = Arc::new(AtomicBool::new(false));
        let lines = Arc::new(AtomicU64::new(0));
        let mut first = String::new();
        let mut r = BufReader::new(s.try_clone().map_err(failed)?);
        r.read_line(&mut first).map_err(failed)?;
        if first != "ok\n" {
            return Err(LoadError::Failed(format!("tap refused: {first}")));
        }
        if reader == Reader::Stalled {
            return Ok(Watcher {
                stop,
                lines,
                held: Some(s),
                thread: None,
            });
        }
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .map_err(failed)?;
        let (stop2, lines2) = (stop.clone(), lines.clone());
        let thread = std::thread::spawn(move || {
            let mut line = Vec::new();
            while !stop2.load(Ordering::Relaxed) {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        lines2.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
        });
        Ok(Watcher {
            stop,
            lines,
            held: Some(s),
            thread: Some(thread),
        })
    }

    /// Lines read (records and counts), and closes the tap.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.held.take());
        self.lines.load(Ordering::Relaxed)
    }
}

pub fn tap_under_load(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let Some(admin) = ctx.admin_socket else {
        return Ok(vec![ReportRow::skipped(
            NAME,
            Kind::Scenario,
            "needs the admin socket of a daemon the bench started (not --socket)".into(),
        )]);
    };
    let mut order = READERS;
    order.rotate_left(ctx.round % READERS.len());
    let mut measured: Vec<(Reader, Sample, u64)> = Vec::new();
    for reader in order {
        let watcher = match reader {
            Reader::None => None,
            r => Some(Watcher::start(admin, r)?),
        };
        let sample = load::pipelined_push(ctx.socket, Tier::Sync, WINDOW, ctx.plan);
        let lines = watcher.map_or(0, Watcher::finish);
        measured.push((reader, sample?, lines));
    }
    let q = |s: &Sample, p: f64| s.latency.value_at_quantile(p) as f64 / 1000.0;
    let alone = measured
        .iter()
        .find(|(r, _, _)| *r == Reader::None)
        .map(|(_, s, _)| q(s, 0.99))
        .unwrap_or(0.0);
    let mut rows = Vec::new();
    for reader in READERS {
        let Some((_, sample, lines)) = measured.iter().find(|(r, _, _)| *r == reader) else {
            continue;
        };
        let mut row = sample.to_outcome(&reader.row());
        if reader != Reader::None {
            row.set("p99_ratio", q(sample, 0.99) / alone.max(1e-9))
                .set("alone_p99_us", alone)
                .set("tap_lines", *lines as f64);
        }
        rows.push(row);
    }
    Ok(rows)
}
