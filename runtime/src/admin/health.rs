//! Health that tells the truth: each shard's state and each sink's in it,
//! for `ctl health` (prose lines) and `GET /ready` (JSON).
//!
//! Ready means the daemon takes writes: every shard accepts a push at
//! every tier and makes it durable, the WAB is below `wab.wab_bytes_max`
//! (no push was refused at the cap since bytes were last released), and
//! descriptors have not run out anywhere in the last
//! [`FD_SHORTAGE_WINDOW_MS`]. A sink that is retrying
//! a failed batch, whose instance failed, or whose current call has been
//! outstanding longer than `admin.ready_stall_ms` (a hanging endpoint,
//! long before its request times out) makes the daemon *degraded*: still
//! ready, since producers need the buffer most during a downstream
//! outage, but said loudly (the verdict, `ctl health`'s exit status 3,
//! `spillway_sink_up`, the shipped alerts). `admin.ready_requires_sinks`
//! makes a failing sink "not ready" again.

use std::fmt::Write as _;

use serde_json::{json, Value};
use std::sync::Arc;

use spillway_actors::{DrainStats, ShardHealth, SinkHealth, SinkState};

use super::AdminState;

/// After a descriptor shortage (EMFILE, ENFILE), not ready for this long.
const FD_SHORTAGE_WINDOW_MS: u64 = 10_000;

/// One thing that keeps the daemon from being ready.
struct Failing {
    what: &'static str,
    /// The sink that fails, when it is one.
    sink: Option<String>,
    /// `None`: the whole process.
    shard: Option<u32>,
    state: String,
    since_unix_ms: u64,
    reason: String,
}

/// The daemon's verdict, from what fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every shard takes writes and every sink delivers.
    Ready,
    /// Every shard takes writes; a sink does not deliver.
    Degraded,
    /// A shard does not take writes (or descriptors ran out), or a sink
    /// fails under `admin.ready_requires_sinks`.
    NotReady,
}

impl Verdict {
    /// As the verdict line and the JSON's `status` say it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Degraded => "degraded",
            Verdict::NotReady => "not ready",
        }
    }
}

/// What fails, split by what it costs.
struct Findings {
    /// What keeps the daemon from taking writes (or, under
    /// `admin.ready_requires_sinks`, a failing sink).
    failing: Vec<Failing>,
    /// Sinks that do not deliver while the daemon takes writes.
    degraded: Vec<Failing>,
}

impl Findings {
    fn verdict(&self) -> Verdict {
        if !self.failing.is_empty() {
            Verdict::NotReady
        } else if !self.degraded.is_empty() {
            Verdict::Degraded
        } else {
            Verdict::Ready
        }
    }

