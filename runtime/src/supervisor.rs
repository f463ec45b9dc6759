//! The root supervisor: starts the listener and every shard (flusher +
//! sealer threads), watches them, restarts a child that died, and runs the
//! shutdown sequence.
//!
//! actix's own `Supervisor` restarts an actor only when it stops itself;
//! after a panic the mailbox just closes. So the tree polls its children
//! (`Addr::connected`) and restarts what is gone, with exponential backoff
//! and a cap of [`RESTARTS_MAX`] within [`RESTART_WINDOW`]. A shard past the
//! cap stays stopped and visibly failed (its pushes get InternalError); the
//! listener past the cap stops the daemon, which cannot serve without it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use spillway_actors::{
    bind_socket, ConnectionContext, FlusherConfig, Listener, ShardFlusher, ShardHealth, ShardQueue, StopShard, WabBudget,
};
use spillway_wab::{shard_dir, FsStorage};

use crate::config::Config;

/// Restarts allowed per child within [`RESTART_WINDOW`].
pub const RESTARTS_MAX: usize = 5;
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// First restart delay; doubles per recent restart up to [`BACKOFF_MAX`].
const BACKOFF_BASE: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Restart bookkeeping of one child.
#[derive(Default)]
struct RestartPolicy {
    recent: Vec<Instant>,
    not_before: Option<Instant>,
    given_up: bool,
}

impl RestartPolicy {
    /// Whether to restart now; records the attempt.
    fn try_restart(&mut self, now: Instant) -> Option<bool> {
        if self.given_up {
            return None;
        }
        if let Some(t) = self.not_before {
            if now < t {
                return None;
            }
        }
        self.recent.retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if self.recent.len() >= RESTARTS_MAX {
            self.given_up = true;
            return Some(false);
        }
        self.recent.push(now);
        let backoff = BACKOFF_BASE * 2u32.pow(self.recent.len() as u32 - 1);
        self.not_before = Some(now + backoff.min(BACKOFF_MAX));
        Some(true)
    }

    /// The first time a death is noticed: wait one backoff before restarting.
    fn noticed(&mut self, now: Instant) {
        if self.not_before.is_none_or(|t| t < now) {
            let backoff = BACKOFF_BASE * 2u32.pow(self.recent.len().min(6) as u32);
            self.not_before = Some(now + backoff.min(BACKOFF_MAX));
        }
    }
}

struct ShardSlot {
    queue: Arc<ShardQueue>,
    addr: Option<Addr<ShardFlusher>>,
    policy: RestartPolicy,
    dead_since: Option<Instant>,
}

/// Everything the running daemon is made of.
pub struct Supervisor {
    cfg: Config,
    conn_ctx: Arc<ConnectionContext>,
    wab: Arc<WabBudget>,
    arbiters: Vec<ArbiterHandle>,
    listener: Option<Addr<Listener>>,
    listener_policy: RestartPolicy,
    listener_dead_since: Option<Instant>,
    shards: Vec<ShardSlot>,
    shutting_down: bool,
}

impl Supervisor {
    pub fn new(
        cfg: Config,
        conn_ctx: Arc<ConnectionContext>,
        wab: Arc<WabBudget>,
        arbiters: Vec<ArbiterHandle>,
        listener: Addr<Listener>,
        shards: Vec<(Arc<ShardQueue>, Addr<ShardFlusher>)>,
    ) -> Self {
        Supervisor {
            cfg,
            conn_ctx,
            wab,
            arbiters,
            listener: Some(listener),
            listener_policy: RestartPolicy::default(),
            listener_dead_since: None,
            shards: shards
                .into_iter()
                .map(|(queue, addr)| ShardSlot { queue, addr: Some(addr), policy: RestartPolicy::default(), dead_since: None })
                .collect(),
            shutting_down: false,
        }
    }

    fn flusher_config(cfg: &Config, shard: u32) -> FlusherConfig {
        FlusherConfig {
            shard,
            dir: shard_dir(&cfg.server.data_dir, shard),
            segment_bytes_max: cfg.wab.segment_bytes_max,
            buffered_flush_interval: cfg.buffered_flush_interval(),
            fsync_failures_max: cfg.wab.fsync_failures_max,
        }
    }

    /// Open one shard (recovery included) and start its actor.
    pub fn start_shard(
        cfg: &Config,
        queue: Arc<ShardQueue>,
        wab: Arc<WabBudget>,
    ) -> std::io::Result<(Addr<ShardFlusher>, spillway_wab::RecoveryReport)> {
        let fcfg = Self::flusher_config(cfg, queue.shard);
        let (flusher, report) = ShardFlusher::open(FsStorage, fcfg, queue, wab, 0)?;
        Ok((flusher.start(), report))
    }

