//! A configured sink, built into the factory its drains use: at start
//! ([`crate::daemon`]), at every reload ([`crate::reload`]) and in
//! `spillway check`, the one place a `[sink]` table becomes sink
//! instances.
//!
//! Building a sink can block for as long as the outside world wants: a
//! plugin's constructors and `create`, a health check that waits on a
//! database, a TCP connect to a host that drops SYNs. So it never runs on
//! a thread that accepts connections, answers the admin socket or serves
//! HTTP: [`build_on_thread`] runs it on a `sink-build` thread of its own,
//! and the caller waits at most `sink.build_timeout_ms`. Past that the new
//! sink is refused; the thread is left to finish (there is no safe way to
//! stop a thread inside foreign code) and whatever it built is dropped
//! there. While one is still running past its deadline, a new build is
//! refused rather than piling up threads.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sink_sdk::delivery::{DeliveryConfig, SinkFactory};
use sink_sdk::Health;
use spillway_sinks::{SinkConfig, SinkEnv};

/// One sink built: what its drains run.
pub struct BuiltSink {
    pub name: String,
    pub factory: Arc<dyn SinkFactory>,
    /// Its delivery keys, as the drains run on them.
    pub settings: DeliveryConfig,
    /// Its type and target, for people (`ctl health`, log lines).
    pub description: String,
}

/// Build one sink into the factory its drains use. Blocks: call it only
/// through [`build_on_thread`] (or where blocking is harmless).
pub fn sink_factory(sink: &SinkConfig, env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, String> {
    spillway_sinks::build(sink, env).map_err(|e| e.to_string())
}

/// Creates shard 0's instance of `factory` and runs its health check:
/// `None` when it answers healthy, else why not (the instance could not be
/// made, or the check's answer). Blocks for as long as the endpoint takes.
pub fn probe(factory: &dyn SinkFactory) -> Option<String> {
    match factory.create(0) {
        Ok(mut sink) => match sink.health_check() {
            Health::Healthy => None,
            Health::Unhealthy(why) => Some(why),
        },
        Err(e) => Some(format!("creating its instance: {e}")),
    }
}

/// Probes each built sink in turn ([`probe`]): one line per sink that is
/// not healthy, naming it. Blocks: run it through [`build_on_thread`].
pub fn probe_all(built: &[(String, String, Arc<dyn SinkFactory>)]) -> Vec<String> {
    built
        .iter()
        .filter_map(|(name, description, factory)| {
            probe(factory.as_ref())
                .map(|why| format!("sink {name} ({description}) fails its health check: {why}"))
        })
        .collect()
}

/// Build every sink of `sinks` in turn: a sink type or plugin that cannot
/// be made, or a bad option, fails here; nothing here reaches the sink's
/// endpoint ([`probe`] does). Blocks (a plugin's constructor may): run it
/// through [`build_on_thread`] under [`build_timeout`] of the same sinks.
/// The first failure names its sink.
pub fn build_sinks(
    sinks: &[(String, SinkConfig)],
    env: &SinkEnv,
) -> Result<Vec<BuiltSink>, String> {
    let mut built = Vec::with_capacity(sinks.len());
    for (name, sink) in sinks {
        // (Its errors name its table: `sinks.NAME.KEY`, or `sink.KEY`.)
        let factory = sink_factory(sink, env)?;
        built.push(BuiltSink {
            name: name.clone(),
            description: factory.describe(),
            factory,
            settings: sink.delivery().clone(),
        });
    }
    Ok(built)
}

impl BuiltSink {
    /// What [`probe_all`] takes of it (sendable to the probing thread).
    pub fn probe_target(&self) -> (String, String, Arc<dyn SinkFactory>) {
        (
            self.name.clone(),
            self.description.clone(),
            self.factory.clone(),
        )
    }
}

/// The deadline for building `sinks` one after another: the sum of their
/// `build_timeout_ms`.
pub fn build_timeout(sinks: &[(String, SinkConfig)]) -> Duration {
    sinks
        .iter()
        .map(|(_, s)| Duration::from_millis(s.delivery().build_timeout_ms))
        .sum()
}

/// One kind of work on a thread of its own, one at a time: when the one
/// now running started, if one is.
struct Lane {
    /// The thread's name, and what the messages call the work.
    thread: &'static str,
    what: &'static str,
    running_since: Mutex<Option<Instant>>,
}

/// Building sinks (a plugin's constructor may hang).
static BUILDS: Lane = Lane {
    thread: "sink-build",
    what: "building the sink",
    running_since: Mutex::new(None),
};

/// New sinks' health checks at a reload (an endpoint may hang). A lane of
/// its own, so that a check hanging past its deadline never holds up the
/// next reload's build: an operator can always re-point a sink.
static PROBES: Lane = Lane {
    thread: "sink-probe",
    what: "the new sink's health check",
    running_since: Mutex::new(None),
};

/// Work running on its own thread; wait for it with [`Build::wait`] or
/// [`Build::wait_async`].
pub struct Build<T> {
    result: Receiver<T>,
    deadline: Duration,
    started: Instant,
    what: &'static str,
}

/// Starts `work` on a `sink-build` thread. Refused while an earlier build
/// still runs (one that outlived its deadline, or a reload racing
/// another): the error says since when.
pub fn build_on_thread<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Build<T>, String> {
    on_thread(&BUILDS, deadline, work).map_err(|since| {
        format!(
            "an earlier sink build has been running for {} ms (a plugin that hangs past \
             sink.build_timeout_ms, or another reload); try again once it returns",
            since.as_millis()
        )
    })
}

/// Starts `work` (new sinks' health checks) on a `sink-probe` thread.
/// Refused while an earlier one still runs (one that outlived its
/// deadline): the error says since when.
pub fn probe_on_thread<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Build<T>, String> {
    on_thread(&PROBES, deadline, work).map_err(|since| {
        format!(
            "not run: an earlier health check has been running for {} ms (an endpoint that \
             hangs past sink.build_timeout_ms)",
            since.as_millis()
        )
    })
}

/// Starts `work` on `lane`'s thread; `Err` is how long the lane's running
/// work has been running.
fn on_thread<T: Send + 'static>(
    lane: &'static Lane,
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Build<T>, Duration> {
    let started = Instant::now();
    {
        let mut running = lane.running_since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = *running {
            return Err(since.elapsed());
        }
        *running = Some(started);
    }
    let (send, result) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name(lane.thread.into())
        .spawn(move || {
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            // Cleared before the send, so a caller that got the result can
            // start the next one at once (and after a panic too).
            *lane.running_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let Ok(built) = built else {
                return; // the waiter sees the channel closed
            };
            if let Err(late) = send.send(built) {
                tracing::warn!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "{} finished after its deadline; its outcome is dropped",
                    lane.what
                );
                drop(late);
            }
        });
    if let Err(e) = spawned {
        *lane.running_since.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::error!(error = %e, "cannot start a thread for {}", lane.what);
        return Err(Duration::ZERO);
    }
    Ok(Build {
        result,
        deadline,
        started,
        what: lane.what,
    })
}

