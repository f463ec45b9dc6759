//! The sink side of a drain: the daemon's current sink ([`SinkSlot`],
//! shared by every drain and replaced by a reload) and one shard's running
//! instance of it ([`SinkHost`]: created on demand, its panics caught, re-created
//! with backoff, switched at a batch boundary after a reload).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use sink_sdk::delivery::{DeliveryConfig, SinkFactory};
use sink_sdk::{Batch, Health, Limits, Outcome, Sink};

use super::DrainStats;
use crate::backoff::{Backoff, NotBefore};
use crate::clock::Clock;
use crate::panics;

/// The current sink of the daemon, shared by every drain. A reload stores
/// a new maker and bumps `epoch`; each drain switches at its next batch
/// boundary.
pub struct SinkSlot {
    inner: Mutex<(Arc<dyn SinkFactory>, DeliveryConfig, String)>,
    epoch: AtomicU64,
}

impl SinkSlot {
    /// The sink `factory` makes, delivered as `settings` say; its
    /// description is taken once, here.
    pub fn new(factory: Arc<dyn SinkFactory>, settings: DeliveryConfig) -> Arc<Self> {
        let description = factory.describe();
        Arc::new(SinkSlot {
            inner: Mutex::new((factory, settings, description)),
            epoch: AtomicU64::new(1),
        })
    }

    /// Install a new sink; drains pick it up between batches.
    pub fn replace(&self, factory: Arc<dyn SinkFactory>, settings: DeliveryConfig) {
        let description = factory.describe();
        *self.inner.lock().unwrap() = (factory, settings, description);
        self.epoch.fetch_add(1, Ordering::Release);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The configured sink's description (the `sink` field of log lines).
    pub fn description(&self) -> String {
        self.inner.lock().unwrap().2.clone()
    }

    pub fn current(&self) -> (Arc<dyn SinkFactory>, DeliveryConfig, String) {
        self.inner.lock().unwrap().clone()
    }
}

/// Runs the sink for one shard: creates the instance, catches its panics,
/// recreates it with backoff, and switches to a reloaded sink between batches.
pub struct SinkHost {
    shard: u32,
    /// The sink's name (`[sinks.NAME]`), the `sink` field of log lines.
    name: String,
    slot: Arc<SinkSlot>,
    epoch: u64,
    factory: Arc<dyn SinkFactory>,
    settings: DeliveryConfig,
    /// What the sink is (`[sink]`'s type and target), for log lines.
    description: String,
    instance: Option<Box<dyn Sink>>,
    /// Failures (panics, creation errors) in a row; drives the backoff.
    failures: u32,
    not_before: NotBefore,
    /// The last call to `deliver` ended in a panic of the sink (not of
    /// its creation): its message.
    panicked: Option<String>,
    stats: Arc<DrainStats>,
    clock: Clock,
}

/// The wait before re-creating a failed sink instance: 100 ms, doubled
/// with every failure in a row, up to 30 s.
const SINK_RESTART_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(100), Duration::from_secs(30));

impl SinkHost {
    pub fn new(shard: u32, slot: Arc<SinkSlot>, stats: Arc<DrainStats>) -> Self {
        let epoch = slot.epoch();
        let (factory, settings, description) = slot.current();
        SinkHost {
            shard,
            name: "default".into(),
            slot,
            epoch,
            factory,
            settings,
            description,
            instance: None,
            failures: 0,
            not_before: NotBefore::default(),
            panicked: None,
            stats,
            clock: Clock::system(),
        }
    }

    /// The sink's name, for log lines (`default` unless told).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Read `clock` for the restart backoff (the simulation's manual clock).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// How long until a failed instance may be re-created (`None` when
    /// there is an instance or no backoff is running). The drain waits
    /// this out before its next batch, looking at its stop flag meanwhile.
    pub fn restart_wait(&self) -> Option<Duration> {
        if self.instance.is_some() {
            return None;
        }
        self.not_before.wait(self.clock.now())
    }

    /// The slot this host takes its sink from.
    pub fn slot(&self) -> Arc<SinkSlot> {
        self.slot.clone()
    }

    pub fn settings(&self) -> &DeliveryConfig {
        &self.settings
    }

    /// The sink's description, the `sink` field of the drain's log lines.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Switch to a reloaded sink if there is one (call between batches);
    /// true if it switched.
    pub fn check_reload(&mut self) -> bool {
        let epoch = self.slot.epoch();
        if epoch == self.epoch {
            return false;
        }
        let (factory, settings, description) = self.slot.current();
        tracing::info!(shard = self.shard, sink = %self.name, target = %description, "switching to the reloaded sink at a batch boundary");
        self.epoch = epoch;
        self.factory = factory;
        self.settings = settings;
        self.description = description;
        self.instance = None;
        self.failures = 0;
        self.not_before.clear();
        true
    }

