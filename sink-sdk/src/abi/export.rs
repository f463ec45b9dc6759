//! The plugin side of the ABI: the `extern "C"` functions that
//! [`export_sink!`](crate::export_sink) puts in a plugin's vtable, generic
//! over the plugin's sink type.
//!
//! Every function body runs inside `catch_unwind` (`guarded`): a panic
//! must never unwind into the host (that aborts the daemon). Per batch they
//! allocate nothing per record: the `Record` views are built in a buffer
//! the instance keeps from one batch to the next.
//!
//! The plugin links its own copy of std, with its own panic hook, which
//! would print a caught panic's raw text to the daemon's stderr (whatever
//! `log.format` says). At the first `create`, a hook is installed that
//! prints nothing for a panic raised inside an entry point: it notes
//! where, and the entry point answers with the message and that place
//! (`... (at src/lib.rs:10:5)`), which the daemon logs once, with the
//! plugin and the shard. Any other panic (e.g. on a thread the plugin
//! spawned) goes to the host's log when it has one, else to the previous
//! hook.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe, PanicHookInfo};
use std::ptr;
use std::sync::Once;
use std::time::Duration;

use super::{
    set_host, HostApi, Level, OwnedStr, PluginSink, RawContext, RawLimits, RawOutcome, RawRecord,
    CALL_BAD_ARGUMENT, CALL_OK, CALL_PANICKED, CREATE_PANICKED, DELIVER_PANICKED, HEALTH_OK,
    HEALTH_PANICKED, HEALTH_UNHEALTHY, OUTCOME_COMMITTED, OUTCOME_INTERNAL_ERROR, OUTCOME_RETRY,
    OUTCOME_SPLIT, RECORD_COMMITTED, RECORD_REJECTED, RECORD_RETRY, RETRY_AFTER_NONE,
};
use crate::{Batch, Health, Outcome, Record, RecordOutcome};

/// What a plugin instance pointer points to.
struct Instance<T> {
    sink: T,
    /// The batch's `Record` views, reused from batch to batch (empty
    /// between calls: the views are valid only during `deliver`).
    records: Vec<Record<'static>>,
}

impl<T: PluginSink> Instance<T> {
    fn deliver(&mut self, raw: &[RawRecord]) -> Outcome {
        let mut views = std::mem::take(&mut self.records);
        views.clear();
        // SAFETY: the host keeps every payload valid for the whole call, and
        // `views` is emptied before the call returns (on a panic it is
        // dropped): the 'static is never observed past the call. The sink
        // sees them as `Record<'batch>` only.
        views.extend(
            raw.iter()
                .map(|r| -> Record<'static> { unsafe { r.as_record() } }),
        );
        let shard = raw.first().map_or(0, |r| r.shard);
        let outcome = self.sink.deliver(&Batch::new(shard, &views));
        views.clear();
        self.records = views;
        outcome
    }
}

thread_local! {
    /// Whether this thread is inside one of the entry points below.
    static IN_ENTRY_POINT: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic inside an entry point happened.
    static PANICKED_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs `f` as the body of an entry point: panics are caught, and reported
/// through the host's log by the hook.
fn guarded<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    let outer = IN_ENTRY_POINT.with(|c| c.replace(true));
    PANICKED_AT.with(|c| c.borrow_mut().take());
    let result = catch_unwind(AssertUnwindSafe(f));
    IN_ENTRY_POINT.with(|c| c.set(outer));
    result
}

/// Installs the panic hook described in the module documentation, once,
/// when a host that can log is known.
fn install_panic_hook(host: *const HostApi) {
    static INSTALLED: Once = Once::new();
    // SAFETY: a host keeps its HostApi valid until the process exits.
    let logs = unsafe { host.as_ref() }.is_some_and(|h| h.log.is_some());
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info: &PanicHookInfo<'_>| {
            let at = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
            if IN_ENTRY_POINT.try_with(Cell::get).unwrap_or(false) {
                let _ = PANICKED_AT.try_with(|c| *c.borrow_mut() = at);
                return;
            }
            if !logs {
                return previous(info);
            }
            let payload = info.payload();
            let text = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("non-string panic payload");
            let thread = std::thread::current();
            let msg = format!(
                "panicked on the plugin's thread {} at {}: {text}",
                thread.name().unwrap_or("unnamed"),
                at.as_deref().unwrap_or("an unknown place")
            );
            super::log_target(Level::Error, "panic", &msg);
        }));
    });
}

/// The text of a panic payload, which is then dropped inside
/// `catch_unwind`: a payload whose `Drop` panics must not unwind out of
/// the `extern "C"` caller, and only that second payload is leaked (it was
/// leaked every time before: a few bytes per panic, for good, in a plugin
/// that panics on every batch).
pub(super) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let text = super::panic_text(&*payload).to_string();
    if let Err(nested) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(nested);
    }
    match PANICKED_AT.with(|c| c.borrow_mut().take()) {
        Some(at) => format!("{text} (at {at})"),
        None => text,
    }
}

