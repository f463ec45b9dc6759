//! Machine probes: what this disk and this kernel can do with no daemon in
//! the way. The targets are bounds relative to these figures.
//!
//! - disk: `fdatasync` after a 64-byte append to a growing file; the same
//!   into a preallocated, already-written (zero-filled, fsynced) file at
//!   increasing offsets; and 256 × 5-byte records as one write + one
//!   `fdatasync` into such a file.
//! - disk bandwidth: sequential 1 MiB writes into such a file, each
//!   followed by `fdatasync`, in MiB/s: the ceiling for large records.
//! - socket: a 20-byte Unix-socket ping-pong between two threads.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::report::{new_histogram, record, Kind, ReportRow};

const APPEND_BYTES: usize = 64;
const BATCH_RECORDS: usize = 256;
const RECORD_BYTES: usize = 5;
const MESSAGE_BYTES: usize = 20;
const FSYNC_WARMUP: usize = 20;
/// One write of the bandwidth probe: 1 MiB, like a PushBatch of 16 × 64 KiB.
const BANDWIDTH_CHUNK: usize = 1 << 20;
const BANDWIDTH_WARMUP: usize = 4;
const RTT_WARMUP: usize = 1000;

/// Iteration counts of the probes.
#[derive(Debug, Clone, Copy)]
pub struct ProbeCounts {
    /// fdatasyncs timed per file kind (append, preallocated).
    pub fsyncs: usize,
    /// 256-record write + fdatasync rounds.
    pub batch_writes: usize,
    /// 1 MiB write + fdatasync rounds of the bandwidth probe.
    pub bandwidth_writes: usize,
    pub round_trips: usize,
}

fn io_err(what: &str, path: &Path) -> impl Fn(std::io::Error) -> String {
    let (what, path) = (what.to_string(), path.display().to_string());
    move |e| format!("disk probe: {what} {path}: {e}")
}

/// A file of `len` zero bytes, written out and fsynced (like a WAB segment).
fn prewritten(path: &Path, len: usize) -> Result<File, String> {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err("creating", path))?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len());
        file.write_all(&zeros[..n])
            .map_err(io_err("zero-filling", path))?;
        left -= n;
    }
    file.sync_all().map_err(io_err("fsyncing", path))?;
    Ok(file)
}

/// `write(i)` then a timed `fdatasync`, `FSYNC_WARMUP + n` times; p50/p99 in µs.
fn fsync_after(
    file: &File,
    n: usize,
    mut write: impl FnMut(usize) -> std::io::Result<()>,
) -> std::io::Result<(f64, f64)> {
    let mut hist = new_histogram();
    for i in 0..FSYNC_WARMUP + n {
        write(i)?;
        let start = Instant::now();
        file.sync_data()?;
        if i >= FSYNC_WARMUP {
            record(&mut hist, start.elapsed());
        }
    }
    let us = |q| hist.value_at_quantile(q) as f64 / 1000.0;
    Ok((us(0.5), us(0.99)))
}

fn append_probe(dir: &Path, n: usize, out: &mut ReportRow) -> Result<(), String> {
    let path = dir.join("append.probe");
    let mut file = File::create(&path).map_err(io_err("creating", &path))?;
    let bytes = [0x5au8; APPEND_BYTES];
    let handle = file.try_clone().map_err(io_err("opening", &path))?;
    let (p50, p99) = fsync_after(&handle, n, |_| file.write_all(&bytes))
        .map_err(io_err("appending to", &path))?;
    out.set("append_fsync_p50_us", p50)
        .set("append_fsync_p99_us", p99);
    Ok(())
}

fn prealloc_probe(dir: &Path, n: usize, out: &mut ReportRow) -> Result<(), String> {
    let path = dir.join("prealloc.probe");
    let file = prewritten(&path, (FSYNC_WARMUP + n) * APPEND_BYTES)?;
    let bytes = [0x5au8; APPEND_BYTES];
    let at = |i: usize| (i * APPEND_BYTES) as u64;
    let (p50, p99) = fsync_after(&file, n, |i| file.write_all_at(&bytes, at(i)))
        .map_err(io_err("writing", &path))?;
    out.set("prealloc_fsync_p50_us", p50)
        .set("prealloc_fsync_p99_us", p99);
    Ok(())
}

