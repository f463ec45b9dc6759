//! `spillway inspect DATA_DIR`: what a data folder holds, read with the
//! segment reader and no daemon (it changes nothing and takes no lock, so
//! it also works beside a running daemon). Per shard: its segments (open,
//! sealed, quarantined), its records, and which of them are still pending
//! (at or past the delivery checkpoint) or confirmed (delivered or
//! dead-lettered).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use spillway_wab::format::now_unix_us;
use spillway_wab::{read_checkpoint, read_shard, FsStorage, StoredRecord};

/// One shard folder, read.
struct Shard {
    dir: PathBuf,
    checkpoint: u64,
    records: Vec<StoredRecord>,
    open_segments: usize,
    sealed_segments: usize,
    segment_bytes: u64,
    quarantined_files: usize,
}

impl Shard {
    fn read(dir: PathBuf) -> Result<Shard, String> {
        let at = |e: std::io::Error| format!("{}: {e}", dir.display());
        let checkpoint = read_checkpoint(&FsStorage, &dir).map_err(at)?;
        let records = read_shard(&FsStorage, &dir).map_err(at)?;
        let segments = crate::admin::segments::segments(&dir)?;
        let sealed_segments = segments.iter().filter(|s| s.sealed).count();
        let open_segments = segments.len() - sealed_segments;
        let segment_bytes = segments.iter().map(|s| s.bytes).sum();
        let quarantined_files = std::fs::read_dir(dir.join("quarantine")).map_or(0, |d| {
            d.flatten()
                .filter(|e| !e.file_name().to_string_lossy().ends_with(".reason"))
                .count()
        });
        Ok(Shard {
            dir,
            checkpoint,
            records,
            open_segments,
            sealed_segments,
            segment_bytes,
            quarantined_files,
        })
    }

    fn pending(&self) -> impl Iterator<Item = &StoredRecord> {
        self.records.iter().filter(|r| r.seq >= self.checkpoint)
    }

    fn summary(&self) -> Value {
        let pending = self.pending().count();
        let oldest = self.pending().map(|r| r.meta.arrival_unix_us).min();
        json!({
            "dir": self.dir.display().to_string(),
            "records": self.records.len(),
            "first_seq": self.records.first().map(|r| r.seq),
            "last_seq": self.records.last().map(|r| r.seq),
            "checkpoint": self.checkpoint,
            "pending": pending,
            "confirmed": self.records.len() - pending,
            "oldest_pending_age_seconds": oldest.map(|t| now_unix_us().saturating_sub(t) as f64 / 1e6),
            "segments": {
                "open": self.open_segments,
                "sealed": self.sealed_segments,
                "bytes": self.segment_bytes,
                "quarantined": self.quarantined_files,
            },
        })
    }

    fn state(&self, r: &StoredRecord) -> &'static str {
        if r.seq >= self.checkpoint {
            "pending"
        } else {
            "confirmed"
        }
    }
}

/// The shard folders of `data_dir`, or why it is not a data folder.
fn shard_dirs(data_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(data_dir).map_err(|e| {
        format!(
            "reading {}: {e} (give the daemon's server.data_dir)",
            data_dir.display()
        )
    })?;
    let mut shards: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(spillway_wab::layout::shard_number)
                .is_some()
        })
        .collect();
    if shards.is_empty() {
        return Err(format!(
            "{} is not a spillway data folder: it has no shard-NNN folders (give the daemon's server.data_dir, e.g. spillway-data/wab)",
            data_dir.display()
        ));
    }
    shards.sort();
    Ok(shards)
}

/// Runs `spillway inspect`; the text (or JSON document) to print.
pub fn run(data_dir: &Path, with_records: bool, as_json: bool) -> Result<String, String> {
    let shards: Vec<Shard> = shard_dirs(data_dir)?
        .into_iter()
        .map(Shard::read)
        .collect::<Result<_, _>>()?;
    if as_json {
        let list: Vec<Value> = shards
            .iter()
            .map(|s| {
                let mut v = s.summary();
                if with_records {
                    v["record_list"] = s
                        .records
                        .iter()
                        .map(|r| {
                            json!({
                                "seq": r.seq,
                                "tier": crate::admin::tier_name(r.meta.tier),
                                "arrival_unix_us": r.meta.arrival_unix_us,
                                "state": s.state(r),
                                "payload": String::from_utf8_lossy(&r.payload),
                            })
                        })
                        .collect();
                }
                v
            })
            .collect();
        return Ok(
            json!({ "data_dir": data_dir.display().to_string(), "shards": list }).to_string()
                + "\n",
        );
    }
    let mut out = String::new();
    for s in &shards {
        let v = s.summary();
        let range = match (s.records.first(), s.records.last()) {
            (Some(a), Some(b)) => format!("seq {}..={}", a.seq, b.seq),
            _ => "no records".to_string(),
        };
        let _ = writeln!(
            out,
            "{}: {} records ({range}); {} pending, {} confirmed (checkpoint {})",
            s.dir.display(),
            s.records.len(),
            v["pending"],
            v["confirmed"],
            s.checkpoint
        );
        let _ = write!(
            out,
            "  segments: {} open, {} sealed, {} bytes",
            s.open_segments, s.sealed_segments, s.segment_bytes
        );
        if s.quarantined_files > 0 {
            let _ = write!(
                out,
                "; {} quarantined (see quarantine/*.reason)",
                s.quarantined_files
            );
        }
        if let Some(age) = v["oldest_pending_age_seconds"].as_f64() {
            let _ = write!(out, "; oldest pending record {age:.1} s old");
        }
        out.push('\n');
        if with_records {
            for r in &s.records {
                let _ = writeln!(
                    out,
                    "  {} {:<9} tier={} {}",
                    r.seq,
                    s.state(r),
                    r.meta.tier,
                    String::from_utf8_lossy(&r.payload)
                );
            }
        }
    }
    Ok(out)
}
