//! `--charts DIR`: the run's results as SVG charts (plotters, SVG backend
//! only), for a person rather than a script:
//!
//! - `throughput.svg`: records/s of every scenario row but the payload
//!   sweep's (horizontal bars,
//!   log scale) against the disk probe's two limits for 5-byte records;
//! - `latency.svg`: p50, p99 and p99.9 of every scenario row;
//! - `payload_sweep.svg`: MiB/s by record size, serial, PushBatch and
//!   PushBatch 4 in flight,
//!   against the disk-bandwidth probe and the 70% target;
//! - `sustained_<scenario>.svg` for each sustained run: records/s and
//!   fsync p99 for every second.
//!
//! Each chart has a title, a line saying what run it comes from, and axes
//! labelled with their units. Text sizes are estimated (no font is linked),
//! which is all an SVG needs: the viewer lays the text out.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{mib_text, Kind, ReportRow, Status, P50, P99, P999, RATE};
use super::sustained::Timeline;
use super::sweep;

const WIDTH: u32 = 1200;
const FONT: &str = "sans-serif";
const TITLE_PX: u32 = 28;
const SUBTITLE_PX: u32 = 16;
const LABEL_PX: u32 = 17;
const AXIS_PX: u32 = 18;

const BAR_BLUE: RGBColor = RGBColor(49, 110, 180);
const ORANGE: RGBColor = RGBColor(230, 126, 34);
const DARK_RED: RGBColor = RGBColor(178, 34, 34);
const GREEN_LINE: RGBColor = RGBColor(39, 140, 70);
const GREY: RGBColor = RGBColor(90, 90, 90);
const PURPLE: RGBColor = RGBColor(125, 60, 152);
const LIGHT: RGBColor = RGBColor(235, 235, 235);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err(path: &Path) -> impl Fn(String) -> String + '_ {
    move |e| format!("drawing {}: {e}", path.display())
}

