//! The [`HostApi`] given to plugins: their log lines become `tracing`
//! events carrying the plugin's name, and the shard's number when the
//! plugin logs from a call the shard's drain made ([`ShardScope`]).

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use sink_sdk::abi::{HostApi, Level, ABI_VERSION};

/// Longest log line taken from a plugin, in bytes; the rest is cut.
const LOG_LINE_BYTES_MAX: usize = 16 * 1024;

thread_local! {
    /// The shard whose sink instance this thread is calling into, if any.
    static SHARD: Cell<Option<u32>> = const { Cell::new(None) };
}

/// While alive, the plugin's log lines from this thread carry `shard`.
pub(crate) struct ShardScope(Option<u32>);

impl ShardScope {
    pub(crate) fn enter(shard: Option<u32>) -> ShardScope {
        ShardScope(SHARD.replace(shard))
    }
}

impl Drop for ShardScope {
    fn drop(&mut self) {
        SHARD.set(self.0);
    }
}

/// What `HostApi::ctx` points to.
struct LogContext {
    plugin: String,
}

/// A `HostApi` naming `plugin`, valid for the rest of the process (one per
/// loaded library, which is never unloaded either).
pub(crate) fn host_api(plugin: &str) -> &'static HostApi {
    let ctx: &'static LogContext = Box::leak(Box::new(LogContext {
        plugin: plugin.to_string(),
    }));
    Box::leak(Box::new(HostApi {
        abi_version: ABI_VERSION,
        ctx: ctx as *const LogContext as *mut c_void,
        log: Some(log),
        log_enabled: Some(log_enabled),
    }))
}

/// Text borrowed from the plugin, copied, lossily, at most `max` bytes.
///
/// # Safety
/// `ptr` is null or points to `len` readable bytes.
unsafe fn text(ptr: *const u8, len: usize, max: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    let bytes = std::slice::from_raw_parts(ptr, len.min(max));
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    if len > max {
        text.push_str(" [cut]");
    }
    text
}

/// `HostApi::log`. Never unwinds into the plugin.
unsafe extern "C" fn log(
    ctx: *mut c_void,
    level: u8,
    target: *const u8,
    target_len: usize,
    msg: *const u8,
    msg_len: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the LogContext leaked by host_api.
        let plugin = unsafe { &(*(ctx as *const LogContext)).plugin };
        let module = unsafe { text(target, target_len, 256) };
        let msg = unsafe { text(msg, msg_len, LOG_LINE_BYTES_MAX) };
        let shard = SHARD.get();
        macro_rules! emit {
            ($level:ident) => {
                match shard {
                    Some(shard) => {
                        tracing::$level!(shard, plugin = %plugin, module = %module, "{msg}")
                    }
                    None => tracing::$level!(plugin = %plugin, module = %module, "{msg}"),
                }
            };
        }
        match Level::from_u8(level) {
            Level::Error => emit!(error),
            Level::Warn => emit!(warn),
            Level::Info => emit!(info),
            Level::Debug => emit!(debug),
            Level::Trace => emit!(trace),
        }
    }));
}

/// `HostApi::log_enabled`: would `log` at this level reach a subscriber?
unsafe extern "C" fn log_enabled(_ctx: *mut c_void, level: u8) -> bool {
    catch_unwind(|| match Level::from_u8(level) {
        Level::Error => tracing::enabled!(tracing::Level::ERROR),
        Level::Warn => tracing::enabled!(tracing::Level::WARN),
        Level::Info => tracing::enabled!(tracing::Level::INFO),
        Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
        Level::Trace => tracing::enabled!(tracing::Level::TRACE),
    })
    .unwrap_or(true)
}
