//! Results and their presentation: an [`ReportRow`] per scenario or probe
//! (named numeric figures, and a sustained run's per-second [`Timeline`]),
//! the median over repeats, the stdout tables and the JSON lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::sustained::{Drift, Timeline};

/// Figure keys shared by scenarios, the table and the targets.
pub const RATE: &str = "records_per_s";
pub const P50: &str = "p50_us";
pub const P99: &str = "p99_us";
pub const P999: &str = "p999_us";

/// Figures that count failures or a worst case: over repeats they are the
/// maximum, not the median (one bad repeat must not be voted away).
pub const WORST_OF_REPEATS: &[&str] = &[
    "max_ack_gap_worst_ms",
    "overloaded_nacks",
    "lost_records",
    "misrouted_records",
    "duplicates",
    "rss_peak_worst_mib",
];

/// What produced an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Scenario,
    Probe,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Scenario => "scenario",
            Kind::Probe => "probe",
        }
    }
}

/// Whether the figures are there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Ok,
    Skipped(String),
    Failed(String),
}

/// One scenario's or probe's result: named figures (latencies in µs, rates
/// per second, memory in MiB) plus free-form notes.
#[derive(Debug, Clone)]
pub struct ReportRow {
    pub name: String,
    pub kind: Kind,
    pub status: Status,
    pub figures: BTreeMap<String, f64>,
    pub notes: Vec<String>,
    /// Per-second figures of a sustained run (`--duration` >= 10 s).
    pub timeline: Option<Timeline>,
}

impl ReportRow {
    /// The drift figures of a sustained run (see [`Timeline::drift`]).
    pub fn set_drift(&mut self, drift: Option<Drift>) -> &mut Self {
        let Some(d) = drift else {
            self.note("sustained: no whole second was read");
            return self;
        };
        self.set("sustained_seconds", d.seconds)
            .set("sustained_window_s", d.window_s)
            .set("records_per_s_first", d.rate_first)
            .set("records_per_s_last", d.rate_last);
        if let Some((first, last)) = d.fsync_p99_ms {
            self.set("fsync_p99_first_ms", first)
                .set("fsync_p99_last_ms", last)
                .set("fsync_p99_drift", last / first.max(1e-9));
        } else {
            self.note("sustained: no fsync in the first or last 10% (Buffered only?)");
        }
        self
    }

    pub fn new(name: impl Into<String>, kind: Kind) -> ReportRow {
        ReportRow {
            name: name.into(),
            kind,
            status: Status::Ok,
            figures: BTreeMap::new(),
            notes: Vec::new(),
            timeline: None,
        }
    }

    pub fn skipped(name: &str, kind: Kind, reason: String) -> ReportRow {
        ReportRow {
            status: Status::Skipped(reason),
            ..ReportRow::new(name, kind)
        }
    }

    pub fn failed(name: &str, kind: Kind, reason: String) -> ReportRow {
        ReportRow {
            status: Status::Failed(reason),
            ..ReportRow::new(name, kind)
        }
    }

    pub fn set(&mut self, key: &str, value: f64) -> &mut ReportRow {
        self.figures.insert(key.to_string(), value);
        self
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.figures.get(key).copied()
    }

    pub fn note(&mut self, note: impl Into<String>) -> &mut ReportRow {
        self.notes.push(note.into());
        self
    }