/// How often [`Build::wait_async`] looks for the result: a reload is an
/// operator's action, 20 ms more is nothing, and no thread is parked for it.
const POLL_EVERY: Duration = Duration::from_millis(20);

impl<T> Build<T> {
    /// Blocks the calling thread until the result or the deadline.
    pub fn wait(self) -> Result<T, String> {
        match self.result.recv_timeout(self.deadline) {
            Ok(built) => Ok(built),
            Err(RecvTimeoutError::Timeout) => Err(self.timed_out()),
            Err(RecvTimeoutError::Disconnected) => Err(self.died()),
        }
    }

    /// Waits on the caller's runtime, never blocking its thread.
    pub async fn wait_async(self) -> Result<T, String> {
        loop {
            match self.result.try_recv() {
                Ok(built) => return Ok(built),
                Err(TryRecvError::Disconnected) => return Err(self.died()),
                Err(TryRecvError::Empty) => {}
            }
            if self.started.elapsed() >= self.deadline {
                return Err(self.timed_out());
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    fn timed_out(&self) -> String {
        format!(
            "{} took longer than sink.build_timeout_ms = {} \
             (it is still running on its own thread and is dropped when it returns)",
            self.what,
            self.deadline.as_millis()
        )
    }

    fn died(&self) -> String {
        format!("the thread of {} panicked (see the log)", self.what)
    }
}
