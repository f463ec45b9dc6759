//! Panics through the log, once. Rust's default hook prints a panic's raw
//! text to stderr, whatever `log.format` says, and a caught panic was then
//! logged again by whoever caught it. The daemon installs [`install_hook`]
//! at its start: a panic is one ERROR line through `tracing`, with its
//! location and thread, unless it happens inside [`catch`] on its thread:
//! then the hook only notes where it happened and the caller, which knows
//! what was running (a sink, its shard), logs it once with that location.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};

thread_local! {
    /// Whether this thread runs inside [`catch`].
    static CATCHING: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic inside [`catch`] happened.
    static CAUGHT_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the daemon's panic hook (see the module documentation).
pub fn install_hook() {
    std::panic::set_hook(Box::new(|info: &PanicHookInfo<'_>| {
        let at = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
        if CATCHING.try_with(Cell::get).unwrap_or(false) {
            let _ = CAUGHT_AT.try_with(|c| *c.borrow_mut() = at);
            return;
        }
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            at = at.as_deref().unwrap_or("unknown"),
            "panicked: {}",
            sink_sdk::abi::panic_text(info.payload())
        );
    }));
}

/// Runs `f`, catching a panic: `Err` holds its message, with where it
/// happened when the daemon's hook saw it (`... (at src/x.rs:1:2)`). A
/// panic resumed with [`std::panic::resume_unwind`] (a plugin's, caught
/// at its own boundary, which says where) passes no hook.
pub fn catch<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let outer = CATCHING.with(|c| c.replace(true));
    CAUGHT_AT.with(|c| c.borrow_mut().take());
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(outer));
    result.map_err(|payload| {
        let text = sink_sdk::abi::panic_text(&*payload).to_string();
        match CAUGHT_AT.with(|c| c.borrow_mut().take()) {
            Some(at) => format!("{text} (at {at})"),
            None => text,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_says_what_and_where_once_the_hook_is_in() {
        let plain = catch(|| -> u32 { panic!("no hook here") });
        assert_eq!(plain, Err("no hook here".to_string()));
        assert_eq!(catch(|| 7), Ok(7));
        let resumed = catch(|| -> u32 {
            std::panic::resume_unwind(Box::new("from a plugin (at its own place)".to_string()))
        });
        assert_eq!(
            resumed,
            Err("from a plugin (at its own place)".to_string()),
            "a resumed panic passes no hook"
        );
    }
}
