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

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;

use spillway_actors::{
    bind_socket, Backoff, ConnectionContext, CursorControl, DeliveryBoard, Drain, DrainStats,
    FlusherConfig, Listener, NotBefore, Retention, RetireDrain, ShardFlusher, ShardHealth,
    ShardQueue, SinkFigures, SinkSlot, StopDrain, StopListening, StopShard,
};
use spillway_wab::{open_shard_seen, shard_dir, FsStorage, SealedCheck};

use crate::config::Config;
use crate::sinks::BuiltSink;
use crate::sinks::{
    open_dead_letters, open_requeue, seen_in_stores, start_drain, DeadLetterStores, RequeueStores,
    SinkRun,
};

/// Restarts allowed per child within [`RESTART_WINDOW`].
pub const RESTARTS_MAX: usize = 5;
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The wait before a restart: 100 ms, doubled per recent restart, up to
/// 5 s.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// At shutdown, after the drains stopped: time for the connection arbiters
/// to write the last acks before the system stops.
const LAST_ACKS_GRACE: Duration = Duration::from_millis(100);

/// Restart bookkeeping of one child.
#[derive(Default)]
pub(crate) struct RestartPolicy {
    recent: Vec<Instant>,
    not_before: NotBefore,
    given_up: bool,
}

impl RestartPolicy {
    /// Whether to restart now; records the attempt.
    fn try_restart(&mut self, now: Instant) -> Option<bool> {
        if self.given_up {
            return None;
        }
        if self.not_before.wait(now).is_some() {
            return None;
        }
        self.recent
            .retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if self.recent.len() >= RESTARTS_MAX {
            self.given_up = true;
            return Some(false);
        }
        self.recent.push(now);
        self.not_before
            .set(now, BACKOFF.delay(self.recent.len() as u32 - 1));
        Some(true)
    }

    /// The first time a death is noticed: wait one backoff before restarting.
    fn noticed(&mut self, now: Instant) {
        if self.not_before.at().is_none_or(|t| t < now) {
            self.not_before
                .set(now, BACKOFF.delay(self.recent.len() as u32));
        }
    }
}

/// One shard's children: its flusher (with sealer), its retention and
/// one drain per sink.
pub struct ShardSlot {
    pub queue: Arc<ShardQueue>,
    pub addr: Option<Addr<ShardFlusher>>,
    policy: RestartPolicy,
    dead_since: Option<Instant>,
    pub retention: Arc<Mutex<Retention<FsStorage>>>,
    /// By sink name.
    pub drains: BTreeMap<String, DrainSlot>,
}

/// One sink's drain of one shard, watched like every child.
pub struct DrainSlot {
    pub addr: Option<Addr<Drain>>,
    pub stats: Arc<DrainStats>,
    /// The operator's controls of its cursor, kept across restarts.
    pub control: Arc<CursorControl>,
    policy: RestartPolicy,
    dead_since: Option<Instant>,
}

impl DrainSlot {
    pub fn new(addr: Addr<Drain>, stats: Arc<DrainStats>, control: Arc<CursorControl>) -> Self {
        DrainSlot {
            addr: Some(addr),
            stats,
            control,
            policy: RestartPolicy::default(),
            dead_since: None,
        }
    }
}

impl ShardSlot {
    pub fn new(
        queue: Arc<ShardQueue>,
        addr: Addr<ShardFlusher>,
        retention: Arc<Mutex<Retention<FsStorage>>>,
        drains: BTreeMap<String, DrainSlot>,
    ) -> Self {
        ShardSlot {
            queue,
            addr: Some(addr),
            policy: RestartPolicy::default(),
            dead_since: None,
            retention,
            drains,
        }
    }
}

/// Everything the running daemon is made of.
pub struct Supervisor {
    cfg: Config,
    conn_ctx: Arc<ConnectionContext>,
    arbiters: Vec<ArbiterHandle>,
    listener: Option<Addr<Listener>>,
    listener_policy: RestartPolicy,
    listener_dead_since: Option<Instant>,
    /// The network doors (`[server.tcp]`, `[server.http]`), as configured.
    network_doors: Vec<Recipient<StopListening>>,
    shards: Vec<ShardSlot>,
    /// The configured sinks, by name.
    sinks: BTreeMap<String, SinkRun>,
    dead_letters: DeadLetterStores,
    requeue: RequeueStores,
    board: Arc<DeliveryBoard>,
    shutting_down: bool,
}

