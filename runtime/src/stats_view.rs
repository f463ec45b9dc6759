//! `spillway ctl stats` for people: the daemon's counters (its
//! `stats --json`) grouped into ingest, the WAB, delivery per sink and
//! shard, dead letters and reloads, with units (`4.0 GiB`, `1.9 ms`) and
//! average rates since the start. Scripts read `--json`, or `--flat` (one
//! `key value` line per counter, as the daemon's admin socket answers
//! `stats`).

use std::fmt::Write as _;

use serde_json::Value;

use crate::table;
use crate::top::bytes_text;

/// The grouped view of a `stats --json` answer.
pub fn render(stats: &Value) -> String {
    let g = &stats["global"];
    let shards = stats["shards"].as_array().cloned().unwrap_or_default();
    let sinks = stats["sinks"].as_object().cloned().unwrap_or_default();
    let uptime = int(&g["uptime_seconds"]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "spillway: up {}, {} shard{}, {} sink{}",
        duration(uptime),
        shards.len(),
        plural(shards.len()),
        sinks.len(),
        plural(sinks.len())
    );
    ingest(&mut out, stats, uptime);
    wab(&mut out, g, &shards, uptime);
    delivery(&mut out, &sinks, uptime);
    dead_letters(&mut out, &sinks);
    let _ = writeln!(
        out,
        "\nRELOADS  {} succeeded, {} failed",
        count(int(&stats["reloads"]["succeeded"])),
        count(int(&stats["reloads"]["failed"]))
    );
    out
}

fn ingest(out: &mut String, stats: &Value, uptime: u64) {
    let g = &stats["global"];
    let _ = writeln!(out, "\nINGEST");
    let lines = socket_lines(g, stats)
        .into_iter()
        .chain(door_lines(g))
        .chain(trouble_lines(g, stats, uptime));
    for (label, text) in lines {
        let _ = writeln!(out, "  {label:<14}{text}");
    }
}

/// The producers' connections, their buffers, and the nacks they got.
fn socket_lines(g: &Value, stats: &Value) -> Vec<(&'static str, String)> {
    let n = |key: &str| count(int(&g[key]));
    let refused = g["connections_refused_by_reason"]
        .as_object()
        .map(|m| nonzero(m.iter().map(|(k, v)| (k.as_str(), int(v)))))
        .unwrap_or_default();
    let nacks = stats["nacks"]
        .as_object()
        .map(|m| nonzero(m.iter().map(|(k, v)| (k.as_str(), int(v)))))
        .unwrap_or_default();
    vec![
        (
            "connections",
            format!(
                "{} open, {} accepted, {} evicted, {} refused{}",
                n("connections_open"),
                n("connections_accepted"),
                n("connections_evicted"),
                n("connections_refused"),
                if refused.is_empty() {
                    String::new()
                } else {
                    format!(" ({refused})")
                }
            ),
        ),
        (
            "timeouts",
            format!(
                "{} read, {} write, {} idle",
                n("read_timeouts"),
                n("write_timeouts"),
                n("idle_timeouts")
            ),
        ),
        (
            "read buffers",
            format!(
                "{} reserved, {} pauses, {} connections mid-frame",
                bytes_text(int(&g["read_buffer_bytes"])),
                n("read_buffer_pauses"),
                n("connections_mid_frame")
            ),
        ),
        (
            "frame buffers",
            format!(
                "{} kept for reuse",
                bytes_text(int(&g["frame_buffers_kept_bytes"]))
            ),
        ),
        ("nacks", or_none(nacks)),
    ]
}

/// The figures of `g` named `prefix` + label + `"}`, by label.
fn labelled(g: &Value, prefix: &str) -> String {
    nonzero(g.as_object().into_iter().flatten().filter_map(|(k, v)| {
        let label = k.strip_prefix(prefix)?.strip_suffix("\"}")?;
        Some((label, int(v)))
    }))
}

/// The network doors (each door's connections; the HTTP door's records
/// and answers), and their failed TLS handshakes.
fn door_lines(g: &Value) -> Vec<(&'static str, String)> {
    let n = |key: &str| count(int(&g[key]));
    let mut lines = Vec::new();
    let mut tls = Vec::new();
    for (door, label) in [("http", "http door"), ("tcp", "tcp door")] {
        let mut line = format!(
            "{} open, {} accepted, {} evicted, {} refused",
            n(&format!("{door}_connections_open")),
            n(&format!("{door}_connections_accepted")),
            n(&format!("{door}_connections_evicted")),
            n(&format!("{door}_connections_refused")),
        );
        if door == "http" {
            line += &format!(", {} records", n("http_records"));
            let answers = labelled(g, "http_responses{code=\"");
            if !answers.is_empty() {
                line += &format!("; answers {answers}");
            }
        }
        lines.push((label, line));
        let failed = labelled(g, &format!("{door}_tls_handshakes_failed{{reason=\""));
        if !failed.is_empty() {
            tls.push(format!("{door}: {failed}"));
        }
    }
    lines.push(("tls failures", or_none(tls.join("; "))));
    lines
}