    fn check_children(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        self.check_listener(now, ctx);
        for i in 0..self.shards.len() {
            self.check_shard(i, now);
        }
    }

    fn check_listener(&mut self, now: Instant, ctx: &mut Context<Self>) {
        if self.listener.as_ref().is_some_and(|a| a.connected()) {
            return;
        }
        if self.listener_dead_since.is_none() {
            tracing::error!("the listener died");
            self.listener_dead_since = Some(now);
            self.listener_policy.noticed(now);
        }
        match self.listener_policy.try_restart(now) {
            None => {}
            Some(false) => {
                tracing::error!(restarts = RESTARTS_MAX, "the listener keeps dying; stopping the daemon");
                self.shutdown(ctx);
            }
            Some(true) => match bind_socket(&self.cfg.server.socket_path) {
                Ok(std_listener) => {
                    let shards = self.shards.iter().map(|s| s.queue.clone()).collect();
                    let listener = Listener::new(
                        std_listener,
                        self.conn_ctx.clone(),
                        self.arbiters.clone(),
                        shards,
                        self.cfg.server.max_connections as usize,
                    );
                    self.listener = Some(listener.start());
                    self.listener_dead_since = None;
                    tracing::warn!("restarted the listener");
                }
                Err(e) => tracing::error!(error = %e, "restarting the listener failed"),
            },
        }
    }

    fn check_shard(&mut self, i: usize, now: Instant) {
        let slot = &mut self.shards[i];
        if slot.addr.as_ref().is_some_and(|a| a.connected()) {
            return;
        }
        let shard = slot.queue.shard;
        if slot.dead_since.is_none() {
            tracing::error!(shard, "shard flusher died; its pushes wait for the restart");
            slot.dead_since = Some(now);
            slot.queue.set_health(ShardHealth::Starting);
            slot.policy.noticed(now);
            // Drop the address so the old actor (and its threads) is gone
            // before recovery reads the directory again.
            slot.addr = None;
        }
        match slot.policy.try_restart(now) {
            None => {}
            Some(false) => {
                tracing::error!(shard, restarts = RESTARTS_MAX, "shard keeps failing; it stays stopped (pushes get InternalError)");
                slot.queue.set_health(ShardHealth::Failed);
                slot.queue.fail_queued(spillway_protocol::NackReason::InternalError);
            }
            Some(true) => {
                let held = slot.queue.stats.bytes_held.swap(0, Ordering::Relaxed);
                self.wab.release(held);
                match Self::start_shard(&self.cfg, slot.queue.clone(), self.wab.clone()) {
                    Ok((addr, report)) => {
                        slot.queue.stats.restarts.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(shard, records = report.record_count(), resealed = report.resealed.len(), "restarted shard");
                        slot.addr = Some(addr);
                        slot.dead_since = None;
                    }
                    Err(e) => tracing::error!(shard, error = %e, "restarting shard failed; will retry"),
                }
            }
        }
    }

    fn shutdown(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        tracing::info!("shutting down: no new connections; answering what is in flight");
        if let Some(l) = self.listener.take() {
            drop(l);
        }
        let _ = std::fs::remove_file(&self.cfg.server.socket_path);
        let stops: Vec<_> = self.shards.iter_mut().filter_map(|s| s.addr.take()).map(|a| a.send(StopShard)).collect();
        let fut = async move {
            for s in stops {
                let _ = s.await;
            }
            // Give connection arbiters a moment to write the last acks.
            actix_rt::time::sleep(Duration::from_millis(100)).await;
        };
        ctx.spawn(fut.into_actor(self).map(|_, _, _| {
            tracing::info!("stopped");
            System::current().stop();
        }));
    }
}

impl Actor for Supervisor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(CHECK_EVERY, |act, ctx| act.check_children(ctx));
    }
}

/// Sent by the signal handler (SIGTERM, SIGINT): stop gracefully.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

impl Handler<Shutdown> for Supervisor {
    type Result = ();
    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        self.shutdown(ctx);
    }
}

/// Counters for `ctl stats`: a snapshot of every shard.
#[derive(Message)]
#[rtype(result = "Vec<(u32, ShardHealth, u64, u64, u64)>")]
pub struct ShardSummary;

impl Handler<ShardSummary> for Supervisor {
    type Result = Vec<(u32, ShardHealth, u64, u64, u64)>;
    fn handle(&mut self, _: ShardSummary, _: &mut Context<Self>) -> Self::Result {
        self.shards
            .iter()
            .map(|s| {
                let st = &s.queue.stats;
                (
                    s.queue.shard,
                    s.queue.health(),
                    st.records.load(Ordering::Relaxed),
                    st.fsyncs.load(Ordering::Relaxed),
                    st.fsync_failures.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}