    /// The effective (max_records, max_bytes) for the next batch.
    pub fn batch_limits(&mut self) -> (usize, usize) {
        let Limits {
            max_records: r,
            max_bytes: b,
        } = self.settings.limits();
        match self.instance.as_ref() {
            Some(i) => {
                let l = i.limits();
                (r.min(l.max_records.max(1)), b.min(l.max_bytes.max(1)))
            }
            None => (r, b),
        }
    }

    fn ensure_instance(&mut self) -> Result<(), String> {
        if self.instance.is_some() {
            return Ok(());
        }
        // The drain waits this out first (`restart_wait`); a direct caller
        // sleeps here.
        if let Some(left) = self.restart_wait() {
            thread::sleep(left);
        }
        let factory = self.factory.clone();
        let shard = self.shard;
        match panics::catch(|| factory.create(shard)) {
            Ok(Ok(mut inst)) => {
                let why = match panics::catch(|| inst.health_check()) {
                    Ok(Health::Healthy) => None,
                    Ok(Health::Unhealthy(why)) => Some(why),
                    Err(p) => Some(format!("its health check panicked: {p}")),
                };
                if let Some(why) = why {
                    tracing::warn!(shard, sink = %self.name, target = inst.name(), reason = %why, "sink reports unhealthy; delivering anyway (failures will be retried)");
                }
                self.instance = Some(inst);
                self.stats.sink.lock().unwrap().recreated();
                Ok(())
            }
            Ok(Err(e)) => Err(self.failed(format!("creating the sink failed: {e}"))),
            Err(p) => Err(self.failed(format!("creating the sink panicked: {p}"))),
        }
    }

    fn failed(&mut self, reason: String) -> String {
        self.failures += 1;
        self.stats.sink_restarts.fetch_add(1, Ordering::Relaxed);
        let backoff = SINK_RESTART_BACKOFF.delay(self.failures - 1);
        self.not_before.set(self.clock.now(), backoff);
        self.stats
            .sink
            .lock()
            .unwrap()
            .failing(super::SinkState::Failed, &reason);
        tracing::error!(shard = self.shard, sink = %self.name, target = %self.description, reason = %reason, restart_in_ms = backoff.as_millis() as u64, "sink instance failed; it will be re-created");
        reason
    }

    /// Whether the sink answers its health check now (a cheap probe while
    /// backing off: an HTTP sink only opens a TCP connection). False when
    /// there is no instance or the check panics.
    pub fn probe(&mut self) -> bool {
        let Some(inst) = self.instance.as_mut() else {
            return false;
        };
        match panics::catch(|| inst.health_check()) {
            Ok(h) => h == Health::Healthy,
            Err(p) => {
                tracing::debug!(shard = self.shard, sink = %self.name, reason = %p, "the sink's health check panicked");
                false
            }
        }
    }

    /// The panic message, when the last [`Self::deliver`] ended in a
    /// panic of the sink on the batch (a failure to create the instance is
    /// not one): what tells a poison record apart.
    pub fn panicked(&self) -> Option<&str> {
        self.panicked.as_deref()
    }

    /// Whether the sink's health check answers healthy now, on an instance
    /// made for it if there is none (after the restart backoff): asked to
    /// tell a poison record from a sink that is down, when nothing else
    /// can. False when the instance cannot be made or the check panics.
    pub fn healthy_now(&mut self) -> bool {
        self.ensure_instance().is_ok() && self.probe()
    }

    /// Deliver one batch; a panic becomes a Retry and a restart of the instance.
    pub fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        self.panicked = None;
        if let Err(reason) = self.ensure_instance() {
            return Outcome::Retry {
                after: None,
                reason,
            };
        }
        let inst = self.instance.as_mut().unwrap();
        match panics::catch(|| inst.deliver(batch)) {
            Ok(outcome) => {
                self.failures = 0;
                outcome
            }
            Err(p) => {
                let name = inst.name().to_string();
                self.instance = None;
                self.panicked = Some(p.clone());
                // A panic on a batch restarts with the first step of the
                // backoff: the drain's retry backoff paces the batches that
                // follow (and a batch being halved to find a poison record
                // would otherwise wait longer at every step).
                self.failures = 0;
                let reason = self.failed(format!("sink {name} panicked: {p}"));
                Outcome::Retry {
                    after: None,
                    reason,
                }
            }
        }
    }
}
