//! Logging that can never take the daemon down, its two layouts
//! (`log.format`), when it is coloured, and the check of `log.level`.
//!
//! A log line is written to stderr by whichever thread logs it: a flusher,
//! a drain, a connection's arbiter. If stderr is a pipe whose reader has
//! gone (EPIPE) or a file on a full disk (ENOSPC), the standard writers
//! panic or return an error that tracing turns into a panic; measured
//! before this module existed, one bad-magic frame from any client then
//! aborted the daemon, and SIGTERM never completed. Here a failed write is
//! dropped and counted ([`log_write_failures`], exported as a metric), and
//! the caller always sees success.
//!
//! Colour (ANSI escape codes) only when stderr is a terminal and `NO_COLOR`
//! is not set: a log file or the journal must read as plain text. The JSON
//! layout is tracing-subscriber's own (`timestamp`, `level`, `fields` with
//! `message`, `target`), one object per line; docs/operations.md shows it.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Log writes (lines, or parts of lines) that failed and were dropped.
static LOG_WRITE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// How many log writes failed since the start (EPIPE, ENOSPC, ...).
pub fn log_write_failures() -> u64 {
    LOG_WRITE_FAILURES.load(Ordering::Relaxed)
}

/// A writer over stderr or stdout that never fails.
pub struct Forgiving<W>(W);

impl<W: Write> Write for Forgiving<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.0.write_all(buf).is_err() {
            LOG_WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.0.flush().is_err() {
            LOG_WRITE_FAILURES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Hands tracing a [`Forgiving`] stderr for every line.
#[derive(Clone, Copy, Default)]
pub struct ForgivingStderr;

impl<'a> MakeWriter<'a> for ForgivingStderr {
    type Writer = Forgiving<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Forgiving(io::stderr())
    }
}

/// Print a line to stdout; a closed or full stdout is counted, not fatal.
pub fn say(line: &str) {
    let mut out = Forgiving(io::stdout());
    let _ = out.write_all(line.as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Print to stderr without ever failing (error paths of the CLI).
pub fn say_err(line: &str) {
    let mut err = Forgiving(io::stderr());
    let _ = err.write_all(line.as_bytes());
    let _ = err.write_all(b"\n");
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Whether `level` is a filter tracing accepts *and* means what it looks
/// like; the error names the key. tracing reads an unknown word such as
/// `verbose!!` as the name of a log target, which turns every other line
/// off (errors included), so each directive must be a level, a module path,
/// or `module=level`.
pub fn check_level(level: &str) -> Result<(), String> {
    let bad = |why: String| {
        format!(
            "{level:?}: {why}; use a level ({}) or directives such as \"info,spillway=debug\"",
            LEVELS.join(", ")
        )
    };
    if level.trim().is_empty() {
        return Err(bad("must not be empty".into()));
    }
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if directive.contains('[') {
            continue; // span directives: left to tracing's own parser below
        }
        let (target, lvl) = match directive.split_once('=') {
            Some((t, l)) => (Some(t), Some(l)),
            None if is_level(directive) => (None, Some(directive)),
            None => (Some(directive), None),
        };
        if let Some(t) = target.filter(|t| !is_module_path(t)) {
            return Err(bad(format!("{t:?} is neither a level nor a module path")));
        }
        if let Some(l) = lvl.filter(|l| !is_level(l)) {
            return Err(bad(format!("{l:?} is not a level{}", near_level(l))));
        }
        // A bare target logs that target alone and turns every other line
        // off, errors included: taken only when it names one of the
        // daemon's own crates or a module path (`a::b`); anything else is
        // a misspelt level (`debg`) or a mistake.
        if let Some(t) = target.filter(|t| lvl.is_none() && !t.contains("::")) {
            if !OWN_TARGETS.contains(&t) {
                return Err(bad(format!(
                    "{t:?} is not a level{}; a bare target logs only that target and turns \
                     every other line off (write `{t}=LEVEL` beside a level to add one)",
                    near_level(t)
                )));
            }
        }
    }
    EnvFilter::builder()
        .with_regex(false)
        .parse(level)
        .map(|_| ())
        .map_err(|e| bad(format!("not a valid filter ({e})")))
}

/// The daemon's own crates: a bare target naming one of them is taken.
const OWN_TARGETS: [&str; 8] = [
    "spillway",
    "spillway_actors",
    "spillway_wab",
    "spillway_sinks",
    "spillway_protocol",
    "spillway_ctl",
    "spillway_bench",
    "sink_sdk",
];

/// ` (did you mean "debug"?)` when `word` is close to a level.
fn near_level(word: &str) -> String {
    let lower = word.trim().to_ascii_lowercase();
    spillway_sinks::suggest::closest(&lower, &LEVELS)
        .map(|l| format!(" (did you mean {l:?}?)"))
        .unwrap_or_default()
}

fn is_level(word: &str) -> bool {
    LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word.trim()))
}

/// `a`, `a_b::c`: what a tracing target written by hand looks like.
fn is_module_path(word: &str) -> bool {
    !word.is_empty()
        && word.split("::").all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// `log.format`: how each log line is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "String")]
pub enum LogFormat {
    /// One readable line per event: time, level, target, message, fields.
    #[default]
    Text,
    /// One JSON object per line, for a log collector.
    Json,
}

impl TryFrom<String> for LogFormat {
    type Error = String;

    fn try_from(word: String) -> Result<LogFormat, String> {
        match word.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "log.format = {other:?} is not a log format: use \"text\" or \"json\"{}",
                spillway_sinks::suggest::closest(other, &["text", "json"])
                    .map(|w| format!(" (did you mean {w:?}?)"))
                    .unwrap_or_default()
            )),
        }
    }
}