/// What the daemon started and hands to the supervisor to watch.
pub struct Children {
    pub conn_ctx: Arc<ConnectionContext>,
    /// The connection arbiters (a restarted listener spreads over them too).
    pub arbiters: Vec<ArbiterHandle>,
    pub listener: Addr<Listener>,
    /// The network doors configured (`[server.tcp]`, `[server.http]`).
    pub network_doors: Vec<Recipient<StopListening>>,
    pub shards: Vec<ShardSlot>,
    pub sinks: BTreeMap<String, SinkRun>,
    pub dead_letters: DeadLetterStores,
    pub requeue: RequeueStores,
    pub board: Arc<DeliveryBoard>,
}

impl Supervisor {
    pub fn new(cfg: Config, children: Children) -> Self {
        let Children {
            conn_ctx,
            arbiters,
            listener,
            network_doors,
            shards,
            sinks,
            dead_letters,
            requeue,
            board,
        } = children;
        Supervisor {
            cfg,
            conn_ctx,
            arbiters,
            listener: Some(listener),
            listener_policy: RestartPolicy::default(),
            listener_dead_since: None,
            network_doors,
            shards,
            sinks,
            dead_letters,
            requeue,
            board,
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
            spin: Duration::from_micros(cfg.wab.flusher_spin_us),
            group_bytes_max: cfg.wab.group_bytes_max,
        }
    }

    /// Open one shard (recovery included) and start its actor; with what
    /// recovery found, and the shard's checkpoint (every record below it
    /// is delivered to every sink).
    /// Recover shard `queue.shard` and start its flusher. `seen`: one past
    /// the highest number of this shard the sinks' dead-letter and requeue
    /// stores hold ([`crate::sinks::seen_in_stores`]).
    pub fn start_shard(
        cfg: &Config,
        queue: Arc<ShardQueue>,
        seen: u64,
    ) -> std::io::Result<(Addr<ShardFlusher>, spillway_wab::RecoveryReport, u64)> {
        let fcfg = Self::flusher_config(cfg, queue.shard);
        // One place checks the checkpoint against the segments (gaps, a
        // checkpoint ahead of the data, an unreadable one moved aside) and
        // floors the next sequence number, so identities are never reused.
        // Sealed segments with intact footers are read by the shard's
        // checker after the start, before any drain opens them: a start
        // costs a constant per sealed segment, not a pass over the backlog.
        let opened = open_shard_seen(
            &FsStorage,
            &fcfg.dir,
            queue.shard,
            SealedCheck::Footer,
            seen,
        )?;
        let confirmed = opened.confirmed;
        let (flusher, report) =
            ShardFlusher::open_recovered(FsStorage, fcfg, queue, opened.recovered)?;
        Ok((flusher.start(), report, confirmed))
    }

