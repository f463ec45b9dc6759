//! `spillway bench --charts DIR` against the real binary: the SVG files it
//! writes parse as XML (a small well-formedness check below: balanced tags,
//! quoted attributes, known entities, one root), have an `<svg>` root and
//! carry their titles. The run is as short as the charts allow: `--quick`,
//! one repeat, `single_thread_sync` (for the throughput and latency
//! charts, and sustained mode at `--duration 10`, the shortest that turns
//! it on) and `payload_sweep`. No figure is asserted: timing belongs to
//! the bench, not to a test.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use spillway_tests::run_spillway;

/// A liveness bound only: the run takes about 15 s.
const BENCH_TIMEOUT: Duration = Duration::from_secs(240);

/// What the well-formedness check found: the root element's name and all
/// the character data (attribute values left out), entities decoded.
#[derive(Debug)]
struct Parsed {
    root: String,
    text: String,
}

fn decode_entity(name: &str) -> Result<char, String> {
    let named = match name {
        "lt" => Some('<'),
        "gt" => Some('>'),
        "amp" => Some('&'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    };
    if let Some(c) = named {
        return Ok(c);
    }
    let code = if let Some(hex) = name.strip_prefix("#x") {
        u32::from_str_radix(hex, 16).ok()
    } else if let Some(dec) = name.strip_prefix('#') {
        dec.parse().ok()
    } else {
        None
    };
    code.and_then(char::from_u32)
        .ok_or_else(|| format!("unknown entity &{name};"))
}

/// Character data with its entities decoded; a bare `&` or a `<` is an error.
fn char_data(raw: &str, at: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(i) = rest.find(['&', '<']) {
        out.push_str(&rest[..i]);
        if rest[i..].starts_with('<') {
            return Err(format!("a '<' in character data near byte {at}"));
        }
        let end = rest[i..]
            .find(';')
            .ok_or_else(|| format!("an '&' with no ';' near byte {at}"))?;
        out.push(decode_entity(&rest[i + 1..i + end])?);
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || "_:-.".contains(c))
}

/// The inside of a start tag (`name a="1" b='2'`, no `<`, `>` or `/`):
/// its name; every attribute must be `name="value"` or `name='value'`,
/// once each.
fn start_tag(inside: &str, at: usize) -> Result<String, String> {
    let inside = inside.trim_end();
    let name_end = inside
        .find(|c: char| c.is_ascii_whitespace())
        .unwrap_or(inside.len());
    let name = &inside[..name_end];
    if !is_name(name) {
        return Err(format!("bad element name {name:?} near byte {at}"));
    }
    let mut rest = inside[name_end..].trim_start();
    let mut seen = Vec::new();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("attribute without a value in <{name}> near byte {at}"))?;
        let attr = rest[..eq].trim();
        if !is_name(attr) || seen.contains(&attr) {
            return Err(format!("bad or repeated attribute {attr:?} in <{name}>"));
        }
        seen.push(attr);
        let value = rest[eq + 1..].trim_start();
        let quote = value
            .chars()
            .next()
            .filter(|q| *q == '"' || *q == '\'')
            .ok_or_else(|| format!("unquoted attribute {attr:?} in <{name}>"))?;
        let close = value[1..]
            .find(quote)
            .ok_or_else(|| format!("unclosed attribute {attr:?} in <{name}>"))?;
        char_data(&value[1..1 + close], at)?;
        rest = value[close + 2..].trim_start();
    }
    Ok(name.to_string())
}

/// Parses `xml` far enough to tell whether it is well-formed.
fn well_formed(xml: &str) -> Result<Parsed, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut root: Option<String> = None;
    let mut text = String::new();
    let mut pos = 0;
    while pos < xml.len() {
        let rest = &xml[pos..];
        let Some(lt) = rest.find('<') else {
            if !rest.trim().is_empty() && stack.is_empty() {
                return Err(format!("text after the root element at byte {pos}"));
            }
            text.push_str(&char_data(rest, pos)?);
            break;
        };
        let data = &rest[..lt];
        if stack.is_empty() && !data.trim().is_empty() {
            return Err(format!("text outside the root element at byte {pos}"));
        }
        text.push_str(&char_data(data, pos)?);
        pos += lt;
        let rest = &xml[pos..];
        let (close_at, skip) = if rest.starts_with("<!--") {
            (rest.find("-->").map(|i| i + 3), true)
        } else if rest.starts_with("<?") {
            (rest.find("?>").map(|i| i + 2), true)
        } else {
            (rest.find('>').map(|i| i + 1), false)
        };
        let end = close_at.ok_or_else(|| format!("unclosed markup at byte {pos}"))?;
        let tag = &rest[..end];
        pos += end;
        if skip {
            continue;
        }
        if let Some(name) = tag.strip_prefix("</") {
            let name = name.trim_end_matches('>').trim();
            match stack.pop() {
                Some(open) if open == name => {}
                Some(open) => return Err(format!("</{name}> closes <{open}> at byte {pos}")),
                None => return Err(format!("</{name}> with nothing open at byte {pos}")),
            }
            continue;
        }
        let inner = &tag[1..tag.len() - 1];
        let (inner, empty) = match inner.strip_suffix('/') {
            Some(i) => (i, true),
            None => (inner, false),
        };
        let name = start_tag(inner, pos)?;
        if stack.is_empty() {
            if root.is_some() {
                return Err(format!("a second root element <{name}> at byte {pos}"));
            }
            root = Some(name.clone());
        }
        if !empty {
            stack.push(name);
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> is never closed"));
    }
    let root = root.ok_or("no root element")?;
    Ok(Parsed { root, text })
}