    /// Adds `<prefix>p50_us`, `<prefix>p99_us`, ... from a histogram in ns.
    pub fn set_latency(&mut self, prefix: &str, hist: &Histogram<u64>) -> &mut ReportRow {
        if hist.is_empty() {
            return self;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        self.set(&format!("{prefix}p50_us"), us(hist.value_at_quantile(0.50)));
        self.set(&format!("{prefix}p99_us"), us(hist.value_at_quantile(0.99)));
        self.set(
            &format!("{prefix}p999_us"),
            us(hist.value_at_quantile(0.999)),
        );
        self.set(&format!("{prefix}max_us"), us(hist.max()));
        self.set(&format!("{prefix}mean_us"), hist.mean() / 1000.0);
        self.set(&format!("{prefix}samples"), hist.len() as f64)
    }
}

/// A latency histogram in nanoseconds (1 ns .. 1 hour, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

pub fn record(hist: &mut Histogram<u64>, elapsed: Duration) {
    hist.saturating_record(elapsed.as_nanos().min(u64::MAX as u128) as u64);
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The median of each figure over the repeats of one outcome (same name),
/// the maximum for [`WORST_OF_REPEATS`]; notes are the distinct notes of
/// all repeats; the timeline is the first repeat's.
pub fn median_of(runs: &[ReportRow]) -> ReportRow {
    let first = runs.first().expect("median of at least one run");
    let mut out = ReportRow::new(first.name.clone(), first.kind);
    let mut keys: Vec<&String> = runs.iter().flat_map(|r| r.figures.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let mut values: Vec<f64> = runs.iter().filter_map(|r| r.get(key)).collect();
        if WORST_OF_REPEATS.contains(&key.as_str()) {
            out.set(
                key,
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            );
            continue;
        }
        out.set(key, median(&mut values));
        if key == RATE && runs.len() > 1 {
            // Sorted by `median`: the spread over repeats, for noisy machines.
            out.set("records_per_s_min", values[0])
                .set("records_per_s_max", values[values.len() - 1]);
        }
    }
    out.set("repeats", runs.len() as f64);
    out.timeline = runs.iter().find_map(|r| r.timeline.clone());
    for note in runs.iter().flat_map(|r| &r.notes) {
        if !out.notes.contains(note) {
            out.notes.push(note.clone());
        }
    }
    out
}

/// `1234567.8` → `"1,234,568"`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn micros(value: Option<f64>) -> String {
    match value {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
        None => "-".into(),
    }
}

/// Notes worth a glance, derived from well-known figures plus the run's own notes.
fn row_notes(o: &ReportRow) -> String {
    let mut notes: Vec<String> = Vec::new();
    match &o.status {
        Status::Skipped(why) => return format!("skipped: {why}"),
        Status::Failed(why) => return format!("FAILED: {why}"),
        Status::Ok => {}
    }
    if let (Some(rate), Some(ratio)) = (o.get("default_records_per_s"), o.get("ratio")) {
        notes.push(format!(
            "default {} rec/s, 1 MiB/default {ratio:.2}",
            thousands(rate)
        ));
    }
    notes.extend(sweep_notes(o));
    notes.extend(sustained_notes(o));
    notes.extend(delivery_notes(o));
    notes.extend(fanout_notes(o));
    if let Some(peak) = o.get("rss_peak_mib") {
        notes.push(format!("RSS peak {peak:.1} MiB"));
    }
    notes.extend(hostile_notes(o));
    if let Some(nacks) = o.get("nacks").filter(|n| *n > 0.0) {
        notes.push(format!("{nacks:.0} retryable nacks"));
    }
    notes.extend(o.notes.iter().cloned());
    notes.join("; ")
}

/// Notes of the `payload_sweep/<size>` rows: the row's rate is PushBatch's.
fn sweep_notes(o: &ReportRow) -> Vec<String> {
    let f = |k: &str| o.get(k);
    let (Some(n), Some(mib), Some(serial), Some(serial_mib), Some(ratio)) = (
        f("batch_records"),
        f("mib_per_s"),
        f("serial_records_per_s"),
        f("serial_mib_per_s"),
        f("batch_ratio"),
    ) else {
        return Vec::new();
    };
    let pipelined = f("pipelined_mib_per_s")
        .map(|p| format!(", {} with 4 in flight", mib_text(p)))
        .unwrap_or_default();
    vec![format!(
        "PushBatch of {n:.0}: {}{pipelined}; serial {} rec/s, {}, p50 {} µs; batched/serial {ratio:.2}x",
        mib_text(mib),
        thousands(serial),
        mib_text(serial_mib),
        micros(f("serial_p50_us"))
    )]
}

/// `312.4 MiB/s`, `0.03 MiB/s`.
pub fn mib_text(mib_per_s: f64) -> String {
    if mib_per_s >= 10.0 {
        format!("{mib_per_s:.1} MiB/s")
    } else {
        format!("{mib_per_s:.3} MiB/s")
    }
}

/// The drift note of a sustained run.
fn sustained_notes(o: &ReportRow) -> Vec<String> {
    let f = |k: &str| o.get(k);
    let mut notes = Vec::new();
    if let (Some(secs), Some(first), Some(last)) = (
        f("sustained_seconds"),
        f("records_per_s_first"),
        f("records_per_s_last"),
    ) {
        notes.push(format!(
            "sustained {secs:.0} s: rate first/last 10% {}/{} rec/s",
            thousands(first),
            thousands(last)
        ));
    }
    if let (Some(first), Some(last), Some(drift)) = (
        f("fsync_p99_first_ms"),
        f("fsync_p99_last_ms"),
        f("fsync_p99_drift"),
    ) {
        notes.push(format!(
            "fsync p99 first/last 10% {first:.3}/{last:.3} ms ({drift:.2}x)"
        ));
    }
    notes
}

/// Notes of the end-to-end rows, from their figures.
fn delivery_notes(o: &ReportRow) -> Vec<String> {
    let mut notes = Vec::new();
    let f = |k: &str| o.get(k);
    if let (Some(rate), Some(ratio), Some(end)) =
        (f("delivered_per_s"), f("delivery_ratio"), f("backlog_end"))
    {
        notes.push(format!(
            "delivered {} rec/s ({:.1}% of ingest); backlog end {}",
            thousands(rate),
            ratio * 100.0,
            thousands(end)
        ));
    }
    if let (Some(first), Some(last)) = (f("backlog_first_max"), f("backlog_last_max")) {
        notes.push(format!(
            "backlog max first/last 5 s {}/{}",
            thousands(first),
            thousands(last)
        ));
    }
    if let Some(us) = f("us_per_record") {
        notes.push(format!("{us:.2} µs/record"));
    }
    if let Some(speedup) = f("speedup") {
        notes.push(format!("{speedup:.1}x faster than per_record"));
    }
    if let Some(rpr) = f("records_per_request") {
        notes.push(format!("{rpr:.1} records/request"));
    }
    if let (Some(sum), Some(max)) = (f("in_flight_limit_sum"), f("in_flight_limit_max")) {
        notes.push(format!(
            "batches in flight limit {sum:.0} over the shards (max {max:.0})"
        ));
    }
    if let (Some(x), Some(h)) = (f("speedup_vs_one_in_flight"), f("ratio_vs_http")) {
        notes.push(format!(
            "{x:.1}x one publish in flight; {h:.2}x the HTTP sink"
        ));
    }
    if let (Some(loader), Some(ratio)) = (f("loader_records_per_s"), f("ratio_vs_loader")) {
        notes.push(format!(
            "{:.0}% of a bare loader's {} rows/s",
            ratio * 100.0,
            thousands(loader)
        ));
    }
    if let (Some(perf), Some(ratio), Some(x)) = (
        f("perf_test_records_per_s"),
        f("ratio_vs_perf_test"),
        f("speedup_vs_one_per_transaction"),
    ) {
        notes.push(format!(
            "{:.0}% of kafka-producer-perf-test's {} rec/s; {x:.1}x one record per transaction",
            ratio * 100.0,
            thousands(perf)
        ));
    }
    if let (Some(n), Some(p50), Some(p99)) = (
        f("records_per_transaction"),
        f("commit_p50_ms"),
        f("commit_p99_ms"),
    ) {
        notes.push(format!(
            "{n:.0} records/transaction, transaction p50/p99 {p50:.1}/{p99:.1} ms"
        ));
    }
    if let (Some(p50), Some(p99)) = (f("perf_p50_ms"), f("perf_p99_ms")) {
        notes.push(format!("perf-test latency p50/p99 {p50:.0}/{p99:.0} ms"));
    }
    if let (Some(p50), Some(noop), Some(ratio)) = (
        f("ingest_p50_us"),
        f("noop_ingest_p50_us"),
        f("ratio_vs_noop"),
    ) {
        notes.push(format!(
            "ack p50 {} µs, noop sink {} µs, Kafka/noop {ratio:.2}",
            micros(Some(p50)),
            micros(Some(noop))
        ));
    }
    if let (Some(beside), Some(ratio)) = (f("beside_ingest_p50_us"), f("ratio_vs_beside")) {
        notes.push(format!(
            "noop sink beside the same Kafka load {} µs, Kafka/beside {ratio:.2}",
            micros(Some(beside))
        ));
    }
    if let Some(ms) = f("resume_after_kill_ms") {
        notes.push(format!("resumed {ms:.0} ms after the leader's kill"));
    }
    if let (Some(peak), Some(lost), Some(dups)) =
        (f("backlog_peak"), f("lost_records"), f("duplicates"))
    {
        notes.push(format!(
            "backlog peak {}; {lost:.0} lost, {dups:.0} twice",
            thousands(peak)
        ));
    }
    if let Some(r) = f("one_at_a_time_delivery_ratio") {
        notes.push(format!("one at a time: {:.1}% of ingest", r * 100.0));
    }
    if let (Some(p50), Some(ratio)) = (f("noop_p50_us"), f("p50_ratio")) {
        notes.push(format!(
            "noop p50 {} µs, HTTP/noop {ratio:.2}",
            micros(Some(p50))
        ));
    }
    if let (Some(rate), Some(ratio)) = (f("builtin_records_per_s"), f("ratio")) {
        notes.push(format!(
            "built-in file {} rec/s, plugin/built-in {ratio:.2}",
            thousands(rate)
        ));
    }
    if let (Some(gap), Some(worst)) = (f("max_ack_gap_ms"), f("max_ack_gap_worst_ms")) {
        notes.push(format!(
            "longest ack gap after a reload {gap:.1} ms (worst {worst:.1})"
        ));
    }
    if let (Some(around), Some(base)) = (f("around_ack_gap_ms"), f("baseline_ack_gap_ms")) {
        notes.push(format!(
            "±1 s around {around:.1} ms, 2 s with no reload {base:.1} ms"
        ));
    }
    if let (Some(lost), Some(wrong)) = (f("lost_records"), f("misrouted_records")) {
        notes.push(format!(
            "{lost:.0} lost, {wrong:.0} on the old sink after a reload"
        ));
    }
    if let (Some(a), Some(b)) = (f("at_a"), f("at_b")) {
        notes.push(format!("{} at A, {} at B", thousands(a), thousands(b)));
    }
    notes
}

/// Notes of the `e2e_fanout_3` rows, from their figures.
fn fanout_notes(o: &ReportRow) -> Vec<String> {
    let mut notes = Vec::new();
    let f = |k: &str| o.get(k);
    let Some(sinks) = f("sinks") else {
        return notes;
    };
    let per_sink: Vec<String> = ["a", "b", "c"]
        .iter()
        .take(sinks as usize)
        .filter_map(|s| f(&format!("delivery_ratio_{s}")).map(|r| format!("{s} {:.1}%", r * 100.0)))
        .collect();
    notes.push(format!(
        "{sinks:.0} sink(s) delivered {} of ingest",
        per_sink.join(", ")
    ));
    if let (Some(p50), Some(ratio), Some(p99_ratio)) =
        (f("one_sink_p50_us"), f("p50_ratio"), f("p99_ratio"))
    {
        notes.push(format!(
            "1 sink p50 {} µs; ack p50/p99 3 sinks/1 sink {ratio:.2}/{p99_ratio:.2}",
            micros(Some(p50))
        ));
    }
    if let Some(bytes) = f("read_bytes_per_record") {
        notes.push(format!("daemon read {bytes:.0} B/record"));
    }
    if let Some(extra) = f("read_bytes_per_record_per_extra_sink") {
        notes.push(format!("+{extra:.0} B/record per extra sink"));
    }
    notes
}

/// Notes of the `hostile/under_attack` row, from its figures.
fn hostile_notes(o: &ReportRow) -> Vec<String> {
    let mut notes = Vec::new();
    let f = |k: &str| o.get(k);
    if let (Some(p50), Some(p99)) = (f("p50_ratio"), f("p99_ratio")) {
        if f("attack_open_avg").is_some() {
            notes.push(format!("p50/p99 {p50:.2}x/{p99:.2}x of no_attack"));
        }
    }
    if let (Some(open), Some(closed)) = (f("attack_open_avg"), f("attack_closed_by_daemon")) {
        notes.push(format!(
            "{open:.0} attack connections open on average, {closed:.0} closed by the daemon"
        ));
    }
    if let (Some(accepted), Some(timeouts)) =
        (f("daemon_connections_accepted"), f("daemon_read_timeouts"))
    {
        notes.push(format!(
            "daemon: {} accepted, {timeouts:.0} read timeouts, {} nacks",
            thousands(accepted),
            thousands(f("daemon_nacks").unwrap_or(0.0))
        ));
    }
    if let Some(lines) = f("log_lines") {
        notes.push(format!("{lines:.0} log lines"));
    }
    notes
}

/// The scenario table: one row per scenario outcome.
pub fn scenario_table(outcomes: &[ReportRow]) -> String {
    let rows: Vec<&ReportRow> = outcomes
        .iter()
        .filter(|o| o.kind == Kind::Scenario)
        .collect();
    let width = rows
        .iter()
        .map(|o| o.name.len())
        .chain([8])
        .max()
        .unwrap_or(8);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<width$} {:>11} {:>9} {:>9} {:>9}  notes",
        "scenario", "records/s", "p50 µs", "p99 µs", "p999 µs"
    );
    for o in rows {
        let rate = o.get(RATE).map(thousands).unwrap_or_else(|| "-".into());
        let line = format!(
            "{:<width$} {:>11} {:>9} {:>9} {:>9}  {}",
            o.name,
            rate,
            micros(o.get(P50)),
            micros(o.get(P99)),
            micros(o.get(P999)),
            row_notes(o)
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s
}

/// The probe section: every figure of every probe, one per line.
pub fn probe_table(outcomes: &[ReportRow]) -> String {
    let mut s = String::new();
    for o in outcomes.iter().filter(|o| o.kind == Kind::Probe) {
        if o.status != Status::Ok {
            let _ = writeln!(s, "{:<14} {}", o.name, row_notes(o));
            continue;
        }
        for (key, value) in o.figures.iter().filter(|(k, _)| probe_key_shown(k)) {
            let _ = writeln!(
                s,
                "{:<14} {:<34} {:>12}",
                o.name,
                key,
                probe_value(key, *value)
            );
        }
        for note in &o.notes {
            let _ = writeln!(s, "{:<14} {note}", o.name);
        }
    }
    s
}

fn probe_key_shown(key: &str) -> bool {
    !(key == "repeats"
        || key.ends_with("samples")
        || key.ends_with("mean_us")
        || key.ends_with("max_us"))
}

fn probe_value(key: &str, value: f64) -> String {
    if key.ends_with("_us") {
        micros(Some(value))
    } else if key.ends_with("_mib") || key.ends_with("mib_per_s") {
        format!("{value:.1}")
    } else {
        thousands(value)
    }
}

fn figures_json(o: &ReportRow) -> serde_json::Map<String, serde_json::Value> {
    o.figures
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::json!(v)))
        .collect()
}