    fn check_children(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        self.check_listener(now, ctx);
        for i in 0..self.shards.len() {
            self.check_shard(i, now);
            let names: Vec<String> = self.shards[i].drains.keys().cloned().collect();
            for name in names {
                self.check_drain(i, &name, now);
            }
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
                tracing::error!(
                    restarts = RESTARTS_MAX,
                    "the listener keeps dying; stopping the daemon"
                );
                self.shutdown(ctx);
            }
            Some(true) => match self.bind_producer_socket() {
                Ok(std_listener) => {
                    let shards = self.shards.iter().map(|s| s.queue.clone()).collect();
                    let listener = Listener::new(
                        std_listener,
                        self.conn_ctx.clone(),
                        self.arbiters.clone(),
                        shards,
                        self.cfg.server.connections_max as usize,
                    );
                    self.listener = Some(listener.start());
                    self.listener_dead_since = None;
                    tracing::warn!("restarted the listener");
                }
                Err(e) => tracing::error!(error = %e, "restarting the listener failed"),
            },
        }
    }

    /// The producer socket again, with its mode and group (the group is
    /// looked up again: it may have changed since the start).
    fn bind_producer_socket(&self) -> Result<std::os::unix::net::UnixListener, String> {
        let server = &self.cfg.server;
        let access = server.socket_access().map_err(|e| e.to_string())?;
        bind_socket(
            &server.socket_path,
            server.allow_insecure_socket_dir,
            access,
        )
        .map_err(|e| e.to_string())
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
                tracing::error!(
                    shard,
                    restarts = RESTARTS_MAX,
                    "shard keeps failing; it stays stopped (pushes get InternalError)"
                );
                slot.queue.set_health(ShardHealth::Failed);
                slot.queue
                    .fail_queued(spillway_protocol::NackReason::InternalError);
            }
            Some(true) => {
                // Recovery charges what it finds again.
                slot.queue.budget.release_all();
                let seen = seen_in_stores(&self.dead_letters, &self.requeue)
                    .map(|by_shard| by_shard.get(&shard).copied().unwrap_or(0));
                match seen.and_then(|seen| Self::start_shard(&self.cfg, slot.queue.clone(), seen)) {
                    Ok((addr, report, _)) => {
                        slot.queue.stats.restarts.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            shard,
                            records = report.record_count(),
                            resealed = report.resealed.len(),
                            "restarted shard"
                        );
                        slot.addr = Some(addr);
                        slot.dead_since = None;
                    }
                    Err(e) => {
                        tracing::error!(shard, error = %e, "restarting shard failed; will retry")
                    }
                }
            }
        }
    }

    fn check_drain(&mut self, i: usize, sink: &str, now: Instant) {
        let Some(run) = self.sinks.get(sink) else {
            return;
        };
        let data_dir = self.cfg.server.data_dir.clone();
        let shard_slot = &mut self.shards[i];
        let shard = shard_slot.queue.shard;
        let Some(slot) = shard_slot.drains.get_mut(sink) else {
            return;
        };
        if slot.addr.as_ref().is_some_and(|a| a.connected()) {
            return;
        }
        if slot.dead_since.is_none() {
            tracing::error!(
                shard,
                sink,
                "drain died; this sink's delivery of this shard pauses until it restarts"
            );
            slot.dead_since = Some(now);
            slot.policy.noticed(now);
            slot.addr = None;
        }
        match slot.policy.try_restart(now) {
            None => {}
            Some(false) => {
                tracing::error!(
                    shard,
                    sink,
                    restarts = RESTARTS_MAX,
                    "drain keeps failing; this sink's delivery of this shard stays stopped (records are kept)"
                );
            }
            Some(true) => {
                let started = start_drain(
                    &data_dir,
                    shard_slot.queue.clone(),
                    shard_slot.retention.clone(),
                    sink,
                    run,
                    slot.stats.clone(),
                    slot.control.clone(),
                );
                match started {
                    Ok(addr) => {
                        tracing::warn!(shard, sink, "restarted drain");
                        slot.addr = Some(addr);
                        slot.dead_since = None;
                    }
                    Err(e) => {
                        tracing::error!(shard, sink, error = %e, "restarting drain failed; will retry")
                    }
                }
            }
        }
    }

    /// Start sink `built` on every shard (a reload added it).
    fn add_sink(&mut self, built: BuiltSink) -> Result<(), String> {
        let name = built.name.clone();
        let data_dir = self.cfg.server.data_dir.clone();
        let dead_letters = open_dead_letters(&data_dir, &name)?;
        let requeue = open_requeue(&data_dir, &name)?;
        let run = SinkRun {
            start: built.settings.start(),
            slot: SinkSlot::new(built.factory, built.settings),
            dead_letters: dead_letters.clone(),
            requeue: requeue.clone(),
        };
        let (mut stats, mut controls) = (Vec::new(), Vec::new());
        for shard in &mut self.shards {
            let s = Arc::new(DrainStats::default());
            let control = Arc::new(CursorControl::default());
            let addr = start_drain(
                &data_dir,
                shard.queue.clone(),
                shard.retention.clone(),
                &name,
                &run,
                s.clone(),
                control.clone(),
            )
            .map_err(|e| {
                format!(
                    "sinks.{name}: starting its drain of shard {}: {e}",
                    shard.queue.shard
                )
            })?;
            shard.drains.insert(
                name.clone(),
                DrainSlot::new(addr, s.clone(), control.clone()),
            );
            stats.push(s);
            controls.push(control);
        }
        self.dead_letters
            .lock()
            .unwrap()
            .insert(name.clone(), dead_letters);
        self.board.insert(
            &name,
            SinkFigures {
                description: built.description,
                shards: stats,
                controls,
            },
        );
        self.requeue.lock().unwrap().insert(name.clone(), requeue);
        self.sinks.insert(name, run);
        Ok(())
    }

    /// Stop sink `name` on every shard; each cursor leaves its shard's
    /// retention once its thread finishes (see [`RetireDrain`]).
    fn remove_sink(&mut self, name: &str) {
        for shard in &mut self.shards {
            if let Some(slot) = shard.drains.remove(name) {
                if let Some(addr) = slot.addr {
                    addr.do_send(RetireDrain);
                }
            }
        }
        self.sinks.remove(name);
        self.requeue.lock().unwrap().remove(name);
        self.board.remove(name);
    }

    fn shutdown(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        crate::notify::stopping();
        tracing::info!("shutting down: no new connections; answering what is in flight");
        self.conn_ctx.stopping.store(true, Ordering::Release);
        if let Some(l) = self.listener.take() {
            l.do_send(StopListening);
        }
        for door in self.network_doors.drain(..) {
            door.do_send(StopListening);
        }
        let _ = std::fs::remove_file(&self.cfg.server.socket_path);
        let _ = std::fs::remove_file(&self.cfg.admin.socket_path);
        let stops: Vec<_> = self
            .shards
            .iter_mut()
            .filter_map(|s| s.addr.take())
            .map(|a| a.send(StopShard))
            .collect();
        let drains: Vec<_> = self
            .shards
            .iter_mut()
            .flat_map(|s| s.drains.values_mut().filter_map(|d| d.addr.take()))
            .collect();
        let queues: Vec<_> = self.shards.iter().map(|s| s.queue.clone()).collect();
        let timeout = Duration::from_millis(self.cfg.server.shutdown_timeout_ms);
        let fut = async move {
            for s in stops {
                let _ = s.await;
            }
            // The flushers are gone: frames that still arrive on open
            // connections are nacked (InternalError, retryable) at once
            // rather than queued for nobody.
            for q in &queues {
                q.set_health(ShardHealth::Failed);
            }
            let deadline = Instant::now() + timeout;
            for d in &drains {
                d.do_send(StopDrain {
                    deadline,
                    wait: false,
                });
            }
            let drain_stops: Vec<_> = drains
                .iter()
                .map(|d| {
                    d.send(StopDrain {
                        deadline,
                        wait: true,
                    })
                })
                .collect();
            for s in drain_stops {
                let _ = s.await;
            }
            // Give connection arbiters a moment to write the last acks.
            actix_rt::time::sleep(LAST_ACKS_GRACE).await;
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

/// Sent by a reload once the new sinks are built: switch the `changed`
/// ones (each drain at its next batch boundary), start the `added` ones on
/// every shard, stop the `removed` ones. Answers one line per sink.
#[derive(Message)]
#[rtype(result = "Result<String, String>")]
pub struct ApplySinks {
    pub changed: Vec<BuiltSink>,
    pub added: Vec<BuiltSink>,
    pub removed: Vec<String>,
}

impl Handler<ApplySinks> for Supervisor {
    type Result = Result<String, String>;
    fn handle(&mut self, msg: ApplySinks, _: &mut Context<Self>) -> Self::Result {
        if self.shutting_down {
            return Err("the daemon is shutting down".into());
        }
        let mut report = String::new();
        for name in &msg.removed {
            self.remove_sink(name);
            tracing::info!(sink = %name, "sink removed: its drains stop after their batch in flight, and it holds no records any more");
            report.push_str(&format!("sink {name} removed (its cursors and hold on segments go once its batches in flight finish; its dead letters stay)\n"));
        }
        for built in msg.changed {
            let Some(run) = self.sinks.get(&built.name) else {
                continue;
            };
            run.slot.replace(built.factory, built.settings);
            self.board.describe(&built.name, &built.description);
            report.push_str(&format!(
                "sink {} switched to {} (each shard switches at its next batch boundary)\n",
                built.name, built.description
            ));
        }
        for built in msg.added {
            let (name, description) = (built.name.clone(), built.description.clone());
            self.add_sink(built)?;
            tracing::info!(sink = %name, target = %description, "sink added");
            report.push_str(&format!("sink {name} added: {description}\n"));
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_back_off_and_stop_at_the_cap() {
        let mut p = RestartPolicy::default();
        let t0 = Instant::now();
        p.noticed(t0);
        // Not before the first backoff.
        assert_eq!(p.try_restart(t0), None);
        let mut now = t0 + BACKOFF.initial;
        let mut gaps = Vec::new();
        for _ in 0..RESTARTS_MAX {
            assert_eq!(p.try_restart(now), Some(true));
            let next = p.not_before.at().unwrap();
            gaps.push(next - now);
            // Too early for the next one.
            assert_eq!(p.try_restart(now), None);
            now = next;
        }
        assert!(
            gaps.windows(2).all(|w| w[1] >= w[0]),
            "backoff grows: {gaps:?}"
        );
        assert!(gaps.iter().all(|g| *g <= BACKOFF.max));
        // Past the cap within the window: give up, once and for good.
        assert_eq!(p.try_restart(now), Some(false));
        assert_eq!(p.try_restart(now + RESTART_WINDOW * 2), None);
    }

    #[test]
    fn old_restarts_leave_the_window() {
        let mut p = RestartPolicy::default();
        let t0 = Instant::now();
        for i in 0..RESTARTS_MAX as u32 {
            p.not_before.clear();
            assert_eq!(
                p.try_restart(t0 + Duration::from_millis(i as u64)),
                Some(true)
            );
        }
        p.not_before.clear();
        // A minute later the earlier restarts no longer count.
        assert_eq!(
            p.try_restart(t0 + RESTART_WINDOW + Duration::from_secs(1)),
            Some(true)
        );
    }
}