    /// The last line of `ctl health`: `ready`, `degraded: ...` or
    /// `not ready: ...` (what degrades is named after what blocks).
    fn line(&self) -> String {
        let verdict = self.verdict();
        if verdict == Verdict::Ready {
            return "ready".to_string();
        }
        let mut causes: Vec<String> = self.failing.iter().map(Failing::line).collect();
        if verdict == Verdict::NotReady && !self.degraded.is_empty() {
            causes.push(format!(
                "degraded too: {}",
                self.degraded
                    .iter()
                    .map(Failing::line)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        } else {
            causes.extend(self.degraded.iter().map(Failing::line));
        }
        format!("{}: {}", verdict.name(), causes.join("; "))
    }

    fn json(&self) -> (Value, Value) {
        let list = |v: &[Failing]| Value::Array(v.iter().map(Failing::json).collect());
        (list(&self.failing), list(&self.degraded))
    }
}

impl Failing {
    fn json(&self) -> Value {
        let mut v = json!({
            "what": self.what,
            "state": self.state,
            "reason": self.reason,
        });
        if let Some(shard) = self.shard {
            v["shard"] = json!(shard);
        }
        if let Some(sink) = &self.sink {
            v["sink"] = json!(sink);
        }
        if self.since_unix_ms > 0 {
            v["since_unix_ms"] = json!(self.since_unix_ms);
            v["since"] = json!(rfc3339(self.since_unix_ms));
        }
        v
    }

    fn line(&self) -> String {
        let what = match &self.sink {
            Some(sink) => format!("{} {sink}", self.what),
            None => self.what.to_string(),
        };
        let mut s = match self.shard {
            Some(shard) => format!("{what} of shard {shard} {}", self.state),
            None => format!("{what} {}", self.state),
        };
        if self.since_unix_ms > 0 {
            let _ = write!(s, " since {}", rfc3339(self.since_unix_ms));
        }
        if !self.reason.is_empty() {
            let _ = write!(s, ": {}", self.reason);
        }
        s
    }
}

/// Every sink's health in shard `shard`, by sink name.
fn sink_health(state: &AdminState, shard: usize) -> Vec<(String, Arc<DrainStats>, SinkHealth)> {
    state
        .board
        .shard(shard)
        .into_iter()
        .map(|(name, d)| {
            let h = d.sink.lock().unwrap().clone();
            (name, d, h)
        })
        .collect()
}

/// What fails: what keeps the daemon from taking writes, and which sinks
/// do not deliver (failing too under `admin.ready_requires_sinks`).
fn findings(state: &AdminState) -> Findings {
    let mut out = Vec::new();
    let mut sinks = Vec::new();
    for (i, q) in state.shards.iter().enumerate() {
        let health = q.health();
        if health != ShardHealth::Running {
            let mut reason = q.unwritable_why();
            if let Some(nack) = q.refusal() {
                if !reason.is_empty() {
                    reason.push_str("; ");
                }
                let _ = write!(reason, "pushes get {}", nack.name());
            }
            out.push(Failing {
                what: "shard",
                sink: None,
                shard: Some(q.shard),
                state: format!("{health:?}").to_lowercase(),
                since_unix_ms: 0,
                reason,
            });
        }
        for (name, drain, sink) in sink_health(state, i) {
            // A paused sink is the operator's choice, not a failure.
            if sink.state == SinkState::Paused {
                continue;
            }
            if sink.state != SinkState::Running {
                sinks.push(Failing {
                    what: "sink",
                    sink: Some(name),
                    shard: Some(q.shard),
                    state: sink.state.name().to_string(),
                    since_unix_ms: sink.since_unix_ms,
                    reason: sink.reason,
                });
            } else if let Some(stalled) = stalled_call(state, q.shard, name, &drain) {
                sinks.push(stalled);
            }
        }
    }
    if let Some(shortage) = fd_shortage() {
        out.push(shortage);
    }
    if let Some(full) = wab_full(state) {
        out.push(full);
    }
    if state.ready_requires_sinks {
        out.append(&mut sinks);
    }
    Findings {
        failing: out,
        degraded: sinks,
    }
}

fn now_unix_ms() -> u64 {
    spillway_wab::format::now_unix_us() / 1000
}

/// Sink `sink`'s call in shard `shard`, if it has been outstanding past
/// `admin.ready_stall_ms`.
fn stalled_call(
    state: &AdminState,
    shard: u32,
    sink: String,
    drain: &DrainStats,
) -> Option<Failing> {
    let since = drain
        .sink_call_since_unix_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    let stall_ms = state.ready_stall.as_millis() as u64;
    let waited = now_unix_ms().saturating_sub(since);
    if since == 0 || waited <= stall_ms {
        return None;
    }
    Some(Failing {
        what: "sink",
        sink: Some(sink),
        shard: Some(shard),
        state: "stalled".to_string(),
        since_unix_ms: since,
        reason: format!(
            "a call into the sink has been outstanding for {:.1} s (admin.ready_stall_ms = {stall_ms})",
            waited as f64 / 1000.0
        ),
    })
}

/// The WAB is at `wab.wab_bytes_max`: a push was refused at the cap since
/// bytes were last released, so producers get `Overloaded` (every shard
/// runs, yet none takes writes).
fn wab_full(state: &AdminState) -> Option<Failing> {
    if !state.wab.refused() {
        return None;
    }
    Some(Failing {
        what: "wab",
        sink: None,
        shard: None,
        state: "full".to_string(),
        since_unix_ms: 0,
        reason: format!(
            "{} of wab.wab_bytes_max = {} bytes held: pushes get Overloaded until the sinks \
             confirm records and their segments are deleted",
            state.wab.used(),
            state.wab.max()
        ),
    })
}

/// The process ran out of file descriptors within the last
/// [`FD_SHORTAGE_WINDOW_MS`].
fn fd_shortage() -> Option<Failing> {
    let last = spillway_wab::descriptors::last_unix_ms();
    let ago = now_unix_ms().saturating_sub(last);
    if last == 0 || ago > FD_SHORTAGE_WINDOW_MS {
        return None;
    }
    Some(Failing {
        what: "daemon",
        sink: None,
        shard: None,
        state: "out of file descriptors".to_string(),
        since_unix_ms: 0,
        reason: format!(
            "{} operations failed with EMFILE/ENFILE so far, the last {:.1} s ago; raise the limit \
             (ulimit -n, LimitNOFILE=) or lower server.connections_max",
            spillway_wab::descriptors::total(),
            ago as f64 / 1000.0
        ),
    })
}

/// `ctl health`: one line per shard and per shard's sink, then the verdict.
pub(super) fn text(state: &AdminState) -> String {
    let mut out = String::new();
    for (i, q) in state.shards.iter().enumerate() {
        let _ = write!(out, "shard {} {:?}", q.shard, q.health());
        if let Some(reason) = q.refusal() {
            let why = q.unwritable_why();
            if why.is_empty() {
                let _ = write!(out, " (pushes get {})", reason.name());
            } else {
                let _ = write!(out, " ({why}; pushes get {}, retrying)", reason.name());
            }
        }
        out.push('\n');
        for (name, _, sink) in sink_health(state, i) {
            let _ = write!(out, "sink {name} of shard {} ", q.shard);
            let _ = match sink.state {
                SinkState::Running if sink.last_delivery_unix_ms > 0 => write!(
                    out,
                    "Running (last delivery {})",
                    rfc3339(sink.last_delivery_unix_ms)
                ),
                SinkState::Running => write!(out, "Running (nothing delivered yet)"),
                SinkState::Retrying => write!(
                    out,
                    "Retrying since {}: {}",
                    rfc3339(sink.since_unix_ms),
                    sink.reason
                ),
                SinkState::Failed => write!(
                    out,
                    "Failed since {}: {}",
                    rfc3339(sink.since_unix_ms),
                    sink.reason
                ),
                SinkState::Paused => write!(
                    out,
                    "Paused since {} (ctl sink resume {name})",
                    rfc3339(sink.since_unix_ms)
                ),
            };
            out.push('\n');
        }
    }
    let _ = writeln!(out, "{}", findings(state).line());
    out
}

/// `ctl health --json`: each shard and its sink, and the verdict.
pub(super) fn json(state: &AdminState) -> Value {
    let shards: Vec<Value> = state
        .shards
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let ms = |t: u64| {
                if t > 0 {
                    json!(rfc3339(t))
                } else {
                    Value::Null
                }
            };
            let sinks: serde_json::Map<String, Value> = sink_health(state, i)
                .into_iter()
                .map(|(name, _, sink)| {
                    let v = json!({
                        "state": sink.state.name(),
                        "since": ms(sink.since_unix_ms),
                        "reason": sink.reason,
                        "last_delivery": ms(sink.last_delivery_unix_ms),
                    });
                    (name, v)
                })
                .collect();
            json!({
                "shard": q.shard,
                "state": format!("{:?}", q.health()).to_lowercase(),
                "refusal": q.refusal().map(|r| r.name()),
                "why": q.unwritable_why(),
                "sinks": sinks,
            })
        })
        .collect();
    let findings = findings(state);
    let verdict = findings.verdict();
    let (failing, degraded) = findings.json();
    json!({
        "ready": verdict != Verdict::NotReady,
        "status": verdict.name(),
        "shards": shards,
        "failing": failing,
        "degraded": degraded,
    })
}

/// `GET /ready`: whether the daemon takes writes (a degraded daemon does),
/// and the JSON body that says what fails.
pub(super) fn ready(state: &AdminState) -> (bool, String) {
    let findings = findings(state);
    let verdict = findings.verdict();
    let (failing, degraded) = findings.json();
    let body = json!({
        "ready": verdict != Verdict::NotReady,
        "status": verdict.name(),
        "shards": state.shards.len(),
        "failing": failing,
        "degraded": degraded,
    });
    (verdict != Verdict::NotReady, body.to_string() + "\n")
}

/// `ms` since the epoch as an RFC 3339 UTC time, to the second.
pub(super) fn rfc3339(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_137_445_123), "2026-12-01T15:04:05Z");
    }
}
