//! Kafka's own producer benchmark (`org.apache.kafka.tools.ProducerPerformance`
//! from the jars), as the yardstick the bench sets spillway's Kafka sink
//! against: the Java client at full speed with the durable settings the
//! sink uses (`acks=all`, idempotence).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::node::class_path;

/// ProducerPerformance's summary line, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerfResult {
    pub records: u64,
    pub records_per_sec: f64,
    pub mb_per_sec: f64,
    pub avg_latency_ms: f64,
    pub max_latency_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

/// Runs ProducerPerformance: `records` records of `record_size` bytes into
/// `topic` (which must exist), as fast as it can, and returns its summary
/// or why there is none (with its output).
pub(crate) fn run(
    libs: &Path,
    log4j2: &str,
    bootstrap: &str,
    topic: &str,
    records: u64,
    record_size: usize,
    compression: &str,
) -> Result<PerfResult, String> {
    let out = Command::new("java")
        .args(["-Xmx512m", log4j2, "-cp"])
        .arg(class_path(libs))
        .arg("org.apache.kafka.tools.ProducerPerformance")
        .args(["--topic", topic])
        .args(["--num-records", &records.to_string()])
        .args(["--record-size", &record_size.to_string()])
        .args(["--throughput", "-1", "--producer-props"])
        .arg(format!("bootstrap.servers={bootstrap}"))
        .args(["acks=all", "enable.idempotence=true"])
        .arg(format!("compression.type={compression}"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running java (ProducerPerformance): {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "ProducerPerformance exited ({}): {stdout}{stderr}",
            out.status
        ));
    }
    stdout
        .lines()
        .rev()
        .find_map(parse_summary)
        .ok_or_else(|| format!("ProducerPerformance printed no summary: {stdout}{stderr}"))
}

/// Parses the summary line, e.g. `100000 records sent, 48309.178744
/// records/sec (4.61 MB/sec), 1234.56 ms avg latency, 2345.00 ms max
/// latency, 1200 ms 50th, 2200 ms 95th, 2300 ms 99th, 2340 ms 99.9th.`;
/// `None` for any other line (the progress lines lack the percentiles).
pub(crate) fn parse_summary(line: &str) -> Option<PerfResult> {
    let mut r = PerfResult::default();
    let mut seen = 0;
    for part in line.trim().trim_end_matches('.').split(',') {
        let mut words = part.split_whitespace();
        let value = words.next()?;
        let rest: Vec<&str> = words.collect();
        let number = || value.parse::<f64>().ok();
        match rest.as_slice() {
            ["records", "sent"] => r.records = value.parse().ok()?,
            ["records/sec", mb, "MB/sec)"] => {
                r.records_per_sec = number()?;
                r.mb_per_sec = mb.trim_start_matches('(').parse().ok()?;
            }
            ["ms", "avg", "latency"] => r.avg_latency_ms = number()?,
            ["ms", "max", "latency"] => r.max_latency_ms = number()?,
            ["ms", "50th"] => r.p50_ms = number()?,
            ["ms", "95th"] => r.p95_ms = number()?,
            ["ms", "99th"] => r.p99_ms = number()?,
            ["ms", "99.9th"] => r.p999_ms = number()?,
            _ => return None,
        }
        seen += 1;
    }
    (seen == 8).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_parses_and_a_progress_line_does_not() {
        let summary = "100000 records sent, 48309.178744 records/sec (4.61 MB/sec), \
                       1234.56 ms avg latency, 2345.00 ms max latency, 1200 ms 50th, \
                       2200 ms 95th, 2300 ms 99th, 2340 ms 99.9th.";
        let r = parse_summary(summary).expect("a summary");
        assert_eq!(r.records, 100000);
        assert_eq!(r.mb_per_sec, 4.61);
        assert_eq!(r.p999_ms, 2340.0);
        let progress = "23456 records sent, 4691.2 records/sec (0.45 MB/sec), \
                        1500.3 ms avg latency, 2300.0 ms max latency.";
        assert_eq!(parse_summary(progress), None);
    }
}
