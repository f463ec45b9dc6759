//! `spillway ctl top`: a live view of a running daemon, refreshed every
//! interval from the admin socket (`stats --json`, `health --json`,
//! `metrics --json`): ingest and delivery rates, backlog (records and
//! bytes), the oldest
//! pending record, fsync p99 over the interval, and each sink's state. On a
//! terminal it redraws one screen; otherwise (a pipe, a file) it prints one
//! plain line per interval.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use spillway_ctl::Limits;

/// One reading of the daemon.
struct Reading {
    at: Instant,
    /// Per shard: (records written, records delivered, pending, oldest age s,
    /// pending bytes).
    shards: Vec<(u64, u64, u64, u64, u64)>,
    /// Per shard: fsync latency buckets (upper bound s, count in bucket).
    fsync: Vec<Vec<(f64, u64)>>,
    /// Per shard: sink state and reason.
    sinks: Vec<(String, String)>,
    /// Per sink, over its shards: (name, delivered, backlog records,
    /// backlog bytes, oldest age s, records skipped, up on every shard).
    per_sink: Vec<SinkTotals>,
    /// Takes writes (`health`'s `ready`).
    ready: bool,
    /// Ready, but a sink does not deliver (`health`'s `status`).
    degraded: bool,
}

/// One sink's totals over its shards, from `stats --json`, and its row
/// per shard.
#[derive(Debug, Clone, Default)]
struct SinkTotals {
    name: String,
    delivered: u64,
    backlog: u64,
    backlog_bytes: u64,
    oldest: u64,
    skipped: u64,
    up: bool,
    /// Batches out and the limit, summed over the shards.
    in_flight: (u64, u64),
    shards: Vec<SinkShard>,
}

/// One sink's figures of one shard, with its state from `health --json`.
#[derive(Debug, Clone, Default)]
struct SinkShard {
    shard: u64,
    delivered: u64,
    backlog: u64,
    backlog_bytes: u64,
    oldest: u64,
    in_flight: (u64, u64),
    state: String,
}

fn ask(socket: &Path, command: &str, limits: Limits) -> Result<Value, String> {
    let body = spillway_ctl::call_with(socket, &format!("{command} --json"), limits)?;
    serde_json::from_str(&body).map_err(|e| format!("{command}: {e}"))
}

/// Records of `shard` delivered to every sink: the lowest of the sinks'
/// counts (the rate a shard's records leave for all of them).
fn delivered_by_every_sink(stats: &Value, shard: u64) -> u64 {
    stats["sinks"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(_, sink)| {
            sink["shards"]
                .as_array()?
                .iter()
                .find(|s| s["shard"].as_u64() == Some(shard))?["delivered_records"]
                .as_u64()
        })
        .min()
        .unwrap_or(0)
}

