//! `restart_backlog`: what a restart costs as the backlog grows. One
//! daemon, its sink an HTTP sink at a closed loopback port (every record
//! stays pending), takes 1 GiB of 4 KiB records (PushBatch of 256 at
//! Sync), is stopped with SIGTERM and started again on the same folder;
//! the bench times from the new process's spawn until a Sync push is
//! acknowledged (the median of 3 restarts), with the page cache warm and
//! then after dropping it
//! (`/proc/sys/vm/drop_caches`: root only; otherwise the cold row is
//! skipped with the reason). The same daemon then takes more, up to 10 GiB,
//! and is timed again. `--quick` uses 64 MiB and 640 MiB. Each row's
//! `ratio_to_1gib` compares it with the first backlog's time in the same
//! cache state (the target: 10 GiB within 2x of 1 GiB).

use std::time::{Duration, Instant};

use sink_sdk::units::{GIB, MIB};
use spillway_client::Client;
use spillway_protocol::Tier;

use crate::context::Ctx;
use crate::daemon::Overrides;
use crate::e2e::{http_sink, launcher, stop_daemon};
use crate::load::LoadError;
use crate::report::{Kind, ReportRow};

/// Records of this size: a log line or an event with some context.
const RECORD_BYTES: usize = 4 * 1024;
/// Records per PushBatch.
const BATCH: usize = 256;
/// Restarts timed per backlog and cache state; the row has their median.
const RESTARTS: usize = 3;
/// Nothing listens here (port 1 on loopback): delivery fails and retries,
/// every record stays pending.
const CLOSED_SINK_URL: &str = "http://127.0.0.1:1/restart-backlog";

pub fn restart_backlog(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let backlogs = if ctx.quick {
        [64 * MIB, 640 * MIB]
    } else {
        [GIB, 10 * GIB]
    };
    let overrides = Overrides {
        sink_toml: Some(http_sink(CLOSED_SINK_URL, "batched")),
        wab_bytes_max: Some(backlogs[1] + 2 * GIB),
        ..Overrides::default()
    };
    let mut daemon = launcher
        .start("restart-backlog", &overrides)
        .map_err(LoadError::Failed)?;
    let record = vec![b'r'; RECORD_BYTES];
    let mut pushed = 0u64;
    let mut rows = Vec::new();
    let mut first: [Option<f64>; 2] = [None, None];
    for backlog in backlogs {
        let filled = Instant::now();
        pushed += fill(daemon.socket(), &record, backlog - pushed)?;
        let fill_s = filled.elapsed().as_secs_f64();
        for (i, cold) in [false, true].into_iter().enumerate() {
            let name = format!(
                "restart_backlog/{}mib/{}",
                backlog / MIB,
                if cold { "cold" } else { "warm" }
            );
            let mut times = Vec::new();
            let mut skipped = None;
            for _ in 0..RESTARTS {
                let between = || if cold { drop_page_cache() } else { Ok(()) };
                match daemon.restart_timed(&record, between) {
                    Ok(d) => times.push(d.as_secs_f64()),
                    Err(why) if cold && why.starts_with(NO_DROP) => {
                        // The daemon is down: start it again, warm.
                        daemon
                            .restart_timed(&record, || Ok(()))
                            .map_err(LoadError::Failed)?;
                        skipped = Some(why);
                        break;
                    }
                    Err(why) => return Err(LoadError::Failed(why)),
                }
            }
            if let Some(why) = skipped {
                rows.push(ReportRow::skipped(&name, Kind::Scenario, why));
                continue;
            }
            times.sort_by(f64::total_cmp);
            let took = times[times.len() / 2];
            let base = *first[i].get_or_insert(took);
            let mut row = ReportRow::new(&name, Kind::Scenario);
            row.set("pending_mib", (pushed / MIB) as f64)
                .set("ready_ms", took * 1000.0)
                .set("ratio_to_1gib", took / base)
                .set("fill_s", fill_s)
                .set("ready_ms_min", times[0] * 1000.0)
                .set("ready_ms_max", times[times.len() - 1] * 1000.0)
                .note(format!(
                    "ready {:.0} ms after the spawn, {:.2}x the first backlog's",
                    took * 1000.0,
                    took / base
                ));
            rows.push(row);
        }
    }
    stop_daemon(daemon, "restart-backlog")?;
    Ok(rows)
}

/// Pushes `bytes` of records (whole batches, at least one) and returns
/// how many bytes that was.
fn fill(socket: &std::path::Path, record: &[u8], bytes: u64) -> Result<u64, LoadError> {
    let mut client = Client::connect(socket).map_err(|e| LoadError::Failed(e.to_string()))?;
    client
        .set_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| LoadError::Failed(e.to_string()))?;
    let batch = vec![record; BATCH];
    let per_batch = (BATCH * record.len()) as u64;
    let mut done = 0;
    while done < bytes {
        client
            .push_batch(Tier::Sync, &batch)
            .map_err(|e| LoadError::Failed(format!("filling the backlog: {e}")))?;
        done += per_batch;
    }
    Ok(done)
}

/// The start of the reason when the page cache cannot be dropped.
const NO_DROP: &str = "cannot drop the page cache";

/// Write dirty pages out and drop the page cache (root only).
fn drop_page_cache() -> Result<(), String> {
    // SAFETY: sync(2) takes no arguments and touches no memory of ours.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("{NO_DROP} (/proc/sys/vm/drop_caches: {e}; run as root)"))
}