/// What went wrong outside a connection, and what was written.
fn trouble_lines(g: &Value, stats: &Value, uptime: u64) -> Vec<(&'static str, String)> {
    let trouble = nonzero(
        [
            ("accept failures", "accept_failures"),
            ("fd exhaustion", "fd_exhaustion"),
            ("admin refused", "admin_connections_refused"),
            ("log writes lost", "log_write_failures"),
            ("socket replaced", "socket_replaced"),
        ]
        .into_iter()
        .map(|(label, key)| (label, int(&g[key]))),
    );
    let written: u64 = shards_sum(stats, "records_written");
    vec![
        ("trouble", or_none(trouble)),
        (
            "records",
            format!("{} written{}", count(written), rate(written, uptime)),
        ),
    ]
}

fn wab(out: &mut String, g: &Value, shards: &[Value], uptime: u64) {
    let (used, max) = (int(&g["wab_bytes_used"]), int(&g["wab_bytes_max"]));
    let _ = writeln!(
        out,
        "\nWAB  {} of {} used ({:.1}%)",
        bytes_text(used),
        bytes_text(max),
        100.0 * used as f64 / max.max(1) as f64
    );
    let rows: Vec<Vec<String>> = shards
        .iter()
        .map(|s| {
            let fsyncs = int(&s["fsyncs"]);
            vec![
                int(&s["shard"]).to_string(),
                s["health"].as_str().unwrap_or("?").to_string(),
                count(int(&s["records_written"])),
                per_second(int(&s["records_written"]), uptime),
                bytes_text(int(&s["payload_bytes_written"])),
                if fsyncs == 0 {
                    "-".into()
                } else {
                    micros(int(&s["fsync_us_mean"]))
                },
                if fsyncs == 0 {
                    "-".into()
                } else {
                    micros(int(&s["fsync_us_max"]))
                },
                format!("{:.1}", s["records_per_group"].as_f64().unwrap_or(0.0)),
            ]
        })
        .collect();
    indent(
        out,
        &table::render(
            &[
                "SHARD",
                "HEALTH",
                "WRITTEN",
                "AVG/S",
                "PAYLOAD",
                "FSYNC",
                "MAX",
                "PER GROUP",
            ],
            &rows,
            &[2, 3, 4, 5, 6, 7],
        ),
    );
    let rows: Vec<Vec<String>> = shards
        .iter()
        .map(|s| {
            vec![
                int(&s["shard"]).to_string(),
                count(int(&s["pending_records"])),
                bytes_text(int(&s["pending_bytes"])),
                duration(int(&s["oldest_pending_age_seconds"])),
                bytes_text(int(&s["bytes_held"])),
                count(int(&s["rotations"])),
                count(int(&s["segments_deleted"])),
            ]
        })
        .collect();
    indent(
        out,
        &table::render(
            &[
                "SHARD",
                "PENDING",
                "BYTES",
                "OLDEST",
                "ON DISK",
                "ROTATIONS",
                "DELETED",
            ],
            &rows,
            &[1, 2, 3, 4, 5, 6],
        ),
    );
    for s in shards {
        let trouble = nonzero(
            [
                ("records lost", "records_lost"),
                ("files quarantined", "quarantined_files"),
                ("unwritable spells", "unwritable_events"),
                ("fsync failures", "fsync_failures"),
                ("write failures", "write_failures"),
                ("sealed without successor", "sealed_without_successor"),
                ("flusher restarts", "restarts"),
            ]
            .into_iter()
            .map(|(label, key)| (label, int(&s[key]))),
        );
        if !trouble.is_empty() {
            let _ = writeln!(out, "  shard {}: {trouble}", int(&s["shard"]));
        }
    }
}