/// One JSON object per outcome.
pub fn outcome_json(o: &ReportRow) -> serde_json::Value {
    let (status, reason) = match &o.status {
        Status::Ok => ("ok", None),
        Status::Skipped(r) => ("skipped", Some(r.clone())),
        Status::Failed(r) => ("failed", Some(r.clone())),
    };
    let mut line = serde_json::json!({
        "kind": o.kind.as_str(),
        "name": o.name,
        "status": status,
        "reason": reason,
        "figures": figures_json(o),
        "notes": o.notes,
    });
    if let Some(t) = &o.timeline {
        line["timeline"] = t.json();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_thousands() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
    }

    #[test]
    fn median_of_takes_each_figure_separately() {
        let mut a = ReportRow::new("x", Kind::Scenario);
        a.set(RATE, 10.0).set(P50, 5.0);
        let mut b = ReportRow::new("x", Kind::Scenario);
        b.set(RATE, 30.0).set(P50, 1.0);
        let mut c = ReportRow::new("x", Kind::Scenario);
        c.set(RATE, 20.0).set(P50, 3.0);
        let m = median_of(&[a, b, c]);
        assert_eq!(m.get(RATE), Some(20.0));
        assert_eq!(m.get(P50), Some(3.0));
        assert_eq!(m.get("repeats"), Some(3.0));
    }
}
