//! Sustained mode: with `--duration` of at least [`SUSTAINED_MIN`], each
//! ingest scenario run against the bench daemon is also watched second by
//! second. A thread reads the daemon's metrics (`ctl metrics --json` on its
//! admin socket) once a second: records written (the sum of
//! `spillway_records_written_total` over the shards) and the fsync latency
//! histogram (`spillway_fsync_seconds`, buckets summed over the shards).
//! From the differences between readings it makes a [`Timeline`]: records/s
//! and fsync p99 for every second, and the drift of fsync p99 from the
//! first 10% of the run to the last 10%. A real disk's fsync can grow
//! several-fold under minutes of load; a short run against a rested disk
//! does not show it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The shortest `--duration` that turns sustained mode on: ten one-second
/// readings, so the first and the last 10% are one second each.
pub const SUSTAINED_MIN: Duration = Duration::from_secs(10);
/// How often the daemon's metrics are read.
const EVERY: Duration = Duration::from_secs(1);
/// A last interval shorter than this (the run ended just after a reading)
/// is dropped: too few fsyncs for a p99.
const SHORTEST_INTERVAL: Duration = Duration::from_millis(500);

/// One reading of the daemon's counters.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    /// Since the sampler started.
    at: Duration,
    /// Records written, all shards.
    written: u64,
    /// fsync latency buckets, all shards: (upper bound in s, cumulative count).
    fsync: Vec<(f64, u64)>,
}

/// Records written and fsync buckets from a `metrics --json` answer.
fn parse_reading(metrics: &Value, at: Duration) -> Reading {
    let mut written = 0;
    let mut fsync: Vec<(f64, u64)> = Vec::new();
    for sample in metrics["samples"].as_array().into_iter().flatten() {
        let value = sample["value"].as_f64().unwrap_or(0.0) as u64;
        match sample["name"].as_str() {
            Some("spillway_records_written_total") => written += value,
            Some("spillway_fsync_seconds_bucket") => {
                let le = match sample["labels"]["le"].as_str() {
                    Some("+Inf") | None => f64::INFINITY,
                    Some(v) => v.parse().unwrap_or(f64::INFINITY),
                };
                match fsync.iter_mut().find(|(b, _)| *b == le) {
                    Some((_, count)) => *count += value,
                    None => fsync.push((le, value)),
                }
            }
            _ => {}
        }
    }
    fsync.sort_by(|a, b| a.0.total_cmp(&b.0));
    Reading { at, written, fsync }
}

/// The buckets of the observations between two cumulative readings.
pub(super) fn bucket_delta(before: &[(f64, u64)], after: &[(f64, u64)]) -> Vec<(f64, u64)> {
    after
        .iter()
        .map(|&(le, count)| {
            let was = before.iter().find(|b| b.0 == le).map_or(0, |b| b.1);
            (le, count.saturating_sub(was))
        })
        .collect()
}

/// The 99th percentile of cumulative buckets, in ms, interpolated linearly
/// inside its bucket (as Prometheus' `histogram_quantile` does); `None` if
/// the buckets hold no fsync. A p99 in the +Inf bucket reads as the highest
/// finite bound.
fn p99_ms(buckets: &[(f64, u64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = total as f64 * 0.99;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(le, count) in buckets {
        if count as f64 >= rank {
            if le.is_infinite() {
                return Some(lower * 1000.0);
            }
            let inside = (count - below).max(1) as f64;
            let at = lower + (le - lower) * (rank - below as f64) / inside;
            return Some(at * 1000.0);
        }
        (lower, below) = (le, count);
    }
    None
}

/// Per-second figures of one sustained run.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// End of each interval, seconds since the run started.
    pub seconds: Vec<f64>,
    /// Records the daemon wrote in the interval, per second.
    pub records_per_s: Vec<f64>,
    /// fsync p99 of the interval, ms (`None`: no fsync in it).
    pub fsync_p99_ms: Vec<Option<f64>>,
    /// fsyncs in the interval, per second.
    pub fsyncs_per_s: Vec<f64>,
    /// The readings behind it, for the windowed figures.
    readings: Vec<Reading>,
}

impl Timeline {
    fn from_readings(readings: Vec<Reading>) -> Timeline {
        let mut t = Timeline::default();
        for pair in readings.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let secs = (b.at - a.at).as_secs_f64().max(1e-9);
            let delta = bucket_delta(&a.fsync, &b.fsync);
            t.seconds.push(b.at.as_secs_f64());
            t.records_per_s
                .push(b.written.saturating_sub(a.written) as f64 / secs);
            t.fsync_p99_ms.push(p99_ms(&delta));
            t.fsyncs_per_s
                .push(delta.last().map_or(0, |d| d.1) as f64 / secs);
        }
        t.readings = readings;
        t
    }

    /// Intervals in the timeline.
    pub fn len(&self) -> usize {
        self.seconds.len()
    }

    /// Records/s and fsync p99 (ms) over intervals `from..to`, from the
    /// readings at their ends (so the p99 is of all the window's fsyncs,
    /// not an average of per-second p99s).
    fn window(&self, from: usize, to: usize) -> (f64, Option<f64>) {
        let (a, b) = (&self.readings[from], &self.readings[to]);
        let secs = (b.at - a.at).as_secs_f64().max(1e-9);
        let rate = b.written.saturating_sub(a.written) as f64 / secs;
        (rate, p99_ms(&bucket_delta(&a.fsync, &b.fsync)))
    }

    /// The drift: the first and the last 10% of the intervals (at least
    /// one each), their records/s and fsync p99; `None` when no whole
    /// second was read.
    pub fn drift(&self) -> Option<Drift> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let k = (n / 10).max(1);
        let (rate_first, p99_first) = self.window(0, k);
        let (rate_last, p99_last) = self.window(n - k, n);
        Some(Drift {
            seconds: self.seconds[n - 1],
            window_s: k as f64,
            rate_first,
            rate_last,
            fsync_p99_ms: p99_first.zip(p99_last),
        })
    }

    pub fn json(&self) -> Value {
        serde_json::json!({
            "seconds": self.seconds,
            "records_per_s": self.records_per_s,
            "fsync_p99_ms": self.fsync_p99_ms,
            "fsyncs_per_s": self.fsyncs_per_s,
        })
    }
}