fn read(socket: &Path, limits: Limits) -> Result<Reading, String> {
    let stats = ask(socket, "stats", limits)?;
    let health = ask(socket, "health", limits)?;
    let metrics = ask(socket, "metrics", limits)?;
    let numbers = shard_numbers(&stats);
    Ok(Reading {
        at: Instant::now(),
        fsync: fsync_buckets(&metrics, &numbers),
        per_sink: sink_totals(&stats, &health),
        shards: numbers
            .iter()
            .map(|&(_, w, d, p, a, b)| (w, d, p, a, b))
            .collect(),
        sinks: shard_sink_states(&health),
        ready: health["ready"].as_bool().unwrap_or(false),
        degraded: health["status"] == "degraded",
    })
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// Each shard's (shard, written, delivered by every sink, pending records,
/// oldest pending age, pending bytes).
fn shard_numbers(stats: &Value) -> Vec<(u64, u64, u64, u64, u64, u64)> {
    stats["shards"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        n(s, "shard"),
                        n(s, "records_written"),
                        delivered_by_every_sink(stats, n(s, "shard")),
                        n(s, "pending_records"),
                        n(s, "oldest_pending_age_seconds"),
                        n(s, "pending_bytes"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Each shard's cumulative fsync histogram buckets (upper bound, count),
/// in the order of `numbers`.
fn fsync_buckets(
    metrics: &Value,
    numbers: &[(u64, u64, u64, u64, u64, u64)],
) -> Vec<Vec<(f64, u64)>> {
    let mut fsync = vec![Vec::new(); numbers.len()];
    for sample in metrics["samples"].as_array().into_iter().flatten() {
        if sample["name"] != "spillway_fsync_seconds_bucket" {
            continue;
        }
        let shard = sample["labels"]["shard"]
            .as_str()
            .and_then(|s| s.parse::<usize>().ok());
        let le = match sample["labels"]["le"].as_str() {
            Some("+Inf") => f64::INFINITY,
            Some(v) => v.parse().unwrap_or(f64::INFINITY),
            None => continue,
        };
        if let Some(i) = shard.and_then(|s| numbers.iter().position(|x| x.0 as usize == s)) {
            fsync[i].push((le, sample["value"].as_f64().unwrap_or(0.0) as u64));
        }
    }
    fsync
}

/// Each shard's sinks that are not running, by name with their state, and
/// their reasons; `("running", "")` when every sink runs.
fn shard_sink_states(health: &Value) -> Vec<(String, String)> {
    health["shards"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    let failing: Vec<(String, String)> = s["sinks"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .filter(|(_, v)| v["state"] != "running")
                        .map(|(name, v)| {
                            (
                                format!("{name} {}", v["state"].as_str().unwrap_or("?")),
                                v["reason"].as_str().unwrap_or("").to_string(),
                            )
                        })
                        .collect();
                    if failing.is_empty() {
                        ("running".to_string(), String::new())
                    } else {
                        let (states, reasons): (Vec<String>, Vec<String>) =
                            failing.into_iter().unzip();
                        (states.join(", "), reasons.join("; "))
                    }
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A sink's state on a shard, with its reason when it has one
/// (`retrying: connection refused`): the row a cut reaches last.
fn sink_state(health: &Value, shard: u64, sink: &str) -> String {
    let health = health["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["shard"].as_u64() == Some(shard))
        .map(|s| &s["sinks"][sink]);
    let state = health.and_then(|h| h["state"].as_str()).unwrap_or("?");
    match health.and_then(|h| h["reason"].as_str()) {
        Some(reason) if !reason.is_empty() => format!("{state}: {reason}"),
        _ => state.to_string(),
    }
}

/// Every sink's totals and its figures on each shard.
fn sink_totals(stats: &Value, health: &Value) -> Vec<SinkTotals> {
    stats["sinks"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, t)| SinkTotals {
            name: name.clone(),
            delivered: n(t, "delivered_records"),
            backlog: n(t, "backlog_records"),
            backlog_bytes: n(t, "backlog_bytes"),
            oldest: n(t, "oldest_age_seconds"),
            skipped: n(t, "records_skipped"),
            up: n(t, "up") == 1,
            in_flight: (n(t, "batches_in_flight"), n(t, "batches_in_flight_limit")),
            shards: t["shards"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| SinkShard {
                    shard: n(s, "shard"),
                    delivered: n(s, "delivered_records"),
                    backlog: n(s, "backlog_records"),
                    backlog_bytes: n(s, "backlog_bytes"),
                    oldest: n(s, "oldest_age_seconds"),
                    in_flight: (n(s, "batches_in_flight"), n(s, "batches_in_flight_limit")),
                    state: sink_state(health, n(s, "shard"), name),
                })
                .collect(),
        })
        .collect()
}

/// The p99 of the fsyncs between two cumulative bucket readings, in ms:
/// interpolated linearly inside the bucket that holds it (as Prometheus'
/// `histogram_quantile` does), so it is not stuck on a bucket bound. In
/// the last bucket (`+Inf`) it is only known to be above the highest
/// finite bound: `at_least` then, never infinity.
fn p99_ms(before: &[(f64, u64)], after: &[(f64, u64)]) -> Option<P99> {
    let deltas: Vec<(f64, u64)> = after
        .iter()
        .map(|&(le, c)| {
            let was = before.iter().find(|b| b.0 == le).map_or(0, |b| b.1);
            (le, c.saturating_sub(was))
        })
        .collect();
    let total = deltas.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = total as f64 * 0.99;
    let (mut lower, mut below) = (0.0, 0u64);
    for &(le, count) in &deltas {
        if count as f64 >= rank {
            if !le.is_finite() {
                return Some(P99 {
                    ms: lower * 1000.0,
                    at_least: true,
                });
            }
            let inside = (count - below) as f64;
            let into = if inside > 0.0 {
                (rank - below as f64) / inside
            } else {
                1.0
            };
            return Some(P99 {
                ms: (lower + (le - lower) * into) * 1000.0,
                at_least: false,
            });
        }
        (lower, below) = (le, count);
    }
    None
}

/// An fsync p99 as [`p99_ms`] finds it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct P99 {
    ms: f64,
    /// Past the highest bucket bound: at least `ms`.
    at_least: bool,
}

impl std::fmt::Display for P99 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.at_least { ">" } else { "" };
        write!(f, "{sign}{:.2} ms", self.ms)
    }
}

/// What the terminal shows of one interval: the title with the time, then
/// the view, every line cut to `width`.
fn frame(clock: &str, screen: &str, width: usize) -> String {
    fit(&format!("spillway ctl top  {clock}\n\n{screen}"), width)
}

/// `frame` with its verdict and states in colour: red where a sink is down
/// or the daemon not ready, yellow where a sink retries or stalls (and a
/// degraded verdict), green
/// where all is well. Whole lines are painted, after they were cut to the
/// width, so the escape codes never count against it.
fn paint(frame: &str) -> String {
    const RED: &str = "\x1b[31m";
    const YELLOW: &str = "\x1b[33m";
    const GREEN: &str = "\x1b[32m";
    let mut out = String::with_capacity(frame.len() + 64);
    for line in frame.lines() {
        let state = line.rsplit("  ").next().unwrap_or("");
        let colour = if line.starts_with("NOT READY")
            || state.starts_with("DOWN")
            || state.starts_with("failed")
        {
            Some(RED)
        } else if line.starts_with("DEGRADED")
            || ["retrying", "stalled", "paused"]
                .iter()
                .any(|s| state.starts_with(s))
        {
            Some(YELLOW)
        } else if line.starts_with("ready  ") {
            Some(GREEN)
        } else {
            None
        };
        match colour {
            Some(c) => out.push_str(&format!("{c}{line}\x1b[0m\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Each line of `screen` cut to `width` characters (an ellipsis marks a
/// cut), so that no line wraps on the terminal.
fn fit(screen: &str, width: usize) -> String {
    let mut out = String::with_capacity(screen.len());
    for line in screen.lines() {
        out.push_str(&ellipsize(line, width));
        out.push('\n');
    }
    out
}

/// `text` cut to `width` characters, an ellipsis marking the cut.
pub(crate) fn ellipsize(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The terminal's width in columns, if stdout is one that says.
fn terminal_width() -> Option<usize> {
    // SAFETY: winsize is plain integers; all zeros is a valid value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ fills the winsize we own; a failure leaves it 0.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(size.ws_col as usize)
}

/// `812 B`, `1.5 KiB`, `37.2 MiB`, `4.0 GiB`.
pub(crate) fn bytes_text(n: u64) -> String {
    use sink_sdk::units::{GIB, KIB, MIB};
    match n {
        n if n >= GIB => format!("{:.1} GiB", n as f64 / GIB as f64),
        n if n >= MIB => format!("{:.1} MiB", n as f64 / MIB as f64),
        n if n >= KIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        n => format!("{n} B"),
    }
}

fn rate(now: u64, was: u64, secs: f64) -> f64 {
    now.saturating_sub(was) as f64 / secs
}

/// The view of one interval: a line per shard and a total.
fn render(prev: &Reading, now: &Reading) -> (String, String) {
    let secs = now.at.duration_since(prev.at).as_secs_f64().max(1e-3);
    let mut screen = format!(
        "{:<5} {:>9} {:>11} {:>9} {:>10} {:>8} {:>10}  sink\n",
        "shard", "ingest/s", "delivered/s", "backlog", "bytes", "oldest s", "fsync p99"
    );
    let (mut ingest, mut delivered, mut backlog, mut oldest) = (0.0, 0.0, 0, 0);
    let mut backlog_bytes = 0;
    let mut worst_p99: Option<P99> = None;
    for (i, cur) in now.shards.iter().enumerate() {
        let was = prev.shards.get(i).copied().unwrap_or(*cur);
        let (inr, der) = (rate(cur.0, was.0, secs), rate(cur.1, was.1, secs));
        let p99 = p99_ms(
            prev.fsync.get(i).map_or(&[][..], |v| v),
            now.fsync.get(i).map_or(&[][..], |v| v),
        );
        worst_p99 = match (worst_p99, p99) {
            (Some(a), Some(b)) if b.ms > a.ms || (b.at_least && b.ms >= a.ms) => Some(b),
            (a, b) => a.or(b),
        };
        let (state, reason) = now.sinks.get(i).cloned().unwrap_or_default();
        let sink = if reason.is_empty() {
            state
        } else {
            format!("{state}: {reason}")
        };
        screen.push_str(&format!(
            "{:<5} {:>9.0} {:>11.0} {:>9} {:>10} {:>8} {:>10}  {sink}\n",
            i,
            inr,
            der,
            cur.2,
            bytes_text(cur.4),
            cur.3,
            p99.map_or("-".into(), |p| p.to_string()),
        ));
        ingest += inr;
        delivered += der;
        backlog += cur.2;
        backlog_bytes += cur.4;
        oldest = oldest.max(cur.3);
    }
    // Narrow enough that at 80 columns the state still shows.
    screen.push_str(&format!(
        "\n{:<12} {:>11} {:>9} {:>10} {:>8} {:>9}  state\n",
        "sink", "delivered/s", "backlog", "bytes", "oldest s", "in flight"
    ));
    for t in &now.per_sink {
        let was = prev.per_sink.iter().find(|p| p.name == t.name);
        let mut state = if t.up { "up" } else { "DOWN or paused" }.to_string();
        if t.skipped > 0 {
            state.push_str(&format!(", {} skipped", t.skipped));
        }
        screen.push_str(&format!(
            "{:<12} {:>11.0} {:>9} {:>10} {:>8} {:>9}  {state}\n",
            t.name,
            rate(t.delivered, was.map_or(t.delivered, |p| p.delivered), secs),
            t.backlog,
            bytes_text(t.backlog_bytes),
            t.oldest,
            format!("{}/{}", t.in_flight.0, t.in_flight.1),
        ));
        // Its row per shard, under it: which shard holds it back.
        for sh in &t.shards {
            let was = was
                .and_then(|p| p.shards.iter().find(|x| x.shard == sh.shard))
                .map_or(sh.delivered, |x| x.delivered);
            screen.push_str(&format!(
                "{:<12} {:>11.0} {:>9} {:>10} {:>8} {:>9}  {}\n",
                format!("  shard {}", sh.shard),
                rate(sh.delivered, was, secs),
                sh.backlog,
                bytes_text(sh.backlog_bytes),
                sh.oldest,
                format!("{}/{}", sh.in_flight.0, sh.in_flight.1),
                sh.state
            ));
        }
    }
    let verdict = match (now.ready, now.degraded) {
        (false, _) => "NOT READY",
        (true, true) => "DEGRADED",
        (true, false) => "ready",
    };
    let p99 = worst_p99.map_or("-".into(), |p| p.to_string());
    let summary = format!(
        "ingest {ingest:.0}/s delivered {delivered:.0}/s backlog {backlog} ({}) oldest {oldest} s fsync p99 {p99}",
        bytes_text(backlog_bytes)
    );
    // On the screen the verdict leads, so no width cuts it off.
    screen.push_str(&format!("\n{verdict}  {summary}\n"));
    (screen, format!("{summary} {verdict}"))
}

/// Runs `ctl top` until interrupted, or for `count` intervals.
pub fn run(
    socket: &Path,
    interval: Duration,
    count: Option<u64>,
    limits: Limits,
) -> Result<(), String> {
    let terminal = std::io::stdout().is_terminal();
    let colour = crate::logging::wants_colour(terminal, std::env::var_os("NO_COLOR"));
    let mut prev = read(socket, limits)?;
    let mut shown = 0;
    loop {
        std::thread::sleep(interval);
        let now = read(socket, limits)?;
        let (screen, line) = render(&prev, &now);
        let mut out = std::io::stdout().lock();
        let clock = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        let written = if terminal {
            // Home, clear, redraw: one screen that updates in place, no
            // line longer than the terminal is wide now (a wrapped line
            // would push the screen off its top).
            let mut screen = frame(&clock.to_string(), &screen, terminal_width().unwrap_or(80));
            if colour {
                screen = paint(&screen);
            }
            write!(out, "\x1b[H\x1b[2J{screen}")
        } else {
            writeln!(out, "{clock} {line}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(()); // the reader went away (a closed pipe)
        }
        prev = now;
        shown += 1;
        if count.is_some_and(|c| shown >= c) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{bytes_text, fit, frame, p99_ms, render, Reading, SinkShard, SinkTotals, P99};
    use std::time::{Duration, Instant};

    /// One row per sink, its delivery rate over the interval, its backlog
    /// and whether it is up.
    #[test]
    fn each_sink_has_a_row_with_its_rate_and_backlog() {
        let at = Instant::now();
        let sink = |name: &str, delivered, backlog, up| SinkTotals {
            name: name.into(),
            delivered,
            backlog,
            backlog_bytes: backlog * 100,
            oldest: 3,
            skipped: 0,
            up,
            in_flight: (1, 4),
            shards: vec![SinkShard {
                shard: 0,
                delivered,
                backlog,
                backlog_bytes: backlog * 100,
                oldest: 3,
                in_flight: (1, 4),
                state: if up { "running" } else { "retrying" }.into(),
            }],
        };
        let reading = |at, sinks| Reading {
            at,
            shards: vec![(0, 0, 0, 0, 0)],
            fsync: vec![Vec::new()],
            sinks: vec![("running".into(), String::new())],
            per_sink: sinks,
            ready: true,
            degraded: false,
        };
        let prev = reading(at, vec![sink("a", 100, 0, true), sink("b", 50, 10, false)]);
        let now = reading(
            at + Duration::from_secs(2),
            vec![sink("a", 300, 0, true), sink("b", 50, 20, false)],
        );
        let (screen, _) = render(&prev, &now);
        let row = |name: &str| {
            screen
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no row for {name}:\n{screen}"))
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(row("a")[1], "100", "{screen}");
        assert_eq!(row("a").last().unwrap(), "up");
        assert_eq!(row("b")[1], "0", "{screen}");
        assert_eq!(row("b")[2], "20", "{screen}");
        assert!(screen.contains("DOWN or paused"), "{screen}");
        // Each sink's shard rows follow it, with its in-flight figures
        // and state.
        let shard_rows: Vec<&str> = screen
            .lines()
            .filter(|l| l.starts_with("  shard 0"))
            .collect();
        assert_eq!(shard_rows.len(), 2, "{screen}");
        assert!(shard_rows[0].ends_with("1/4  running"), "{screen}");
        assert!(shard_rows[1].ends_with("retrying"), "{screen}");
        assert_eq!(row("a")[6], "1/4", "{screen}"); // "0 B" is two words
    }

    #[test]
    fn bytes_read_in_their_unit() {
        assert_eq!(bytes_text(17), "17 B");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(39 * 1024 * 1024), "39.0 MiB");
        assert_eq!(bytes_text(4 << 30), "4.0 GiB");
    }

    #[test]
    fn p99_of_the_interval_only() {
        // Cumulative counts, as the exposition has them.
        let before = [(0.001, 100), (0.002, 100), (f64::INFINITY, 100)];
        let after = [(0.001, 100), (0.002, 199), (f64::INFINITY, 200)];
        // Of the 100 fsyncs in the interval, 99 took 1 to 2 ms: the 99th
        // is the last of them, at the bucket's top.
        assert_eq!(
            p99_ms(&before, &after),
            Some(P99 {
                ms: 2.0,
                at_least: false
            })
        );
        assert_eq!(p99_ms(&after, &after), None);
    }

    #[test]
    fn p99_is_interpolated_inside_its_bucket_and_never_infinite() {
        // 1000 fsyncs spread evenly over 1..2 ms: p99 near 1.99 ms, not 2.
        let none: [(f64, u64); 0] = [];
        let even = [(0.001, 0), (0.002, 1000), (f64::INFINITY, 1000)];
        let p = p99_ms(&none, &even).unwrap();
        assert!((p.ms - 1.99).abs() < 1e-9 && !p.at_least, "{p:?}");
        // Past the last finite bound: at least that bound, never inf.
        let slow = [(0.001, 0), (0.002, 50), (f64::INFINITY, 100)];
        let p = p99_ms(&none, &slow).unwrap();
        assert_eq!(
            p,
            P99 {
                ms: 2.0,
                at_least: true
            }
        );
        assert_eq!(p.to_string(), ">2.00 ms");
    }

    #[test]
    fn no_line_is_wider_than_the_terminal() {
        let screen = format!("short\n{}\n", "x".repeat(200));
        let fitted = fit(&screen, 80);
        assert!(fitted.lines().all(|l| l.chars().count() <= 80), "{fitted}");
        assert!(fitted.lines().nth(1).unwrap().ends_with('…'));
        assert_eq!(fitted.lines().next(), Some("short"));
    }

    /// A frame of two shards and two sinks, one of them failing with a
    /// long reason, at 80 columns, is the checked-in
    /// `tests/golden/top-80.txt` (`SPILLWAY_BLESS=1` rewrites it); the
    /// terminal test (testing/tests/tests/ctl_top.rs) checks a real one in tmux
    /// against its header.
    #[test]
    fn a_frame_at_80_columns_is_the_golden_one() {
        let at = Instant::now();
        let shard = |shard, delivered, backlog, state: &str| SinkShard {
            shard,
            delivered,
            backlog,
            backlog_bytes: backlog * 256,
            oldest: if backlog > 0 { 42 } else { 0 },
            in_flight: (u64::from(backlog == 0), 4),
            state: state.into(),
        };
        let sink = |name: &str, delivered, backlog, up, shards| SinkTotals {
            name: name.into(),
            delivered,
            backlog,
            backlog_bytes: backlog * 256,
            oldest: if backlog > 0 { 42 } else { 0 },
            skipped: 0,
            up,
            in_flight: (u64::from(up) * 2, 8),
            shards,
        };
        let buckets = |n: u64| {
            vec![
                (0.0005, n / 2),
                (0.001, n * 9 / 10),
                (0.0025, n),
                (f64::INFINITY, n),
            ]
        };
        let reason = "retrying: HTTP 503 Service Unavailable from https://ingest.example.com/v1/events (attempt 12)";
        let reading = |at, k: u64| Reading {
            at,
            shards: vec![
                (50_000 * k, 48_000 * k, 2_000, 1, 512_000),
                (30_000 * k, 30_000 * k, 0, 0, 0),
            ],
            fsync: vec![buckets(400 * k), buckets(300 * k)],
            sinks: vec![
                ("retrying".into(), reason.into()),
                ("running".into(), String::new()),
            ],
            per_sink: vec![
                sink(
                    "archive",
                    80_000 * k,
                    0,
                    true,
                    vec![
                        shard(0, 50_000 * k, 0, "running"),
                        shard(1, 30_000 * k, 0, "running"),
                    ],
                ),
                sink(
                    "search",
                    78_000 * k,
                    2_000,
                    false,
                    vec![
                        shard(0, 48_000 * k, 2_000, reason),
                        shard(1, 30_000 * k, 0, "running"),
                    ],
                ),
            ],
            // A sink retrying: degraded, still ready (it takes writes).
            ready: true,
            degraded: true,
        };
        let (screen, _) = render(&reading(at, 1), &reading(at + Duration::from_secs(2), 2));
        let got = frame("2026-12-04T01:02:03Z", &screen, 80);
        assert!(got.lines().all(|l| l.chars().count() <= 80), "{got}");
        crate::golden::check("top-80.txt", &got);
    }

    #[test]
    fn colour_marks_whole_lines_and_leaves_their_text_alone() {
        let frame = "sink  state\nsearch  0/8  DOWN or paused\n  shard 0  0/4  retrying: conn…\n  shard 1  1/4  running\nNOT READY  ingest 0/s\n";
        let painted = super::paint(frame);
        let lines: Vec<&str> = painted.lines().collect();
        assert_eq!(lines[0], "sink  state");
        assert_eq!(lines[1], "\x1b[31msearch  0/8  DOWN or paused\x1b[0m");
        assert_eq!(lines[2], "\x1b[33m  shard 0  0/4  retrying: conn…\x1b[0m");
        assert_eq!(lines[3], "  shard 1  1/4  running");
        assert!(lines[4].starts_with("\x1b[31mNOT READY"));
        assert!(super::paint("ready  ingest 5/s\n").starts_with("\x1b[32mready"));
        assert!(super::paint("DEGRADED  ingest 5/s\n").starts_with("\x1b[33mDEGRADED"));
    }
}
