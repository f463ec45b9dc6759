//! `ctl segments`: each shard's segment files as the daemon sees them now:
//! open or sealed, bytes, the first sequence number each holds, and whether
//! the sink has confirmed all, part or none of it; per shard the durable
//! and confirmed positions and the age of the oldest pending record.

use std::fmt::Write as _;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use serde_json::{json, Value};
use spillway_wab::format::{classify, now_unix_us, FileKind, SegmentHeader, SEGMENT_HEADER_LEN};

use super::AdminState;

/// One segment file.
pub(crate) struct Segment {
    pub id: u64,
    pub sealed: bool,
    pub bytes: u64,
    /// `None` for a preallocated segment no record has reached yet.
    pub first_seq: Option<u64>,
}

fn first_seq(path: &Path) -> Option<u64> {
    let mut header = [0u8; SEGMENT_HEADER_LEN];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    SegmentHeader::decode(&header).ok()?.map(|h| h.first_seq)
}

/// The segment files of the shard folder `dir`, oldest first (also read by
/// `spillway inspect`).
pub(crate) fn segments(dir: &Path) -> Result<Vec<Segment>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out: Vec<Segment> = entries
        .flatten()
        .filter_map(|e| {
            let (id, sealed) = match classify(&e.file_name().to_string_lossy())? {
                FileKind::Open(id) => (id, false),
                FileKind::Sealed(id) => (id, true),
                _ => return None,
            };
            let path: PathBuf = e.path();
            Some(Segment {
                id,
                sealed,
                bytes: e.metadata().map_or(0, |m| m.len()),
                first_seq: first_seq(&path),
            })
        })
        .collect();
    out.sort_by_key(|s| s.id);
    Ok(out)
}

/// Whether the sink has confirmed the records of `seg` (whose successor
/// starts at `next_first`), given the shard's `checkpoint`.
fn confirmed(
    seg: &Segment,
    next_first: Option<u64>,
    checkpoint: u64,
    durable: u64,
) -> &'static str {
    let Some(first) = seg.first_seq else {
        return "empty";
    };
    let end = next_first.unwrap_or(durable);
    if end <= first {
        "empty"
    } else if checkpoint >= end {
        "confirmed"
    } else if checkpoint > first {
        "partly confirmed"
    } else {
        "pending"
    }
}

/// The report, as prose or as one JSON document.
pub(super) fn report(state: &AdminState, as_json: bool) -> Result<String, String> {
    let data_dir = state.data_dir.clone();
    let mut shards = Vec::new();
    let mut text = String::new();
    for (i, q) in state.shards.iter().enumerate() {
        let dir = spillway_wab::shard_dir(&data_dir, q.shard);
        let segs = segments(&dir)?;
        let drains = state.board.shard(i);
        // A segment is confirmed once every sink has confirmed it.
        let checkpoint = drains
            .iter()
            .map(|(_, d)| d.checkpoint.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        let durable = q.durable().next_seq;
        let oldest = drains
            .iter()
            .map(|(_, d)| d.oldest_pending_arrival_us.load(Ordering::Relaxed))
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        let age = (oldest > 0).then(|| now_unix_us().saturating_sub(oldest) as f64 / 1e6);
        let total: u64 = segs.iter().map(|s| s.bytes).sum();
        let sealed = segs.iter().filter(|s| s.sealed).count();
        let rows: Vec<(&Segment, &'static str)> = segs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let next = segs[i + 1..].iter().find_map(|n| n.first_seq);
                (s, confirmed(s, next, checkpoint, durable))
            })
            .collect();
        let _ = write!(
            text,
            "shard {}: {} segments ({sealed} sealed, {} open), {total} bytes; durable below seq {durable}, confirmed below {checkpoint}",
            q.shard,
            segs.len(),
            segs.len() - sealed
        );
        if let Some(age) = age {
            let _ = write!(text, "; oldest pending record {age:.1} s old");
        }
        text.push('\n');
        for (s, c) in &rows {
            let first = s.first_seq.map_or("-".to_string(), |f| f.to_string());
            let _ = writeln!(
                text,
                "  {:016x}.{:<6} {:>12} bytes  first seq {first:>10}  {c}",
                s.id,
                if s.sealed { "sealed" } else { "open" },
                s.bytes
            );
        }
        shards.push(json!({
            "shard": q.shard,
            "dir": dir.display().to_string(),
            "bytes": total,
            "durable_next_seq": durable,
            "checkpoint": checkpoint,
            "oldest_pending_age_seconds": age,
            "segments": rows.iter().map(|(s, c)| json!({
                "id": s.id,
                "state": if s.sealed { "sealed" } else { "open" },
                "bytes": s.bytes,
                "first_seq": s.first_seq,
                "confirmed": c,
            })).collect::<Vec<Value>>(),
        }));
    }
    Ok(if as_json {
        json!({ "shards": shards }).to_string() + "\n"
    } else {
        text
    })
}