/// Writes `text` to an out-parameter the host provided (if any).
///
/// # Safety
/// `out` is null or valid for a write.
unsafe fn write_str(out: *mut OwnedStr, text: String) {
    if !out.is_null() {
        out.write(OwnedStr::from_string(text));
    }
}

/// The answer a Rust `Outcome` becomes across the boundary.
fn raw_outcome(outcome: Outcome) -> RawOutcome {
    match outcome {
        Outcome::Committed => RawOutcome {
            kind: OUTCOME_COMMITTED,
            ..RawOutcome::UNSET
        },
        Outcome::Retry { after, reason } => RawOutcome {
            kind: OUTCOME_RETRY,
            retry_after_ms: after.map_or(RETRY_AFTER_NONE, retry_after_ms),
            reason: OwnedStr::from_string(reason),
            ..RawOutcome::UNSET
        },
        Outcome::Split(outcomes) => {
            let mut codes = Vec::with_capacity(outcomes.len());
            let mut reasons = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                let (code, reason) = match outcome {
                    RecordOutcome::Committed => (RECORD_COMMITTED, OwnedStr::EMPTY),
                    RecordOutcome::Rejected(why) => (RECORD_REJECTED, OwnedStr::from_string(why)),
                    RecordOutcome::Retry => (RECORD_RETRY, OwnedStr::EMPTY),
                };
                codes.push(code);
                reasons.push(reason);
            }
            let records_len = codes.len();
            RawOutcome {
                kind: OUTCOME_SPLIT,
                record_codes: Box::into_raw(codes.into_boxed_slice()).cast::<u8>(),
                record_reasons: Box::into_raw(reasons.into_boxed_slice()).cast::<OwnedStr>(),
                records_len,
                ..RawOutcome::UNSET
            }
        }
    }
}

/// Milliseconds of a retry-after, never the "none" value.
fn retry_after_ms(after: Duration) -> u64 {
    u64::try_from(after.as_millis()).map_or(RETRY_AFTER_NONE - 1, |ms| ms.min(RETRY_AFTER_NONE - 1))
}

/// `create`: see [`CreateFn`](super::CreateFn).
///
/// # Safety
/// Called by a host through the vtable, with arguments as the ABI says.
pub unsafe extern "C" fn create<T: PluginSink + 'static>(
    options_toml: *const u8,
    options_len: usize,
    host: *const HostApi,
    out_error: *mut OwnedStr,
) -> *mut c_void {
    create_with::<T>(options_toml, options_len, host, out_error, T::create)
}

/// `create_in`: see [`CreateInFn`](super::CreateInFn).
///
/// # Safety
/// Called by a host through the extension, with arguments as the ABI says.
pub unsafe extern "C" fn create_in<T: PluginSink + 'static>(
    options_toml: *const u8,
    options_len: usize,
    host: *const HostApi,
    context: *const RawContext,
    out_error: *mut OwnedStr,
) -> *mut c_void {
    let Some(context) = context.as_ref() else {
        write_str(
            out_error,
            "create_in was called without a context".to_string(),
        );
        return ptr::null_mut();
    };
    let context = context.to_context();
    create_with::<T>(options_toml, options_len, host, out_error, |text| {
        T::create_in(text, &context)
    })
}

/// The body of both: the options as text, `make` run guarded, the
/// instance boxed or the reason written.
unsafe fn create_with<T: PluginSink + 'static>(
    options_toml: *const u8,
    options_len: usize,
    host: *const HostApi,
    out_error: *mut OwnedStr,
    make: impl FnOnce(&str) -> Result<T, String>,
) -> *mut c_void {
    set_host(host);
    install_panic_hook(host);
    let result = guarded(|| {
        let bytes: &[u8] = if options_len == 0 || options_toml.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(options_toml, options_len)
        };
        let text =
            std::str::from_utf8(bytes).map_err(|e| format!("the options are not UTF-8: {e}"))?;
        make(text)
    });
    match result {
        Ok(Ok(sink)) => {
            let instance = Box::new(Instance {
                sink,
                records: Vec::new(),
            });
            Box::into_raw(instance).cast::<c_void>()
        }
        Ok(Err(reason)) => {
            write_str(out_error, reason);
            ptr::null_mut()
        }
        Err(payload) => {
            let reason = format!("{CREATE_PANICKED}{}", panic_message(payload));
            write_str(out_error, reason);
            ptr::null_mut()
        }
    }
}

/// `destroy`: see [`DestroyFn`](super::DestroyFn).
///
/// # Safety
/// `instance` came from [`create`] for the same `T` and is destroyed once.
pub unsafe extern "C" fn destroy<T: PluginSink + 'static>(instance: *mut c_void) {
    if instance.is_null() {
        return;
    }
    let instance = instance.cast::<Instance<T>>();
    let dropped = guarded(|| drop(Box::from_raw(instance)));
    if let Err(payload) = dropped {
        let msg = format!(
            "the sink panicked while being dropped: {}",
            panic_message(payload)
        );
        super::log_target(Level::Error, "sink_sdk::abi", &msg);
    }
}

