//! What the bench says on stderr while it runs. On a terminal: one
//! progress bar (indicatif) with the step it is on (probe or scenario, and
//! the repeat), how many steps are done and the elapsed time, with the
//! per-repeat result lines printed above it. Anywhere else (a pipe, a file,
//! CI): only those plain `bench: ...` lines, one per finished run.
//!
//! Every module prints through [`line`], so a line never tears the bar.
//! The bar is process-wide (one bench runs at a time): [`start`] makes it,
//! [`finish`] clears it before the tables go to stdout.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar while a bench runs on a terminal; `None` otherwise.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// How often the bar redraws by itself, so the elapsed time moves during a
/// long step.
const TICK: Duration = Duration::from_millis(250);

fn with_bar<R>(f: impl FnOnce(Option<&ProgressBar>) -> R) -> R {
    let guard = BAR.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.as_ref())
}

/// Starts the bar for `steps` steps, if stderr is a terminal.
pub fn start(steps: u64) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] [{bar:30}] {pos}/{len} steps  {msg}",
    )
    .expect("a valid progress template")
    .progress_chars("=> ");
    let bar =
        ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr()).with_style(style);
    bar.enable_steady_tick(TICK);
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
}

/// Names the step now running: `name, repeat round/repeat`.
pub fn step(name: &str, round: usize, repeat: usize) {
    with_bar(|bar| {
        if let Some(bar) = bar {
            bar.set_message(format!("{name}, repeat {round}/{repeat}"));
        }
    });
}

/// Names a part of the step now running (a record size of the payload
/// sweep), after the step's own name.
pub fn detail(name: &str, round: usize, repeat: usize, part: &str) {
    with_bar(|bar| {
        if let Some(bar) = bar {
            bar.set_message(format!("{name} {part}, repeat {round}/{repeat}"));
        }
    });
}

/// `steps` more steps are done (more than one when the rest of a
/// scenario's repeats are skipped).
pub fn advance(steps: u64) {
    with_bar(|bar| {
        if let Some(bar) = bar {
            bar.inc(steps);
        }
    });
}

/// A `bench: ...` line on stderr (above the bar, when there is one).
pub fn line(text: &str) {
    with_bar(|bar| match bar {
        Some(bar) => bar.println(format!("bench: {text}")),
        None => eprintln!("bench: {text}"),
    });
}

/// Removes the bar (the steps are done, or the bench stops early).
pub fn finish() {
    if let Some(bar) = BAR.lock().unwrap_or_else(|e| e.into_inner()).take() {
        bar.finish_and_clear();
    }
}