#[test]
fn the_well_formedness_check_rejects_what_is_not_xml() {
    let ok = well_formed(
        "<?xml version=\"1.0\"?>\n<svg a=\"1\" b='x &amp; y'><text>µs &lt; 5</text><rect/></svg>\n",
    )
    .unwrap();
    assert_eq!(ok.root, "svg");
    assert!(ok.text.contains("µs < 5"), "{ok:?}");
    for bad in [
        "<svg><text>unclosed</svg>",
        "<svg><g></svg></g>",
        "<svg a=1></svg>",
        "<svg a=\"1\" a=\"2\"></svg>",
        "<svg>a & b</svg>",
        "<svg>&nbsp;</svg>",
        "<svg></svg><svg></svg>",
        "<svg></svg> trailing",
        "<svg><text",
        "",
    ] {
        assert!(well_formed(bad).is_err(), "accepted {bad:?}");
    }
}

fn read(dir: &Path, file: &str) -> String {
    let path = dir.join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn quick_bench_writes_svg_charts_that_parse_and_carry_their_titles() {
    let tmp = tempfile::tempdir().unwrap();
    let charts = tmp.path().join("charts");
    let args: Vec<&OsStr> = vec![
        "bench".as_ref(),
        "--quick".as_ref(),
        "--repeat".as_ref(),
        "1".as_ref(),
        "--duration".as_ref(),
        "10".as_ref(),
        "--scenario".as_ref(),
        "single_thread_sync".as_ref(),
        "--scenario".as_ref(),
        "payload_sweep".as_ref(),
        "--data-dir".as_ref(),
        tmp.path().as_os_str(),
        "--charts".as_ref(),
        charts.as_os_str(),
    ];
    let run = run_spillway(&args, BENCH_TIMEOUT);
    assert!(
        run.status.success(),
        "bench exited with {}\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
    // Not a terminal: plain progress lines, no bar.
    assert!(
        run.stderr.contains("bench: single_thread_sync"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("steps"), "{}", run.stderr);
    // The sweep's rows, the bandwidth probe and the new target are in the tables.
    for needle in [
        "payload_sweep/5B",
        "payload_sweep/64KiB",
        "disk_bandwidth",
        "mib_per_s",
        "with 4 in flight",
        "fsync p99 first/last 10%",
    ] {
        assert!(
            run.stdout.contains(needle),
            "no {needle:?} in:\n{}",
            run.stdout
        );
    }
    let target = run
        .stdout
        .lines()
        .find(|l| l.contains("payload_sweep/64KiB PushBatch, 4 in flight, MiB/s >= 70%"))
        .unwrap_or_else(|| panic!("no 64KiB target in:\n{}", run.stdout));
    assert!(!target.starts_with("SKIP"), "{target}");
    let expected = [
        ("throughput.svg", "Throughput per scenario"),
        ("latency.svg", "Latency percentiles per scenario"),
        ("payload_sweep.svg", "Payload sweep: MiB/s by record size"),
        (
            "sustained_single_thread_sync.svg",
            "Sustained run of single_thread_sync",
        ),
    ];
    for (file, title) in expected {
        let svg = read(&charts, file);
        let parsed = well_formed(&svg).unwrap_or_else(|e| panic!("{file} is not XML: {e}"));
        assert_eq!(parsed.root, "svg", "{file}");
        assert!(parsed.text.contains(title), "{file} has no title {title:?}");
        assert!(
            run.stdout
                .contains(&charts.join(file).display().to_string()),
            "{file} is not listed on stdout:\n{}",
            run.stdout
        );
    }
    // Axis labels with units, where a reader looks for them.
    assert!(read(&charts, "throughput.svg").contains("records/s (log scale)"));
    assert!(read(&charts, "payload_sweep.svg").contains("disk-bandwidth probe"));
    assert!(read(&charts, "sustained_single_thread_sync.svg").contains("fsync p99 (ms)"));
}
