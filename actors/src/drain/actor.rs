//! The supervised actor owning one drain thread: one sink's [`Cursor`]
//! over one shard, its steps run back to back.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use actix::prelude::*;
use spillway_wab::Storage;

use super::cursor::Cursor;
use super::DrainStats;
use crate::shard::Doorbell;

/// How often the actor checks that its thread is alive.
const LIVENESS_CHECK_EVERY: Duration = Duration::from_millis(200);
/// How often a stopping actor looks whether its thread has finished.
const JOIN_POLL: Duration = Duration::from_millis(5);
/// How long a dropped (not stopped) drain waits for its thread.
const DROP_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The supervised actor owning one drain thread (one sink, one shard).
pub struct Drain {
    shard: u32,
    /// The sink's name, for the actor's own log lines.
    sink: String,
    stop: Arc<AtomicBool>,
    /// Set with `stop` when the sink was removed (see [`RetireDrain`]).
    retire: Arc<AtomicBool>,
    /// The cursor's wake-up: rung with `stop`, so an idle cursor sees it
    /// at once.
    bell: Arc<Doorbell>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<DrainStats>,
}

/// Sent on shutdown: finish (or give up on) the batch in flight by
/// `deadline`, then stop. Nothing is lost either way: an unconfirmed batch is
/// delivered again after the restart. Every drain gets the same deadline, so
/// a daemon stops within one `shutdown_timeout_ms` however many shards it has.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopDrain {
    pub deadline: Instant,
    /// False: only raise the stop flag (so every drain starts finishing at
    /// once); true: also wait for the thread until `deadline` and stop the actor.
    pub wait: bool,
}

impl Drain {
    /// Start the thread that runs `cursor`.
    pub fn spawn<S: Storage>(cursor: Cursor<S>) -> io::Result<Drain> {
        let shard = cursor.shard;
        let sink = cursor.sink.clone();
        let stop = cursor.stop_flag();
        let retire = cursor.retire_flag();
        let bell = cursor.bell();
        let stats = cursor.stats.clone();
        let thread = thread::Builder::new()
            .name(format!("drain-{shard}-{sink}"))
            .spawn(move || cursor.run())?;
        Ok(Drain {
            shard,
            sink,
            stop,
            retire,
            bell,
            thread: Some(thread),
            stats,
        })
    }

    /// Ask the thread to stop after its current batch, without waiting.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.bell.ring();
    }

    fn stop_and_join(&mut self, deadline: Instant) {
        self.request_stop();
        let Some(t) = self.thread.take() else { return };
        let timeout = deadline.saturating_duration_since(Instant::now());
        while !t.is_finished() && Instant::now() < deadline {
            thread::sleep(JOIN_POLL);
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            tracing::warn!(shard = self.shard, sink = %self.sink, timeout_ms = timeout.as_millis() as u64, "sink batch still in flight at shutdown; abandoning it (it is delivered again after restart)");
        }
    }
}

impl Actor for Drain {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(LIVENESS_CHECK_EVERY, |act, ctx| {
            let dead = act.thread.as_ref().is_none_or(|t| t.is_finished());
            if dead && !act.stop.load(Ordering::Acquire) {
                tracing::error!(
                    shard = act.shard,
                    sink = %act.sink,
                    "drain thread died; stopping it for the supervisor"
                );
                ctx.stop();
            }
        });
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        self.stop_and_join(Instant::now() + DROP_STOP_TIMEOUT);
    }
}

/// Sent when the sink was removed from the config: the thread finishes
/// its batch in flight (or gives up on it at its deadline, as at a stop),
/// then its cursor leaves the shard's retention and its file goes. Nobody
/// waits for it: the thread is let go and the actor stops at once.
#[derive(Message)]
#[rtype(result = "()")]
pub struct RetireDrain;

impl Handler<RetireDrain> for Drain {
    type Result = ();
    fn handle(&mut self, _: RetireDrain, ctx: &mut Context<Self>) {
        self.retire.store(true, Ordering::Release);
        self.request_stop();
        // Detached: dropping the actor must not wait for the thread.
        self.thread.take();
        ctx.stop();
    }
}

impl Handler<StopDrain> for Drain {
    type Result = ();
    fn handle(&mut self, msg: StopDrain, ctx: &mut Context<Self>) {
        if !msg.wait {
            self.request_stop();
            return;
        }
        self.stop_and_join(msg.deadline);
        ctx.stop();
    }
}