fn delivery(out: &mut String, sinks: &serde_json::Map<String, Value>, uptime: u64) {
    let _ = writeln!(out, "\nDELIVERY");
    for (name, s) in sinks {
        let n = |key: &str| count(int(&s[key]));
        let head = format!("  {name}: {}", s["description"].as_str().unwrap_or(""));
        let _ = writeln!(out, "{}", crate::top::ellipsize(&head, 80));
        let delivered = int(&s["delivered_records"]);
        let state = if int(&s["up"]) == 1 {
            "up"
        } else {
            "DOWN or paused"
        };
        let _ = writeln!(
            out,
            "    {state}: {} delivered in {} batches{}",
            count(delivered),
            n("delivered_batches"),
            rate(delivered, uptime),
        );
        let _ = writeln!(
            out,
            "    backlog {} records ({}), the oldest {} old",
            n("backlog_records"),
            bytes_text(int(&s["backlog_bytes"])),
            duration(int(&s["oldest_age_seconds"]))
        );
        let _ = writeln!(
            out,
            "    {} retries, {} restarts, {} skipped, {} dead-lettered, in flight {}/{}",
            n("delivery_retries"),
            n("sink_restarts"),
            n("records_skipped"),
            n("dead_lettered"),
            n("batches_in_flight"),
            n("batches_in_flight_limit")
        );
        if int(&s["batch_splits"]) > 0 {
            let _ = writeln!(
                out,
                "    poison: {} batches halved to find failing records, {} set aside",
                n("batch_splits"),
                n("poison_records")
            );
        }
        let per_shard = s["shards"].as_array().cloned().unwrap_or_default();
        if per_shard.len() < 2 {
            continue;
        }
        let rows: Vec<Vec<String>> = per_shard
            .iter()
            .map(|d| {
                vec![
                    int(&d["shard"]).to_string(),
                    if int(&d["up"]) == 1 { "up" } else { "DOWN" }.to_string(),
                    count(int(&d["delivered_records"])),
                    count(int(&d["backlog_records"])),
                    bytes_text(int(&d["backlog_bytes"])),
                    duration(int(&d["oldest_age_seconds"])),
                    count(int(&d["checkpoint"])),
                    format!(
                        "{}/{}",
                        int(&d["batches_in_flight"]),
                        int(&d["batches_in_flight_limit"])
                    ),
                ]
            })
            .collect();
        let text = table::render(
            &[
                "SHARD",
                "STATE",
                "DELIVERED",
                "BACKLOG",
                "BYTES",
                "OLDEST",
                "CURSOR",
                "IN FLIGHT",
            ],
            &rows,
            &[2, 3, 4, 5, 6, 7],
        );
        for line in text.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
}

fn dead_letters(out: &mut String, sinks: &serde_json::Map<String, Value>) {
    let _ = writeln!(out, "\nDEAD LETTERS");
    for (name, s) in sinks {
        let _ = writeln!(
            out,
            "  {name}: {} (ctl dead-letter list --sink {name})",
            count(int(&s["dead_lettered"]))
        );
    }
}

/// Every line of `text`, two spaces in.
fn indent(out: &mut String, text: &str) {
    for line in text.lines() {
        let _ = writeln!(out, "  {line}");
    }
}

fn int(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The sum of `key` over every shard.
fn shards_sum(stats: &Value, key: &str) -> u64 {
    stats["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| int(&s[key]))
        .sum()
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `1234567` as `1,234,567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Microseconds in ms (or µs below one).
fn micros(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.1} ms", us as f64 / 1000.0)
    }
}

/// Seconds as `42 s`, `3m 20s`, `2h 05m`, `3d 04h`.
fn duration(s: u64) -> String {
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{}m {:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        s => format!("{}d {:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `n` over the uptime, per second.
fn per_second(n: u64, uptime: u64) -> String {
    if uptime == 0 {
        return "-".into();
    }
    count((n as f64 / uptime as f64).round() as u64)
}

/// ` (N/s on average since the start)`, or nothing in the first second.
fn rate(n: u64, uptime: u64) -> String {
    if uptime == 0 {
        return String::new();
    }
    format!(" ({}/s on average)", per_second(n, uptime))
}

/// The labelled counts that are not zero, as `3 overloaded, 1 bad_magic`.
fn nonzero<'a>(items: impl Iterator<Item = (&'a str, u64)>) -> String {
    items
        .filter(|(_, n)| *n > 0)
        .map(|(label, n)| format!("{} {label}", count(n)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn or_none(text: String) -> String {
    if text.is_empty() {
        "none".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The view of a fixed answer (`tests/golden/stats.json`, taken from a
    /// daemon with two shards and two sinks, one of them failing) is the
    /// checked-in `stats.txt`; `SPILLWAY_BLESS=1` rewrites it. A change to
    /// the view shows in that file's diff.
    #[test]
    fn the_view_of_a_known_answer_is_the_golden_one() {
        let input: Value = serde_json::from_str(
            &std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/stats.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let got = render(&input);
        crate::golden::check("stats.txt", &got);
        for line in got.lines() {
            assert!(line.chars().count() <= 80, "wider than 80: {line:?}");
        }
    }

    #[test]
    fn units_read_as_people_write_them() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(micros(881), "881 µs");
        assert_eq!(micros(1_940), "1.9 ms");
        assert_eq!(duration(59), "59 s");
        assert_eq!(duration(200), "3m 20s");
        assert_eq!(duration(7_500), "2h 05m");
        assert_eq!(duration(273_600), "3d 04h");
        assert_eq!(rate(100, 0), "");
        assert_eq!(rate(5_000, 60), " (83/s on average)");
    }
}