/// Writes every chart the run has data for into `dir` (created if need
/// be); the files written.
pub fn write(dir: &Path, subtitle: &[String], rows: &[ReportRow]) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let ok: Vec<&ReportRow> = rows.iter().filter(|r| r.status == Status::Ok).collect();
    let scenarios: Vec<&ReportRow> = ok
        .iter()
        .copied()
        .filter(|r| r.kind == Kind::Scenario)
        .collect();
    let probe = |name: &str, key: &str| {
        ok.iter()
            .find(|r| r.kind == Kind::Probe && r.name == name)
            .and_then(|r| r.get(key))
    };
    let mut written = Vec::new();
    // The sweep's rows are records of other sizes: they have a chart of
    // their own, in MiB/s against the bandwidth probe.
    let rated: Vec<&ReportRow> = scenarios
        .iter()
        .copied()
        .filter(|r| r.get(RATE).is_some_and(|v| v > 0.0) && !sweep::is_sweep_row(r))
        .collect();
    if !rated.is_empty() {
        let path = dir.join("throughput.svg");
        let limits = throughput_limits(
            probe("disk_probe", "batch256_records_per_s"),
            probe("disk_probe", "prealloc_fsync_p50_us"),
        );
        let bars = Bars {
            title: "Throughput per scenario",
            subtitle,
            axis: "records/s (log scale)",
            rows: rated.iter().map(|r| r.name.clone()).collect(),
            series: vec![(
                "records/s (median over repeats)",
                BAR_BLUE,
                rated.iter().map(|r| r.get(RATE)).collect(),
            )],
            limits,
        };
        draw_bars(&path, &bars).map_err(err(&path))?;
        written.push(path);
    }
    let timed: Vec<&ReportRow> = scenarios
        .iter()
        .copied()
        .filter(|r| r.get(P50).is_some_and(|v| v > 0.0))
        .collect();
    if !timed.is_empty() {
        let path = dir.join("latency.svg");
        let col = |key: &str| -> Vec<Option<f64>> { timed.iter().map(|r| r.get(key)).collect() };
        let bars = Bars {
            title: "Latency percentiles per scenario",
            subtitle,
            axis: "µs (log scale): ack latency per request (a batch is one request); push→arrival for e2e rows",
            rows: timed.iter().map(|r| r.name.clone()).collect(),
            series: vec![
                ("p50", BAR_BLUE, col(P50)),
                ("p99", ORANGE, col(P99)),
                ("p99.9", DARK_RED, col(P999)),
            ],
            limits: Vec::new(),
        };
        draw_bars(&path, &bars).map_err(err(&path))?;
        written.push(path);
    }
    let sweep_rows: Vec<&ReportRow> = scenarios
        .iter()
        .copied()
        .filter(|r| sweep::is_sweep_row(r))
        .collect();
    if !sweep_rows.is_empty() {
        let path = dir.join("payload_sweep.svg");
        let disk = probe("disk_bandwidth", "mib_per_s");
        draw_sweep(&path, subtitle, &sweep_rows, disk).map_err(err(&path))?;
        written.push(path);
    }
    let fsync_probe = probe("disk_probe", "prealloc_fsync_p99_us");
    for row in &scenarios {
        let Some(timeline) = row.timeline.as_ref().filter(|t| t.len() > 0) else {
            continue;
        };
        let file = format!("sustained_{}.svg", row.name.replace('/', "_"));
        let path = dir.join(file);
        draw_sustained(&path, subtitle, row, timeline, fsync_probe).map_err(err(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// The dashed lines across the throughput chart: what the disk probe
/// measured, 256 small records per fdatasync and one record per fdatasync.
fn throughput_limits(
    batch256_per_s: Option<f64>,
    fsync_p50_us: Option<f64>,
) -> Vec<(String, f64, RGBColor)> {
    let mut limits = Vec::new();
    if let Some(rate) = batch256_per_s {
        limits.push((
            format!("disk probe: 256 × 5 B per fdatasync, {} rec/s", short(rate)),
            rate,
            DARK_RED,
        ));
    }
    if let Some(us) = fsync_p50_us {
        let rate = 1e6 / us;
        limits.push((
            format!(
                "one fdatasync per record (1 / fsync p50 {us:.0} µs), {} rec/s",
                short(rate)
            ),
            rate,
            GREEN_LINE,
        ));
    }
    limits
}

/// `1.23M`, `58.5k`, `145`, `26.0`, `0.50`, `0`.
fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn text(px: u32) -> TextStyle<'static> {
    (FONT, px).into_font().color(&BLACK)
}

/// Pixels of a header with `lines` lines under its title.
fn header_px(lines: usize) -> u32 {
    20 + TITLE_PX + (SUBTITLE_PX + 6) * lines as u32
}

/// A white canvas with the title and the lines under it (which run, and
/// how it was measured); the area below them.
fn header<'a>(root: &Area<'a>, title: &str, subtitle: &[String]) -> Result<Area<'a>, String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (top, body) = root.split_vertically(header_px(subtitle.len()));
    top.draw(&Text::new(title.to_string(), (20, 12), text(TITLE_PX)))
        .map_err(|e| e.to_string())?;
    for (i, line) in subtitle.iter().enumerate() {
        let y = 12 + TITLE_PX as i32 + 6 + (SUBTITLE_PX as i32 + 6) * i as i32;
        top.draw(&Text::new(
            line.clone(),
            (20, y),
            (FONT, SUBTITLE_PX).into_font().color(&GREY),
        ))
        .map_err(|e| e.to_string())?;
    }
    Ok(body)
}

/// A horizontal bar chart: one band per row (top to bottom in the order
/// given), one bar per series in each band, and vertical reference lines.
struct Bars<'a> {
    title: &'a str,
    subtitle: &'a [String],
    axis: &'a str,
    rows: Vec<String>,
    /// Name, colour, one value per row.
    series: Vec<(&'a str, RGBColor, Vec<Option<f64>>)>,
    /// Name, x value, colour.
    limits: Vec<(String, f64, RGBColor)>,
}

