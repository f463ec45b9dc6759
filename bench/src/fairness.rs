//! `big_record_fairness`: does a producer of small records keep its
//! latency while 16 connections push 64 KiB records at Sync? Against the
//! bench daemon: a serial producer of 5-byte Sync records is timed alone,
//! then again while 16 connections each push 64 KiB Sync records one at a
//! time; the row compares its p99 with and without them (same run) and
//! says how many MiB/s the big records moved meanwhile.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_protocol::Tier;

use crate::context::Ctx;
use crate::load::{self, LoadError};
use crate::report::ReportRow;

const BIG_CONNECTIONS: usize = 16;
const BIG_BYTES: usize = 64 * 1024;

pub fn big_record_fairness(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let alone = load::serial_push(ctx.socket, Tier::Sync, ctx.plan)?;
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicU64::new(0));
    let big: Vec<_> = (0..BIG_CONNECTIONS)
        .map(|_| {
            let (socket, stop, moved) = (ctx.socket.to_path_buf(), stop.clone(), moved.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut c = load::connect(&socket)?;
                let payload = vec![b'x'; BIG_BYTES];
                while !stop.load(Ordering::Relaxed) {
                    match c.push(Tier::Sync, &payload) {
                        Ok(_) => {
                            moved.fetch_add(BIG_BYTES as u64, Ordering::Relaxed);
                        }
                        Err(e) if e.is_retryable() => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(())
            })
        })
        .collect();
    // Let the big pushes reach their pace before timing.
    std::thread::sleep(Duration::from_millis(300));
    let start = (Instant::now(), moved.load(Ordering::Relaxed));
    let beside = load::serial_push(ctx.socket, Tier::Sync, ctx.plan);
    let big_mib_per_s = (moved.load(Ordering::Relaxed) - start.1) as f64
        / (1024.0 * 1024.0)
        / start.0.elapsed().as_secs_f64().max(1e-9);
    stop.store(true, Ordering::Relaxed);
    for t in big {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(LoadError::Failed(format!("a 64 KiB producer: {e}"))),
            Err(_) => return Err(LoadError::Failed("a 64 KiB producer panicked".into())),
        }
    }
    let beside = beside?;
    let q = |s: &load::Sample, p: f64| s.latency.value_at_quantile(p) as f64 / 1000.0;
    let mut o = beside.to_outcome("big_record_fairness");
    o.set("alone_p50_us", q(&alone, 0.5))
        .set("alone_p99_us", q(&alone, 0.99))
        .set("p99_ratio", q(&beside, 0.99) / q(&alone, 0.99).max(1e-9))
        .set("big_mib_per_s", big_mib_per_s);
    Ok(vec![o])
}
