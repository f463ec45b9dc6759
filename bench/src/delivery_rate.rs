//! `delivery_keeps_up`: does delivery keep pace with ingest? For the noop
//! sink and the file sink (`fsync = true`), each with the cursor
//! fdatasynced after every batch (`checkpoint_interval_ms = 0`) and every
//! 100 ms (the default), a fresh daemon takes PushBatches of 256 records at Sync from one
//! connection, serially (`/serial`: the `batch_durable_n256` load) and 16
//! deep (`/pipelined`: the peak one connection reaches); the rows compare
//! the records delivered during the window with those acked during it.

use std::time::Duration;

use spillway_protocol::Tier;

use crate::context::Ctx;
use crate::daemon::NOOP_SINK;
use crate::e2e::{delivered_records, file_sink, launcher, start, stop_daemon};
use crate::load::{self, LoadError, PAYLOAD};
use crate::report::ReportRow;

pub fn delivery_keeps_up(ctx: &Ctx) -> Result<Vec<ReportRow>, LoadError> {
    let launcher = launcher(ctx)?;
    let mut rows = Vec::new();
    for (sink, body) in [("noop", NOOP_SINK.to_string()), ("file", file_sink())] {
        for (label, interval) in [("every_batch", 0), ("interval_100ms", 100)] {
            for pipelined in [false, true] {
                let load = if pipelined { "pipelined" } else { "serial" };
                let name = format!("delivery_keeps_up/{sink}/{label}/{load}");
                let body = format!("{body}checkpoint_interval_ms = {interval}\n");
                let daemon = start(launcher, "delivery", body)?;
                let admin = daemon.admin_socket().to_path_buf();
                let delivered = || delivered_records(&admin).map_err(LoadError::Failed);
                let before = delivered()?;
                let sample = if pipelined {
                    load::pipelined_batch_of(
                        daemon.socket(),
                        Tier::Sync,
                        PAYLOAD,
                        256,
                        16,
                        ctx.plan,
                    )?
                } else {
                    load::serial_batch(daemon.socket(), Tier::Sync, 256, ctx.plan)?
                };
                let during = delivered()?.saturating_sub(before);
                // The warm-up's records count in neither figure: what was
                // delivered by the window's start was read before it.
                let mut o = sample.to_outcome(&name);
                let window = sample.elapsed.as_secs_f64().max(1e-9);
                o.set("delivered_per_s", during as f64 / window).set(
                    "delivery_ratio",
                    during as f64 / sample.records.max(1) as f64,
                );
                // Let the backlog go before the daemon stops (a clean stop).
                std::thread::sleep(Duration::from_millis(200));
                stop_daemon(daemon, "delivery")?;
                rows.push(o);
            }
        }
    }
    Ok(rows)
}
