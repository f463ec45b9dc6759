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

/// Builds the sink, creates shard 0's instance and runs its health check;
/// `Ok` is the factory, ready to swap in. Blocks.
pub fn sink_factory_checked(
    sink: &SinkConfig,
    env: &SinkEnv,
) -> Result<Arc<dyn SinkFactory>, String> {
    let factory = sink_factory(sink, env)?;
    let description = factory.describe();
    let mut probe = factory
        .create(0)
        .map_err(|e| format!("building the new sink: {e}"))?;
    let health = probe.health_check();
    drop(probe);
    match health {
        Health::Healthy => Ok(factory),
        Health::Unhealthy(why) => Err(format!(
            "the new sink {description} failed its health check: {why}"
        )),
    }
}

/// Build every sink of `sinks` in turn (health-checked when `checked`,
/// as a reload does). Blocks: run it through [`build_on_thread`] under
/// [`build_timeout`] of the same sinks. The first failure names its sink.
pub fn build_sinks(
    sinks: &[(String, SinkConfig)],
    checked: bool,
    env: &SinkEnv,
) -> Result<Vec<BuiltSink>, String> {
    let mut built = Vec::with_capacity(sinks.len());
    for (name, sink) in sinks {
        let made = if checked {
            sink_factory_checked(sink, env)
        } else {
            sink_factory(sink, env)
        };
        // (Its errors name its table: `sinks.NAME.KEY`, or `sink.KEY`.)
        let factory = made?;
        built.push(BuiltSink {
            name: name.clone(),
            description: factory.describe(),
            factory,
            settings: sink.delivery().clone(),
        });
    }
    Ok(built)
}

/// The deadline for building `sinks` one after another: the sum of their
/// `build_timeout_ms`.
pub fn build_timeout(sinks: &[(String, SinkConfig)]) -> Duration {
    sinks
        .iter()
        .map(|(_, s)| Duration::from_millis(s.delivery().build_timeout_ms))
        .sum()
}

/// When the build thread now running started, if one is.
static RUNNING_SINCE: Mutex<Option<Instant>> = Mutex::new(None);

/// A build running on its own thread; wait for it with [`Build::wait`] or
/// [`Build::wait_async`].
pub struct Build<T> {
    result: Receiver<T>,
    deadline: Duration,
    started: Instant,
}

/// Starts `work` on a `sink-build` thread. Refused while an earlier build
/// still runs (one that outlived its deadline, or a reload racing
/// another): the error says since when.
pub fn build_on_thread<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Build<T>, String> {
    let started = Instant::now();
    {
        let mut running = RUNNING_SINCE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = *running {
            return Err(format!(
                "an earlier sink build has been running for {} ms (a plugin or endpoint that \
                 hangs past sink.build_timeout_ms, or another reload); try again once it returns",
                since.elapsed().as_millis()
            ));
        }
        *running = Some(started);
    }
    let (send, result) = mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("sink-build".into())
        .spawn(move || {
            let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            // Cleared before the send, so a caller that got the result can
            // start the next build at once (and after a panic too).
            *RUNNING_SINCE.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let Ok(built) = built else {
                return; // the waiter sees the channel closed
            };
            if let Err(late) = send.send(built) {
                tracing::warn!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "a sink build finished after its deadline; what it built is dropped"
                );
                drop(late);
            }
        });
    if let Err(e) = spawned {
        *RUNNING_SINCE.lock().unwrap_or_else(|p| p.into_inner()) = None;
        return Err(format!("cannot start a thread to build the sink: {e}"));
    }
    Ok(Build {
        result,
        deadline,
        started,
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
            Err(RecvTimeoutError::Disconnected) => Err(Self::died()),
        }
    }

    /// Waits on the caller's runtime, never blocking its thread.
    pub async fn wait_async(self) -> Result<T, String> {
        loop {
            match self.result.try_recv() {
                Ok(built) => return Ok(built),
                Err(TryRecvError::Disconnected) => return Err(Self::died()),
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
            "building and health-checking the sink took longer than sink.build_timeout_ms = {} \
             (it is still running on its own thread and is dropped when it returns)",
            self.deadline.as_millis()
        )
    }

    fn died() -> String {
        "the thread building the sink panicked (see the log)".into()
    }
}