/// `limits`: see [`LimitsFn`](super::LimitsFn).
///
/// # Safety
/// `instance` came from [`create`]; `out` is valid for a write.
pub unsafe extern "C" fn limits<T: PluginSink + 'static>(
    instance: *mut c_void,
    out: *mut RawLimits,
) -> i32 {
    if instance.is_null() || out.is_null() {
        return CALL_BAD_ARGUMENT;
    }
    let instance = &*instance.cast::<Instance<T>>();
    match guarded(|| instance.sink.limits()) {
        Ok(limits) => {
            out.write(RawLimits {
                max_records: limits.max_records as u64,
                max_bytes: limits.max_bytes as u64,
            });
            CALL_OK
        }
        Err(payload) => {
            let msg = format!("the sink panicked in limits(): {}", panic_message(payload));
            super::log_target(Level::Error, "sink_sdk::abi", &msg);
            CALL_PANICKED
        }
    }
}

/// `deliver`: see [`DeliverFn`](super::DeliverFn).
///
/// # Safety
/// `instance` came from [`create`] and is not used concurrently; `records`
/// points to `n` records whose payloads stay valid for the call; `out` is
/// valid for a write.
pub unsafe extern "C" fn deliver<T: PluginSink + 'static>(
    instance: *mut c_void,
    records: *const RawRecord,
    n: usize,
    out: *mut RawOutcome,
) -> i32 {
    if instance.is_null() || out.is_null() || (records.is_null() && n > 0) {
        return CALL_BAD_ARGUMENT;
    }
    let instance = &mut *instance.cast::<Instance<T>>();
    let raw: &[RawRecord] = if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(records, n)
    };
    let answer = match guarded(|| raw_outcome(instance.deliver(raw))) {
        Ok(answer) => answer,
        Err(payload) => RawOutcome {
            kind: OUTCOME_INTERNAL_ERROR,
            reason: OwnedStr::from_string(format!("{DELIVER_PANICKED}{}", panic_message(payload))),
            ..RawOutcome::UNSET
        },
    };
    out.write(answer);
    CALL_OK
}

/// `health`: see [`HealthFn`](super::HealthFn).
///
/// # Safety
/// `instance` came from [`create`] and is not used concurrently; `out_msg`
/// is null or valid for a write.
pub unsafe extern "C" fn health<T: PluginSink + 'static>(
    instance: *mut c_void,
    out_msg: *mut OwnedStr,
) -> i32 {
    if instance.is_null() {
        write_str(out_msg, "health() called without an instance".into());
        return HEALTH_UNHEALTHY;
    }
    let instance = &mut *instance.cast::<Instance<T>>();
    match guarded(|| instance.sink.health_check()) {
        Ok(Health::Healthy) => HEALTH_OK,
        Ok(Health::Unhealthy(why)) => {
            write_str(out_msg, why);
            HEALTH_UNHEALTHY
        }
        Err(payload) => {
            let why = format!("{HEALTH_PANICKED}{}", panic_message(payload));
            write_str(out_msg, why);
            HEALTH_UNHEALTHY
        }
    }
}

/// `describe_options`: see [`DescribeOptionsFn`](super::DescribeOptionsFn).
///
/// # Safety
/// `out` is null or points to an [`OwnedStr`] the host owns.
pub unsafe extern "C" fn describe_options<T: PluginSink + 'static>(out: *mut OwnedStr) -> i32 {
    if out.is_null() {
        return CALL_BAD_ARGUMENT;
    }
    match guarded(|| crate::keys::describe(T::OPTIONS.unwrap_or(&[]))) {
        Ok(text) => {
            write_str(out, text);
            CALL_OK
        }
        Err(_) => CALL_PANICKED,
    }
}

/// `free_string`: see [`FreeStringFn`](super::FreeStringFn).
///
/// # Safety
/// `s` is null, or holds a string this plugin wrote (or is empty).
pub unsafe extern "C" fn free_string(s: *mut OwnedStr) {
    if s.is_null() {
        return;
    }
    // Freeing cannot panic; the guard is there because every entry point
    // has one.
    let _ = guarded(|| (*s).free_rust());
}

/// `free_outcome`: see [`FreeOutcomeFn`](super::FreeOutcomeFn).
///
/// # Safety
/// `out` is null, or holds an outcome this plugin's `deliver` wrote (or
/// [`RawOutcome::UNSET`]).
pub unsafe extern "C" fn free_outcome(out: *mut RawOutcome) {
    if out.is_null() {
        return;
    }
    let _ = guarded(|| {
        let out = &mut *out;
        out.reason.free_rust();
        let n = out.records_len;
        if !out.record_codes.is_null() {
            drop(Box::from_raw(ptr::slice_from_raw_parts_mut(
                out.record_codes,
                n,
            )));
        }
        if !out.record_reasons.is_null() {
            let mut reasons = Box::from_raw(ptr::slice_from_raw_parts_mut(out.record_reasons, n));
            for reason in reasons.iter_mut() {
                reason.free_rust();
            }
        }
        *out = RawOutcome::UNSET;
    });
}
