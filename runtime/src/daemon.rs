//! `spillway run`: start the actor system on a validated config, print
//! where things are, and wait for a signal.
//!
//! Start-up order: bind the socket (fails fast if another daemon owns it),
//! recover every shard (before any push is accepted), start the flushers,
//! the connection arbiters (one per core), the listener, the supervisor,
//! then the signal handlers. SIGTERM / SIGINT stop gracefully.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use actix::prelude::*;
use spillway_actors::{bind_socket, ConnectionContext, ConnectionLimits, DaemonStats, Listener, ShardQueue, WabBudget};

use crate::config::Config;
use crate::supervisor::{Shutdown, Supervisor};

/// Run the daemon until it is told to stop. Errors are start-up failures.
pub fn run(cfg: Config, origin: &str) -> Result<(), String> {
    let system = actix_rt::System::new();
    let result = system.block_on(async move { start(cfg, origin) });
    result?;
    system.run().map_err(|e| format!("actor system failed: {e}"))
}

fn start(cfg: Config, origin: &str) -> Result<(), String> {
    let std_listener = bind_socket(&cfg.server.socket_path).map_err(|e| e.to_string())?;
    let shard_count = cfg.shard_count();
    let wab = WabBudget::new(cfg.wab.wab_bytes_max, 0);
    let mut shards = Vec::new();
    let mut recovered_records = 0;
    let mut recovered_segments = 0;
    for shard in 0..shard_count {
        let queue = ShardQueue::new(shard);
        let (addr, report) = Supervisor::start_shard(&cfg, queue.clone(), wab.clone())
            .map_err(|e| format!("recovering shard {shard} in {}: {e}", cfg.server.data_dir.display()))?;
        recovered_records += report.record_count();
        recovered_segments += report.segments.len();
        if !report.quarantined.is_empty() || !report.resealed.is_empty() {
            tracing::warn!(
                shard,
                resealed = report.resealed.len(),
                quarantined = report.quarantined.len(),
                "recovery repaired this shard (see the lines above)"
            );
        }
        shards.push((queue, addr));
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let arbiters: Vec<ArbiterHandle> = (0..cores).map(|_| Arbiter::new().handle()).collect();
    let conn_ctx = Arc::new(ConnectionContext {
        limits: ConnectionLimits {
            payload_bytes_max: cfg.server.payload_bytes_max as u32,
            read_timeout: cfg.read_timeout(),
            inflight_records_max: cfg.server.inflight_records_max as usize,
            inflight_bytes_max: cfg.server.inflight_bytes_max,
        },
        wab: wab.clone(),
        stats: Arc::new(DaemonStats::default()),
        live: Arc::new(AtomicUsize::new(0)),
    });
    let listener = Listener::new(
        std_listener,
        conn_ctx.clone(),
        arbiters.clone(),
        shards.iter().map(|(q, _)| q.clone()).collect(),
        cfg.server.max_connections as usize,
    )
    .start();
    tracing::info!(
        config = origin,
        socket = %cfg.server.socket_path.display(),
        data_dir = %cfg.server.data_dir.display(),
        shards = shard_count,
        recovered_records,
        recovered_segments,
        wab_bytes_used = wab.used.load(std::sync::atomic::Ordering::Relaxed),
        "spillway is listening"
    );
    println!(
        "spillway listening on {} (data in {}, {} shards, config: {}); recovered {} records in {} segments",
        cfg.server.socket_path.display(),
        cfg.server.data_dir.display(),
        shard_count,
        origin,
        recovered_records,
        recovered_segments
    );
    let supervisor = Supervisor::new(cfg, conn_ctx, wab, arbiters, listener, shards).start();
    spawn_signal_handlers(supervisor);
    Ok(())
}

fn spawn_signal_handlers(supervisor: Addr<Supervisor>) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let supervisor = supervisor.clone();
        actix_rt::spawn(async move {
            let Ok(mut s) = signal(kind) else {
                tracing::error!("could not install a signal handler");
                return;
            };
            if s.recv().await.is_some() {
                supervisor.do_send(Shutdown);
            }
        });
    }
}