fn draw_bars(path: &Path, b: &Bars) -> Result<(), String> {
    let n = b.rows.len();
    let band_px = 14 + 16 * b.series.len() as u32;
    let mut entries: Vec<Entry> = b
        .series
        .iter()
        .map(|(name, colour, _)| (name.to_string(), *colour, Mark::Bar))
        .collect();
    entries.extend(
        b.limits
            .iter()
            .map(|(name, _, colour)| (name.clone(), *colour, Mark::Dashed)),
    );
    let legend = legend_px(entries.len());
    let height = header_px(b.subtitle.len()) + 80 + legend + band_px * n as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let body = header(&root, b.title, b.subtitle)?;
    let (plot, below) = body.split_vertically(body.dim_in_pixel().1 - legend);
    let values = b.series.iter().flat_map(|s| s.2.iter().flatten().copied());
    let limit_values = b.limits.iter().map(|l| l.1);
    let all: Vec<f64> = values.chain(limit_values).filter(|v| *v > 0.0).collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min) / 2.0;
    // Room on the right for the value printed after the longest bar.
    let hi = all.iter().copied().fold(0.0, f64::max) * 4.0;
    let name_px = b.rows.iter().map(|r| r.len()).max().unwrap_or(8) as u32 * 8 + 20;
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .margin_right(30)
        .x_label_area_size(55)
        .y_label_area_size(name_px)
        .build_cartesian_2d(
            (lo..hi).log_scale(),
            (0..n.saturating_sub(1)).nested_coord(|_| 0.0..1.0),
        )
        .map_err(|e| e.to_string())?;
    let rows = b.rows.clone();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(LIGHT)
        .max_light_lines(4)
        .y_labels(n)
        .y_label_formatter(&|v: &NestedValue<usize, f64>| match v {
            NestedValue::Category(d) => rows[n - 1 - d].clone(),
            NestedValue::Value(..) => String::new(),
        })
        .x_label_formatter(&|v: &f64| short(*v))
        .x_desc(b.axis)
        .axis_desc_style(text(AXIS_PX))
        .label_style(text(LABEL_PX))
        .draw()
        .map_err(|e| e.to_string())?;
    let slot = 0.8 / b.series.len() as f64;
    for (s, (_, colour, values)) in b.series.iter().enumerate() {
        // Series 0 on top within its band; the first row at the top.
        let top = 0.9 - slot * s as f64;
        let band = |row: usize, v: &Option<f64>| Some((n - 1 - row, (*v).filter(|v| *v > 0.0)?));
        let bars = values.iter().enumerate().filter_map(|(row, v)| {
            let (d, v) = band(row, v)?;
            Some(Rectangle::new(
                [
                    (lo, NestedValue::Value(d, top - slot * 0.9)),
                    (v, NestedValue::Value(d, top)),
                ],
                colour.filled(),
            ))
        });
        chart.draw_series(bars).map_err(|e| e.to_string())?;
        let labels = values.iter().enumerate().filter_map(|(row, v)| {
            let (d, v) = band(row, v)?;
            let at = (v, NestedValue::Value(d, top - slot * 0.45));
            Some(
                EmptyElement::at(at)
                    + Text::new(short(v), (5, -6), (FONT, 14).into_font().color(&GREY)),
            )
        });
        chart.draw_series(labels).map_err(|e| e.to_string())?;
    }
    for (_, x, colour) in &b.limits {
        let ends = [
            (*x, NestedValue::Value(0, 0.0)),
            (*x, NestedValue::Value(n - 1, 1.0)),
        ];
        chart
            .draw_series(DashedLineSeries::new(ends, 8, 5, colour.stroke_width(2)))
            .map_err(|e| e.to_string())?;
    }
    draw_legend(&below, &entries)?;
    root.present().map_err(|e| e.to_string())
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Mark {
    Bar,
    Line,
    Dashed,
}

/// One legend entry: what it is, its colour, its mark.
type Entry = (String, RGBColor, Mark);

/// Pixels a legend of `n` entries needs.
fn legend_px(n: usize) -> u32 {
    16 + 24 * n as u32
}