/// Whether log lines carry colour: only on a terminal, and never while
/// `NO_COLOR` is set (to any value, the empty string included).
pub fn wants_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none()
}

/// Install the global subscriber. `RUST_LOG`, when set and valid, overrides
/// `level`; an invalid `RUST_LOG` is reported and ignored.
pub fn init(level: &str, format: LogFormat) {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let mut bad_env = None;
    let filter = match from_env {
        Some(v) => match EnvFilter::builder().with_regex(false).parse(&v) {
            Ok(f) => f,
            Err(e) => {
                bad_env = Some(format!(
                    "RUST_LOG = {v:?} is not a valid filter ({e}); using log.level"
                ));
                EnvFilter::new(level)
            }
        },
        None => EnvFilter::new(level),
    };
    let colour = wants_colour(io::stderr().is_terminal(), std::env::var_os("NO_COLOR"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(ForgivingStderr);
    match format {
        LogFormat::Text => builder.with_ansi(colour).init(),
        LogFormat::Json => builder.with_ansi(false).json().init(),
    }
    if let Some(msg) = bad_env {
        tracing::warn!("{msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from_raw_os_error(libc::EPIPE))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EPIPE))
        }
    }

    #[test]
    fn a_broken_writer_is_counted_not_fatal() {
        let before = log_write_failures();
        let mut w = Forgiving(Broken);
        assert_eq!(w.write(b"a line\n").unwrap(), 7);
        w.flush().unwrap();
        assert_eq!(log_write_failures(), before + 2);
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(wants_colour(true, None));
        assert!(!wants_colour(false, None));
        assert!(!wants_colour(true, Some("1".into())));
        assert!(!wants_colour(true, Some("".into())));
    }

    #[test]
    fn formats_are_named() {
        assert_eq!(LogFormat::try_from("json".to_string()), Ok(LogFormat::Json));
        assert_eq!(LogFormat::try_from("text".to_string()), Ok(LogFormat::Text));
        let err = LogFormat::try_from("xml".to_string()).unwrap_err();
        assert!(
            err.contains("log.format") && err.contains("\"text\" or \"json\""),
            "{err}"
        );
    }

    #[test]
    fn levels_are_checked() {
        check_level("info").unwrap();
        check_level("warn,spillway=debug").unwrap();
        check_level("spillway_actors::ingest::connection=trace").unwrap();
        assert!(check_level("info,spillway=loud")
            .unwrap_err()
            .contains("\"loud\" is not a level"));
        let err = check_level("verbose!!").unwrap_err();
        assert!(err.contains("\"verbose!!\" is neither a level"), "{err}");
        assert!(check_level("  ").unwrap_err().contains("must not be empty"));
        // A misspelt level would be read as a target and silence every line.
        let err = check_level("debg").unwrap_err();
        assert!(
            err.contains("\"debg\" is not a level (did you mean \"debug\"?)"),
            "{err}"
        );
        let err = check_level("info,spillway=wran").unwrap_err();
        assert!(err.contains("(did you mean \"warn\"?)"), "{err}");
        let err = check_level("verbose").unwrap_err();
        assert!(err.contains("a bare target logs only that target"), "{err}");
        // The daemon's own crates, and module paths, are taken bare.
        check_level("spillway_actors").unwrap();
        check_level("spillway_actors::drain").unwrap();
        assert_eq!(
            LogFormat::try_from("jsno".to_string()).unwrap_err(),
            "log.format = \"jsno\" is not a log format: use \"text\" or \"json\" (did you mean \"json\"?)"
        );
    }
}