/// Reads the daemon's metrics once a second on a thread until finished.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Vec<Reading>, String>>,
}

fn read(admin: &Path, start: Instant) -> Result<Reading, String> {
    let at = start.elapsed();
    let body = spillway_ctl::call(admin, "metrics --json")?;
    let metrics: Value =
        serde_json::from_str(&body).map_err(|e| format!("ctl metrics --json: {e}"))?;
    Ok(parse_reading(&metrics, at))
}

impl Sampler {
    /// Takes the first reading now (so an unreachable admin socket is an
    /// error before the load starts), then one a second.
    pub fn start(admin: &Path) -> Result<Sampler, String> {
        let admin: PathBuf = admin.to_path_buf();
        let start = Instant::now();
        let first = read(&admin, start)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut readings = vec![first];
            let mut next = start + EVERY;
            loop {
                while Instant::now() < next {
                    if flag.load(Ordering::Relaxed) {
                        readings.push(read(&admin, start)?);
                        return Ok(readings);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                readings.push(read(&admin, start)?);
                next += EVERY;
            }
        });
        Ok(Sampler { stop, handle })
    }

    /// Stops reading (one last reading first); the timeline.
    pub fn finish(self) -> Result<Timeline, String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut readings = self
            .handle
            .join()
            .map_err(|_| "the metrics sampler panicked".to_string())??;
        let short = |r: &[Reading]| {
            r.len() > 2 && r[r.len() - 1].at - r[r.len() - 2].at < SHORTEST_INTERVAL
        };
        if short(&readings) {
            readings.remove(readings.len() - 1);
        }
        Ok(Timeline::from_readings(readings))
    }
}

/// How a sustained run drifted: its first and last 10% of seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    /// Seconds read.
    pub seconds: f64,
    /// Seconds in each window (10%, at least one).
    pub window_s: f64,
    pub rate_first: f64,
    pub rate_last: f64,
    /// fsync p99 in ms of the first and last window; `None` when either
    /// saw no fsync (Buffered only).
    pub fsync_p99_ms: Option<(f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(counts: &[u64]) -> Vec<(f64, u64)> {
        let bounds = [0.0001, 0.0002, 0.0005, f64::INFINITY];
        bounds.iter().copied().zip(counts.iter().copied()).collect()
    }

    #[test]
    fn p99_interpolates_inside_its_bucket() {
        // 100 fsyncs: 90 under 100 µs, 10 in 100..200 µs: rank 99 is 9/10
        // of the way through the second bucket.
        let p = p99_ms(&buckets(&[90, 100, 100, 100])).unwrap();
        assert!((p - 0.19).abs() < 1e-9, "{p}");
        // In +Inf: the highest finite bound.
        assert_eq!(p99_ms(&buckets(&[0, 0, 0, 100])), Some(0.5));
        assert_eq!(p99_ms(&buckets(&[0, 0, 0, 0])), None);
    }

    #[test]
    fn a_reading_sums_the_shards() {
        let metrics = serde_json::json!({"samples": [
            {"name": "spillway_records_written_total", "labels": {"shard": "0"}, "value": 10.0},
            {"name": "spillway_records_written_total", "labels": {"shard": "1"}, "value": 5.0},
            {"name": "spillway_fsync_seconds_bucket", "labels": {"shard": "0", "le": "0.0001"}, "value": 3.0},
            {"name": "spillway_fsync_seconds_bucket", "labels": {"shard": "1", "le": "0.0001"}, "value": 4.0},
            {"name": "spillway_fsync_seconds_bucket", "labels": {"shard": "0", "le": "+Inf"}, "value": 5.0},
            {"name": "spillway_fsync_seconds_bucket", "labels": {"shard": "1", "le": "+Inf"}, "value": 4.0},
            {"name": "spillway_fsyncs_total", "labels": {"shard": "0"}, "value": 5.0},
        ]});
        let r = parse_reading(&metrics, Duration::ZERO);
        assert_eq!(r.written, 15);
        assert_eq!(r.fsync, vec![(0.0001, 7), (f64::INFINITY, 9)]);
    }

    #[test]
    fn drift_compares_the_first_and_last_tenth() {
        // 20 seconds: 1000 records and 100 fsyncs a second; fsyncs under
        // 100 µs for the first 18 s, 200..500 µs for the last 2.
        let mut readings = Vec::new();
        let (mut fast, mut slow) = (0, 0);
        for s in 0..=20u64 {
            readings.push(Reading {
                at: Duration::from_secs(s),
                written: s * 1000,
                fsync: buckets(&[fast, fast, fast + slow, fast + slow]),
            });
            if s < 18 {
                fast += 100;
            } else {
                slow += 100;
            }
        }
        let t = Timeline::from_readings(readings);
        assert_eq!(t.len(), 20);
        assert_eq!(t.records_per_s[0], 1000.0);
        assert_eq!(t.fsyncs_per_s[19], 100.0);
        let d = t.drift().unwrap();
        assert_eq!(d.window_s, 2.0);
        assert_eq!(d.rate_first, 1000.0);
        let (first, last) = d.fsync_p99_ms.unwrap();
        assert!(first < 0.1 && last > 0.2, "{first} {last}");
        assert!(last / first > 2.0);
    }
}