/// The legend, one entry a line, in its own area below the plot (so it
/// never hides a bar or a line).
fn draw_legend(area: &Area<'_>, entries: &[Entry]) -> Result<(), String> {
    for (i, (name, colour, mark)) in entries.iter().enumerate() {
        let (x, y) = (100, 8 + 24 * i as i32);
        let mid = y + 9;
        match mark {
            Mark::Bar => area.draw(&Rectangle::new(
                [(x, mid - 7), (x + 24, mid + 7)],
                colour.filled(),
            )),
            Mark::Line => area.draw(&PathElement::new(
                [(x, mid), (x + 24, mid)],
                colour.stroke_width(3),
            )),
            Mark::Dashed => {
                for dx in [0, 10, 20] {
                    area.draw(&PathElement::new(
                        [(x + dx, mid), (x + dx + 5, mid)],
                        colour.stroke_width(2),
                    ))
                    .map_err(|e| e.to_string())?;
                }
                Ok(())
            }
        }
        .map_err(|e| e.to_string())?;
        area.draw(&Text::new(name.clone(), (x + 34, y), text(LABEL_PX)))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// MiB/s by record size: serial and PushBatch, against the bandwidth probe.
fn draw_sweep(
    path: &Path,
    subtitle: &[String],
    rows: &[&ReportRow],
    disk: Option<f64>,
) -> Result<(), String> {
    let series = sweep_series(rows);
    let limits = disk_limits(disk);
    let mut entries: Vec<Entry> = series
        .iter()
        .map(|s| (s.0.to_string(), s.1, Mark::Line))
        .collect();
    entries.extend(limits.iter().map(|l| (l.0.clone(), l.2, Mark::Dashed)));
    let all: Vec<f64> = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .chain(disk)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min) / 3.0;
    let hi = all.iter().copied().fold(0.0, f64::max) * 3.0;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| r.name.trim_start_matches("payload_sweep/").to_string())
        .collect();
    let legend = legend_px(entries.len());
    let root = SVGBackend::new(path, (WIDTH, 640 + legend)).into_drawing_area();
    let body = header(
        &root,
        "Payload sweep: MiB/s by record size (Sync)",
        subtitle,
    )?;
    let (plot, below) = body.split_vertically(body.dim_in_pixel().1 - legend);
    let n = rows.len();
    let mut chart = ChartBuilder::on(&plot)
        .margin(20)
        .margin_right(40)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d((0..n - 1).into_segmented(), (lo..hi).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(LIGHT)
        .max_light_lines(4)
        .x_labels(n)
        .x_label_formatter(&|v: &SegmentValue<usize>| match v {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_formatter(&|v: &f64| short(*v))
        .x_desc("record size (payload bytes)")
        .y_desc("MiB/s of payload acked (log scale)")
        .axis_desc_style(text(AXIS_PX))
        .label_style(text(LABEL_PX))
        .draw()
        .map_err(|e| e.to_string())?;
    for (_, v, colour) in &limits {
        let across = [(SegmentValue::Exact(0), *v), (SegmentValue::Last, *v)];
        chart
            .draw_series(DashedLineSeries::new(across, 8, 5, colour.stroke_width(2)))
            .map_err(|e| e.to_string())?;
    }
    for (_, colour, line, dy) in &series {
        let colour = *colour;
        chart
            .draw_series(LineSeries::new(line.clone(), colour.stroke_width(3)))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                line.iter()
                    .map(|p| Circle::new(p.clone(), 5, colour.filled())),
            )
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(line.iter().map(|(x, v)| {
                EmptyElement::at((x.clone(), *v))
                    + Text::new(
                        mib_text(*v),
                        (8, *dy),
                        (FONT, 15).into_font().color(&colour),
                    )
            }))
            .map_err(|e| e.to_string())?;
    }
    draw_legend(&below, &entries)?;
    root.present().map_err(|e| e.to_string())
}

/// One line of the payload sweep: its legend, colour, points and the
/// vertical offset of its value labels.
type SweepSeries = (&'static str, RGBColor, Vec<(SegmentValue<usize>, f64)>, i32);

/// The sweep's three ways of pushing, each a line over the record sizes.
fn sweep_series(rows: &[&ReportRow]) -> [SweepSeries; 3] {
    let points = |key: &str| -> Vec<(SegmentValue<usize>, f64)> {
        rows.iter()
            .enumerate()
            .filter_map(|(i, r)| {
                Some((SegmentValue::CenterOf(i), r.get(key).filter(|v| *v > 0.0)?))
            })
            .collect()
    };
    [
        (
            "PushBatch of up to 256 records (at most 1 MiB), 4 in flight",
            PURPLE,
            points("pipelined_mib_per_s"),
            -40,
        ),
        (
            "PushBatch of up to 256 records (at most 1 MiB), one at a time",
            BAR_BLUE,
            points("mib_per_s"),
            -22,
        ),
        (
            "serial Push, one record at a time",
            ORANGE,
            points("serial_mib_per_s"),
            6,
        ),
    ]
}

/// The dashed lines across the sweep: the disk probe's bandwidth and the
/// 64 KiB target (70% of it), when the probe ran.
fn disk_limits(disk: Option<f64>) -> Vec<(String, f64, RGBColor)> {
    let Some(disk) = disk else {
        return Vec::new();
    };
    vec![
        (
            format!("disk-bandwidth probe (1 MiB write + fdatasync): {disk:.0} MiB/s"),
            disk,
            DARK_RED,
        ),
        (
            format!(
                "target for 64KiB PushBatch, 4 in flight: 70% of the probe, {:.0} MiB/s",
                disk * 0.7
            ),
            disk * 0.7,
            GREEN_LINE,
        ),
    ]
}

/// Two panels over the seconds of a sustained run: records/s, fsync p99.
fn draw_sustained(
    path: &Path,
    subtitle: &[String],
    row: &ReportRow,
    t: &Timeline,
    fsync_probe_p99_us: Option<f64>,
) -> Result<(), String> {
    let root = SVGBackend::new(path, (WIDTH, 900)).into_drawing_area();
    let mut sub = subtitle.to_vec();
    if let (Some(first), Some(last), Some(drift)) = (
        row.get("fsync_p99_first_ms"),
        row.get("fsync_p99_last_ms"),
        row.get("fsync_p99_drift"),
    ) {
        sub.push(format!(
            "fsync p99 over the first 10% of the run {first:.3} ms, over the last 10% {last:.3} ms: drift {drift:.2}x"
        ));
    }
    let body = header(
        &root,
        &format!(
            "Sustained run of {}: throughput and fsync p99 per second",
            row.name
        ),
        &sub,
    )?;
    let (upper, lower) = body.split_vertically(body.dim_in_pixel().1 / 2);
    let end = t.seconds.last().copied().unwrap_or(1.0).max(1.0);
    let rates: Vec<(f64, f64)> = t
        .seconds
        .iter()
        .copied()
        .zip(t.records_per_s.iter().copied())
        .collect();
    let top = rates.iter().map(|p| p.1).fold(0.0, f64::max) * 1.15;
    line_panel(
        &upper,
        Panel {
            x_end: end,
            y_top: top.max(1.0),
            y_desc: "records/s (written by the daemon)",
            x_desc: "seconds since the run started",
            name: "records/s",
            colour: BAR_BLUE,
            points: rates,
            limit: None,
        },
    )?;
    let p99: Vec<(f64, f64)> = t
        .seconds
        .iter()
        .zip(&t.fsync_p99_ms)
        .filter_map(|(s, p)| Some((*s, (*p)?)))
        .collect();
    let probe_ms = fsync_probe_p99_us.map(|us| us / 1000.0);
    let top = p99.iter().map(|p| p.1).chain(probe_ms).fold(0.0, f64::max) * 1.15;
    line_panel(
        &lower,
        Panel {
            x_end: end,
            y_top: top.max(0.01),
            y_desc: "fsync p99 (ms)",
            x_desc: "seconds since the run started",
            name: "fsync p99 of each second (spillway_fsync_seconds)",
            colour: DARK_RED,
            points: p99,
            limit: probe_ms.map(|ms| {
                (
                    format!("disk probe fsync p99 before the run: {ms:.3} ms"),
                    ms,
                    GREY,
                )
            }),
        },
    )?;
    root.present().map_err(|e| e.to_string())
}

/// One line chart over seconds, from 0 on both axes.
struct Panel<'a> {
    x_end: f64,
    y_top: f64,
    y_desc: &'a str,
    x_desc: &'a str,
    /// The line: its name, colour and points (seconds, value).
    name: &'a str,
    colour: RGBColor,
    points: Vec<(f64, f64)>,
    /// A horizontal reference line: name, value, colour.
    limit: Option<(String, f64, RGBColor)>,
}

fn line_panel(area: &Area<'_>, p: Panel) -> Result<(), String> {
    let mut entries: Vec<Entry> = vec![(p.name.to_string(), p.colour, Mark::Line)];
    entries.extend(p.limit.iter().map(|l| (l.0.clone(), l.2, Mark::Dashed)));
    let legend = legend_px(entries.len());
    let (plot, below) = area.split_vertically(area.dim_in_pixel().1 - legend);
    let mut chart = ChartBuilder::on(&plot)
        .margin(20)
        .margin_right(40)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..p.x_end, 0.0..p.y_top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .light_line_style(LIGHT)
        .max_light_lines(4)
        .x_label_formatter(&|v: &f64| format!("{v:.0}"))
        .y_label_formatter(&|v: &f64| short(*v))
        .x_desc(p.x_desc)
        .y_desc(p.y_desc)
        .axis_desc_style(text(AXIS_PX))
        .label_style(text(LABEL_PX))
        .draw()
        .map_err(|e| e.to_string())?;
    if let Some((_, v, colour)) = &p.limit {
        let across = [(0.0, *v), (p.x_end, *v)];
        chart
            .draw_series(DashedLineSeries::new(across, 8, 5, colour.stroke_width(2)))
            .map_err(|e| e.to_string())?;
    }
    let colour = p.colour;
    chart
        .draw_series(LineSeries::new(p.points.clone(), colour.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(
            p.points
                .iter()
                .map(|&pt| Circle::new(pt, 3, colour.filled())),
        )
        .map_err(|e| e.to_string())?;
    draw_legend(&below, &entries)
}
