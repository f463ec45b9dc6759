//! `payload_sweep`: the same three Sync loads at six record sizes, from
//! weir's 5 bytes to 64 KiB, against the bench daemon. Small records
//! measure per-record overhead (read against the fsync probe); large ones
//! move bytes, so their MiB/s reads against the disk-bandwidth probe
//! (sequential 1 MiB writes, each followed by fdatasync).
//!
//! For each size: one connection pushing one Sync record at a time
//! (serial), and one connection sending one Sync PushBatch at a time of
//! up to 256 records and at most 1 MiB (so a 64 KiB batch is the probe's
//! 1 MiB write), and the same PushBatch with 4 in flight on one pipelined
//! connection (a producer streaming bytes: one batch crosses the socket
//! while another is fsynced; the 64 KiB target reads this one). Each point
//! has a fixed length of its own (it does not follow `--duration`:
//! eighteen points at 3 s would double the bench's run time), and the
//! order of the loads alternates over repeats.

use std::time::Duration;

use spillway_client::Tier;

use super::context::Ctx;
use super::load::{self, LoadError, Plan, Sample};
use super::progress;
use super::report::{Kind, ReportRow};

use sink_sdk::units::{KIB, MIB};

/// The record sizes, bytes.
pub const SIZES: [usize; 6] = [5, 64, 512, 4096, 32 * 1024, 64 * 1024];
/// Records per PushBatch: at most this many...
const BATCH_RECORDS_MAX: usize = 256;
/// ... and at most this many bytes of payload.
const BATCH_BYTES_MAX: usize = MIB as usize;
/// PushBatches in flight on the pipelined load: while one is fsynced the
/// next crosses the socket.
const PIPELINE_WINDOW: usize = 4;
/// Measurement time of each point (`--quick`).
const POINT: Duration = Duration::from_secs(1);
const POINT_QUICK: Duration = Duration::from_millis(200);
/// Warm-up of each point writes at most this much payload (300 warm-up
/// batches of 1 MiB would write 300 MiB before the measurement starts).
const WARMUP_BYTES_MAX: usize = 32 * MIB as usize;

/// `5B`, `64B`, `4KiB`, `64KiB`: the row suffix and chart label of a size.
pub fn size_label(bytes: usize) -> String {
    let kib = KIB as usize;
    if bytes >= kib && bytes.is_multiple_of(kib) {
        format!("{}KiB", bytes / kib)
    } else {
        format!("{bytes}B")
    }
}

/// Records per PushBatch for records of `bytes`.
pub fn batch_records(bytes: usize) -> usize {
    (BATCH_BYTES_MAX / bytes).clamp(1, BATCH_RECORDS_MAX)
}

/// A payload of `bytes`: weir's `spill` for 5 bytes, else a repeating pattern.
fn payload(bytes: usize) -> Vec<u8> {
    if bytes == load::PAYLOAD.len() {
        return load::PAYLOAD.to_vec();
    }
    (0..bytes).map(|i| b'a' + (i % 26) as u8).collect()
}

fn mib_per_s(sample: &Sample, bytes: usize) -> f64 {
    sample.rate() * bytes as f64 / MIB as f64
}

/// One row per record size.
pub fn payload_sweep(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let duration = if ctx.quick { POINT_QUICK } else { POINT };
    let mut rows = Vec::new();
    for bytes in SIZES {
        let label = size_label(bytes);
        progress::detail("payload_sweep", ctx.round + 1, ctx.repeats, &label);
        let n = batch_records(bytes);
        let record = payload(bytes);
        let plan = |per_request: usize| Plan {
            duration,
            warmup: ctx
                .plan
                .warmup
                .min((WARMUP_BYTES_MAX / (per_request * bytes)).max(10)),
        };
        let serial = || load::serial_push_of(ctx.socket, Tier::Sync, &record, plan(1));
        let batch = || load::serial_batch_of(ctx.socket, Tier::Sync, &record, n, plan(n));
        let pipelined = || {
            load::pipelined_batch_of(ctx.socket, Tier::Sync, &record, n, PIPELINE_WINDOW, plan(n))
        };
        let (serial, batch, pipelined) = if ctx.round.is_multiple_of(2) {
            let s = serial()?;
            let b = batch()?;
            (s, b, pipelined()?)
        } else {
            let p = pipelined()?;
            let b = batch()?;
            (serial()?, b, p)
        };
        let mut row = batch.to_outcome(&format!("payload_sweep/{label}"));
        row.set("record_bytes", bytes as f64)
            .set("batch_records", n as f64)
            .set("mib_per_s", mib_per_s(&batch, bytes))
            .set("serial_records_per_s", serial.rate())
            .set("serial_mib_per_s", mib_per_s(&serial, bytes))
            .set("batch_ratio", batch.rate() / serial.rate().max(1e-9))
            .set("pipelined_mib_per_s", mib_per_s(&pipelined, bytes))
            .set_latency("serial_", &serial.latency);
        rows.push(row);
    }
    Ok(rows)
}

/// Whether `row` is one of the sweep's (for the charts).
pub fn is_sweep_row(row: &ReportRow) -> bool {
    row.kind == Kind::Scenario && row.name.starts_with("payload_sweep/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_labels_and_batches() {
        let labels: Vec<String> = SIZES.iter().map(|&b| size_label(b)).collect();
        assert_eq!(labels, ["5B", "64B", "512B", "4KiB", "32KiB", "64KiB"]);
        let batches: Vec<usize> = SIZES.iter().map(|&b| batch_records(b)).collect();
        assert_eq!(batches, [256, 256, 256, 256, 32, 16]);
        assert_eq!(payload(5), b"spill");
        assert_eq!(payload(64 * 1024).len(), 65536);
    }
}