/// 256 × 5-byte records as one `pwrite` + one `fdatasync` into a
/// preallocated file, the durable ceiling for `batch_durable_n256`.
fn batch_probe(dir: &Path, rounds: usize, out: &mut ReportRow) -> Result<(), String> {
    let path = dir.join("batch.probe");
    let chunk = BATCH_RECORDS * RECORD_BYTES;
    let file = prewritten(&path, (FSYNC_WARMUP + rounds) * chunk)?;
    let bytes = vec![0x5au8; chunk];
    let mut hist = new_histogram();
    let mut busy = Duration::ZERO;
    for i in 0..FSYNC_WARMUP + rounds {
        let start = Instant::now();
        file.write_all_at(&bytes, (i * chunk) as u64)
            .map_err(io_err("writing", &path))?;
        file.sync_data().map_err(io_err("fdatasync of", &path))?;
        if i >= FSYNC_WARMUP {
            record(&mut hist, start.elapsed());
            busy += start.elapsed();
        }
    }
    let rate = (rounds * BATCH_RECORDS) as f64 / busy.as_secs_f64().max(1e-9);
    out.set("batch256_records_per_s", rate)
        .set_latency("batch256_", &hist);
    Ok(())
}

/// The disk probe, in a scratch folder under `dir` (removed afterwards).
pub fn disk_probe(dir: &Path, counts: ProbeCounts) -> Result<ReportRow, String> {
    let scratch = tempfile::Builder::new()
        .prefix("disk-probe-")
        .tempdir_in(dir)
        .map_err(|e| format!("disk probe: creating a folder in {}: {e}", dir.display()))?;
    let mut out = ReportRow::new("disk_probe", Kind::Probe);
    append_probe(scratch.path(), counts.fsyncs, &mut out)?;
    prealloc_probe(scratch.path(), counts.fsyncs, &mut out)?;
    batch_probe(scratch.path(), counts.batch_writes, &mut out)?;
    Ok(out)
}

/// Sequential 1 MiB writes into a preallocated file, each followed by
/// `fdatasync`: MiB divided by the time spent in write + fdatasync. The
/// durable ceiling for large records (`payload_sweep`), as `batch256` is
/// for small ones. A scratch folder under `dir`, removed afterwards.
pub fn bandwidth_probe(dir: &Path, counts: ProbeCounts) -> Result<ReportRow, String> {
    let scratch = tempfile::Builder::new()
        .prefix("bandwidth-probe-")
        .tempdir_in(dir)
        .map_err(|e| format!("disk probe: creating a folder in {}: {e}", dir.display()))?;
    let path = scratch.path().join("bandwidth.probe");
    let rounds = counts.bandwidth_writes;
    let file = prewritten(&path, (BANDWIDTH_WARMUP + rounds) * BANDWIDTH_CHUNK)?;
    let bytes = vec![0x5au8; BANDWIDTH_CHUNK];
    let mut hist = new_histogram();
    let mut busy = Duration::ZERO;
    for i in 0..BANDWIDTH_WARMUP + rounds {
        let start = Instant::now();
        file.write_all_at(&bytes, (i * BANDWIDTH_CHUNK) as u64)
            .map_err(io_err("writing", &path))?;
        file.sync_data().map_err(io_err("fdatasync of", &path))?;
        if i >= BANDWIDTH_WARMUP {
            record(&mut hist, start.elapsed());
            busy += start.elapsed();
        }
    }
    let mib = (rounds * BANDWIDTH_CHUNK) as f64 / (1u64 << 20) as f64;
    let mut out = ReportRow::new("disk_bandwidth", Kind::Probe);
    out.set("mib_per_s", mib / busy.as_secs_f64().max(1e-9))
        .set_latency("write_1mib_", &hist);
    Ok(out)
}

/// Echoes fixed-size messages until the other end hangs up.
fn echo(mut stream: UnixStream) {
    let mut buf = [0u8; MESSAGE_BYTES];
    while stream.read_exact(&mut buf).is_ok() && stream.write_all(&buf).is_ok() {}
}

/// Unix-socket ping-pong round trips between two threads.
pub fn socket_probe(counts: ProbeCounts) -> Result<ReportRow, String> {
    let (mut ours, theirs) =
        UnixStream::pair().map_err(|e| format!("socket probe: socketpair: {e}"))?;
    let echoer = std::thread::spawn(move || echo(theirs));
    let mut hist = new_histogram();
    let msg = [0xa5u8; MESSAGE_BYTES];
    let mut back = [0u8; MESSAGE_BYTES];
    for i in 0..RTT_WARMUP + counts.round_trips {
        let start = Instant::now();
        ours.write_all(&msg)
            .and_then(|_| ours.read_exact(&mut back))
            .map_err(|e| format!("socket probe: {e}"))?;
        if i >= RTT_WARMUP {
            record(&mut hist, start.elapsed());
        }
    }
    drop(ours);
    let _ = echoer.join();
    let mut out = ReportRow::new("socket_probe", Kind::Probe);
    out.set_latency("rtt_", &hist);
    Ok(out)
}
