//! # The plugin ABI: a sink in a shared library
//!
//! A sink plugin is a `cdylib` that exports one C function,
//! [`ENTRY_SYMBOL`] (`spillway_sink_plugin_v1`), returning a pointer to a
//! static [`PluginVTable`]. Everything that crosses between the daemon and
//! the plugin is `#[repr(C)]` or a plain pointer, so a plugin built by
//! another rustc (or written in C) loads safely: Rust types such as
//! `String`, `Vec` or trait objects never cross, because two compilers may
//! lay them out differently without any error.
//!
//! A Rust plugin does not touch any of this by hand: it implements
//! [`Sink`] and [`PluginSink`] and writes one line,
//! [`export_sink!`](crate::export_sink), which generates the entry point and
//! every `extern "C"` function. Those functions run the sink inside
//! [`std::panic::catch_unwind`] (a panic unwinding out of an `extern "C"`
//! function aborts the whole daemon), so a panic becomes an answer:
//!
//! | where        | a panic becomes                                                  |
//! |--------------|------------------------------------------------------------------|
//! | `create`     | a null instance and the panic message as the error               |
//! | `deliver`    | [`OUTCOME_INTERNAL_ERROR`] with the panic message                |
//! | `health`     | "unhealthy" with the panic message                                |
//! | `limits`     | a non-zero return code                                           |
//! | `destroy`    | an error log line through the host                               |
//!
//! The daemon (host) side lives in [`host`]: it checks a vtable, creates
//! instances, lays a batch out as [`RawRecord`] views (no payload copy) and
//! turns a [`RawOutcome`] back into an [`Outcome`](crate::Outcome).
//!
//! ## Versioning
//!
//! [`ABI_VERSION`] is bumped on any change to a `#[repr(C)]` type, a
//! function signature or a code's meaning. The host refuses a plugin whose
//! `abi_version` differs from its own. The first two fields of the vtable
//! ([`VTableHeader`]: `abi_version`, `sdk_version`) and the entry symbol's
//! name never change, in any ABI version, so a host can always say which
//! version a refused plugin was built for. [`SDK_VERSION`] is informational.
//!
//! ## Memory
//!
//! Whoever allocates frees. Records, payloads, the options text and the
//! [`HostApi`] belong to the host; records and payloads are valid only for
//! the duration of the call that received them (a plugin copies what it
//! keeps). Strings and arrays a plugin writes into an out-parameter
//! ([`OwnedStr`], the arrays of a [`RawOutcome`]) belong to the plugin; the
//! host reads them and hands them back exactly once through the vtable's
//! `free_string` / `free_outcome`, so each side uses its own allocator.
//!
//! The full reference, field offsets included, with a plugin written in C,
//! is `docs/plugins.md`.
//!
//! ## Example
//!
//! A plugin crate's `src/lib.rs` (with `crate-type = ["cdylib", "rlib"]`):
//!
//! ```
//! use sink_sdk::{export_sink, plugin_info, Batch, Outcome, PluginSink, Sink};
//!
//! pub struct CountSink {
//!     records: u64,
//! }
//!
//! impl PluginSink for CountSink {
//!     fn create(options_toml: &str) -> Result<Self, String> {
//!         if !options_toml.trim().is_empty() {
//!             return Err("the count sink takes no options".into());
//!         }
//!         Ok(CountSink { records: 0 })
//!     }
//! }
//!
//! impl Sink for CountSink {
//!     fn name(&self) -> &str {
//!         "count"
//!     }
//!
//!     fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
//!         self.records += batch.len() as u64;
//!         plugin_info!("{} records so far", self.records);
//!         Outcome::Committed
//!     }
//! }
//!
//! export_sink!(CountSink);
//!
//! // What the daemon does with the library, here in-process:
//! use sink_sdk::abi::host::Plugin;
//! use std::sync::Arc;
//! let vtable = spillway_sink_plugin_v1();
//! let plugin = Arc::new(unsafe { Plugin::from_vtable(vtable) }.unwrap());
//! assert_eq!(plugin.abi_version(), sink_sdk::abi::ABI_VERSION);
//! assert!(plugin.create("", None).is_ok());
//! assert_eq!(
//!     plugin.create("x = 1", None).err().unwrap(),
//!     "the count sink takes no options"
//! );
//! ```

use std::ffi::{c_char, c_void};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::{Record, Sink, SinkContext};

#[doc(hidden)]
pub mod export;
pub mod host;

/// Version of the binary interface described in this module. A host loads
/// only plugins built for the same version.
pub const ABI_VERSION: u32 = 1;

/// Version of this crate, as written into every vtable (informational).
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// [`SDK_VERSION`], NUL-terminated for the vtable.
const SDK_VERSION_NUL: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// How a plugin's `deliver` failure begins when it panicked (the panic was
/// caught at the boundary): this, the panic's message, then ` (at
/// FILE:LINE:COL)` where the plugin panicked.
pub const DELIVER_PANICKED: &str = "the plugin panicked: ";
/// As [`DELIVER_PANICKED`], for a panic in `health_check`.
pub const HEALTH_PANICKED: &str = "the plugin panicked in health_check: ";
/// As [`DELIVER_PANICKED`], for a panic in `create`.
pub const CREATE_PANICKED: &str = "the plugin panicked while creating the sink: ";

/// A panic's message: the text of a `&str` or `String` payload (what
/// `panic!` makes), else a placeholder.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

/// Name of the one symbol a plugin exports, an [`EntryFn`]. It keeps this
/// name in every ABI version (the version is inside the vtable).
pub const ENTRY_SYMBOL: &str = "spillway_sink_plugin_v1";

/// [`ENTRY_SYMBOL`], NUL-terminated, as `dlsym` wants it.
pub const ENTRY_SYMBOL_NUL: &[u8] = b"spillway_sink_plugin_v1\0";

/// The entry point: returns a pointer to a vtable that lives as long as the
/// library stays loaded. Called once per load; it must do nothing else.
pub type EntryFn = unsafe extern "C" fn() -> *const PluginVTable;

/// Name of the optional second symbol, an [`ExtensionFn`]: what was added
/// to ABI v1 without breaking a plugin built before (such a plugin does not
/// export it and loads and works as before, never told its context). A host that finds it
/// reads a [`PluginExtension`] and uses what its `size` says is there.
pub const EXTENSION_SYMBOL: &str = "spillway_sink_plugin_v1_extension";

/// [`EXTENSION_SYMBOL`], NUL-terminated, as `dlsym` wants it.
pub const EXTENSION_SYMBOL_NUL: &[u8] = b"spillway_sink_plugin_v1_extension\0";

/// The optional entry point: a static [`PluginExtension`].
pub type ExtensionFn = unsafe extern "C" fn() -> *const PluginExtension;

// ---- codes ---------------------------------------------------------------

/// [`RawOutcome::kind`]: every record is downstream.
pub const OUTCOME_COMMITTED: u32 = 0;
/// [`RawOutcome::kind`]: transient failure, offer the whole batch again;
/// `retry_after_ms` and `reason` say when and why.
pub const OUTCOME_RETRY: u32 = 1;
/// [`RawOutcome::kind`]: one code per record in `record_codes`.
pub const OUTCOME_SPLIT: u32 = 2;
/// [`RawOutcome::kind`]: the plugin failed internally (a panic, a broken
/// invariant); `reason` says what. The host retries the batch and replaces
/// the instance.
pub const OUTCOME_INTERNAL_ERROR: u32 = 3;
/// What the host writes into [`RawOutcome::kind`] before calling `deliver`:
/// a plugin that leaves it there has answered nothing (an internal error).
pub const OUTCOME_UNSET: u32 = u32::MAX;

/// A split's per-record code: the record is downstream.
pub const RECORD_COMMITTED: u8 = 0;
/// A split's per-record code: rejected for good (dead-lettered with the
/// record's reason).
pub const RECORD_REJECTED: u8 = 1;
/// A split's per-record code: offer it again (with every record after it).
pub const RECORD_RETRY: u8 = 2;

/// [`RawOutcome::retry_after_ms`] when the plugin has no opinion.
pub const RETRY_AFTER_NONE: u64 = u64::MAX;

/// Return code of `deliver` and `limits`: `out` was written.
pub const CALL_OK: i32 = 0;
/// Return code of `deliver` and `limits`: a null or otherwise invalid
/// argument; `out` was not written. Any non-zero code means failure.
pub const CALL_BAD_ARGUMENT: i32 = -1;
/// Return code of `limits`: the sink panicked; `out` was not written.
pub const CALL_PANICKED: i32 = -2;

/// Return code of `health`: healthy.
pub const HEALTH_OK: i32 = 0;
/// Return code of `health`: unhealthy; `out_msg` may hold the reason.
pub const HEALTH_UNHEALTHY: i32 = 1;

// ---- the types that cross ------------------------------------------------

/// A UTF-8 string (not NUL-terminated) allocated by the plugin and freed
/// by the plugin's `free_string` (or `free_outcome`, for the ones inside a
/// [`RawOutcome`]). `ptr` null means "no string" (and `len` is 0).
///
/// Layout (64-bit): `ptr` at 0, `len` at 8; 16 bytes.
#[repr(C)]
#[derive(Debug)]
pub struct OwnedStr {
    pub ptr: *mut u8,
    pub len: usize,
}

impl OwnedStr {
    /// No string.
    pub const EMPTY: OwnedStr = OwnedStr {
        ptr: ptr::null_mut(),
        len: 0,
    };

    /// Gives `s` to the other side; free it with [`OwnedStr::free_rust`]
    /// (this is what a Rust plugin's `free_string` does).
    pub fn from_string(s: String) -> OwnedStr {
        if s.is_empty() {
            return OwnedStr::EMPTY;
        }
        let bytes: Box<[u8]> = s.into_bytes().into_boxed_slice();
        let len = bytes.len();
        OwnedStr {
            ptr: Box::into_raw(bytes).cast::<u8>(),
            len,
        }
    }

    /// Frees a string made by [`OwnedStr::from_string`] and empties `self`.
    ///
    /// # Safety
    /// `self` is empty or came from [`OwnedStr::from_string`] in this same
    /// copy of sink-sdk (same allocator) and was not freed yet.
    pub unsafe fn free_rust(&mut self) {
        if !self.ptr.is_null() {
            let slice = ptr::slice_from_raw_parts_mut(self.ptr, self.len);
            drop(Box::from_raw(slice));
        }
        *self = OwnedStr::EMPTY;
    }

    /// A copy of the text, invalid UTF-8 replaced by U+FFFD.
    ///
    /// # Safety
    /// `ptr` is null or points to `len` readable bytes.
    pub unsafe fn to_string_lossy(&self) -> String {
        if self.ptr.is_null() || self.len == 0 {
            return String::new();
        }
        let bytes = std::slice::from_raw_parts(self.ptr, self.len);
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// What [`Sink::limits`] answers, across the boundary.
///
/// Layout: `max_records` at 0, `max_bytes` at 8; 16 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawLimits {
    pub max_records: u64,
    pub max_bytes: u64,
}

/// One record of a batch: a view of the host's buffer, never a copy.
/// Valid only during the `deliver` call that received it.
///
/// Layout (64-bit): `shard` at 0, `tier` at 4, 3 bytes of padding, `seq` at
/// 8, `arrival_unix_us` at 16, `payload` at 24, `payload_len` at 32; 40
/// bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawRecord {
    /// The shard that stored the record; `(shard, seq)` is its identity.
    pub shard: u32,
    /// Durability tier it was pushed at: 1 Sync, 2 Batched, 3 Buffered.
    pub tier: u8,
    pub seq: u64,
    /// When the daemon accepted it, microseconds since the Unix epoch.
    pub arrival_unix_us: u64,
    /// The payload's first byte; may be null when `payload_len` is 0.
    pub payload: *const u8,
    pub payload_len: usize,
}

impl RawRecord {
    /// The view of `r` (host side): no copy.
    pub fn from_record(r: &Record<'_>) -> RawRecord {
        RawRecord {
            shard: r.shard,
            tier: r.tier,
            seq: r.seq,
            arrival_unix_us: r.arrival_unix_us,
            payload: r.payload.as_ptr(),
            payload_len: r.payload.len(),
        }
    }

    /// The record this view points at (plugin side).
    ///
    /// # Safety
    /// `payload` points to `payload_len` readable bytes (or `payload_len`
    /// is 0) that stay valid and unchanged for `'a`.
    pub unsafe fn as_record<'a>(&self) -> Record<'a> {
        let payload: &'a [u8] = if self.payload_len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(self.payload, self.payload_len)
        };
        Record {
            shard: self.shard,
            seq: self.seq,
            tier: self.tier,
            arrival_unix_us: self.arrival_unix_us,
            payload,
        }
    }
}

/// A plugin's answer to one batch. The host initialises it to
/// [`RawOutcome::UNSET`], the plugin fills it, the host reads it and then
/// always passes it to the plugin's `free_outcome`.
///
/// Layout (64-bit): `kind` at 0, 4 bytes of padding, `retry_after_ms` at 8,
/// `reason` at 16 (16 bytes), `record_codes` at 32, `record_reasons` at 40,
/// `records_len` at 48; 56 bytes.
#[repr(C)]
#[derive(Debug)]
pub struct RawOutcome {
    /// One of the `OUTCOME_*` codes.
    pub kind: u32,
    /// For [`OUTCOME_RETRY`]: wait at least this long;
    /// [`RETRY_AFTER_NONE`] (`u64::MAX`) when the plugin has no opinion.
    pub retry_after_ms: u64,
    /// For [`OUTCOME_RETRY`] and [`OUTCOME_INTERNAL_ERROR`]: why. Owned by
    /// the plugin.
    pub reason: OwnedStr,
    /// For [`OUTCOME_SPLIT`]: `records_len` `RECORD_*` codes, one per
    /// record of the batch, in order. Owned by the plugin.
    pub record_codes: *mut u8,
    /// For [`OUTCOME_SPLIT`]: null, or `records_len` strings; entry `i` is
    /// the rejection reason of record `i` (empty for the others). Owned by
    /// the plugin.
    pub record_reasons: *mut OwnedStr,
    /// For [`OUTCOME_SPLIT`]: length of both arrays; must equal the
    /// batch's record count.
    pub records_len: usize,
}

impl RawOutcome {
    /// What the host passes in: "nothing answered yet".
    pub const UNSET: RawOutcome = RawOutcome {
        kind: OUTCOME_UNSET,
        retry_after_ms: RETRY_AFTER_NONE,
        reason: OwnedStr::EMPTY,
        record_codes: ptr::null_mut(),
        record_reasons: ptr::null_mut(),
        records_len: 0,
    };
}

/// What the host lends a plugin: logging into the daemon's log. Passed to
/// every `create`; valid until the process exits; usable from any thread.
///
/// Layout (64-bit): `abi_version` at 0, 4 bytes of padding, `ctx` at 8,
/// `log` at 16, `log_enabled` at 24; 32 bytes.
#[repr(C)]
#[derive(Debug)]
pub struct HostApi {
    /// The host's [`ABI_VERSION`].
    pub abi_version: u32,
    /// Opaque; passed back as the first argument of every callback.
    pub ctx: *mut c_void,
    /// Writes one log line (the host adds the plugin's name). May be null.
    pub log: Option<LogFn>,
    /// Whether a line at `level` would be written, so a plugin can skip
    /// formatting it. May be null (then: assume yes).
    pub log_enabled: Option<LogEnabledFn>,
}

// SAFETY: a HostApi is immutable once built; the host promises that its
// callbacks may be called from any thread with its `ctx`.
unsafe impl Send for HostApi {}
unsafe impl Sync for HostApi {}

/// `log(ctx, level, target, target_len, msg, msg_len)`: `level` is a
/// [`Level`] as `u8`; `target` (where in the plugin, e.g. a module path)
/// and `msg` are UTF-8, not NUL-terminated, borrowed for the call.
pub type LogFn = unsafe extern "C" fn(
    ctx: *mut c_void,
    level: u8,
    target: *const u8,
    target_len: usize,
    msg: *const u8,
    msg_len: usize,
);

/// `log_enabled(ctx, level)`: whether a line at `level` would be written.
pub type LogEnabledFn = unsafe extern "C" fn(ctx: *mut c_void, level: u8) -> bool;

/// `create(options_toml, options_len, host, out_error)`: a new instance
/// (opaque, non-null) or null with the reason in `*out_error`.
pub type CreateFn = unsafe extern "C" fn(
    options_toml: *const u8,
    options_len: usize,
    host: *const HostApi,
    out_error: *mut OwnedStr,
) -> *mut c_void;
/// `destroy(instance)`: frees an instance; called exactly once.
pub type DestroyFn = unsafe extern "C" fn(instance: *mut c_void);
/// `limits(instance, out)`: [`CALL_OK`] after writing `*out`.
pub type LimitsFn = unsafe extern "C" fn(instance: *mut c_void, out: *mut RawLimits) -> i32;
/// `deliver(instance, records, n, out)`: [`CALL_OK`] after writing `*out`.
pub type DeliverFn = unsafe extern "C" fn(
    instance: *mut c_void,
    records: *const RawRecord,
    n: usize,
    out: *mut RawOutcome,
) -> i32;
/// `health(instance, out_msg)`: [`HEALTH_OK`] or [`HEALTH_UNHEALTHY`].
pub type HealthFn = unsafe extern "C" fn(instance: *mut c_void, out_msg: *mut OwnedStr) -> i32;
/// `free_string(s)`: frees a string the plugin wrote and empties `*s`.
pub type FreeStringFn = unsafe extern "C" fn(s: *mut OwnedStr);
/// `free_outcome(out)`: frees what the plugin put in `*out` and empties it.
pub type FreeOutcomeFn = unsafe extern "C" fn(out: *mut RawOutcome);

/// The part of [`PluginVTable`] that is the same in every ABI version, so
/// a host can read it from any plugin and name the version it was built
/// for.
///
/// Layout (64-bit): `abi_version` at 0, 4 bytes of padding, `sdk_version`
/// at 8; 16 bytes.
#[repr(C)]
#[derive(Debug)]
pub struct VTableHeader {
    pub abi_version: u32,
    pub sdk_version: *const c_char,
}

/// What the entry point returns. Static, immutable, one per library.
///
/// Layout (64-bit): `abi_version` at 0, `sdk_version` at 8, `plugin_name`
/// at 16, `plugin_version` at 24, then the functions, 8 bytes each:
/// `create` 32, `destroy` 40, `limits` 48, `deliver` 56, `health` 64,
/// `free_string` 72, `free_outcome` 80; 88 bytes. A null function pointer
/// makes the host refuse the plugin.
#[repr(C)]
#[derive(Debug)]
pub struct PluginVTable {
    /// [`ABI_VERSION`] the plugin was built for.
    pub abi_version: u32,
    /// sink-sdk version the plugin was built with, NUL-terminated.
    pub sdk_version: *const c_char,
    /// The plugin's name for logs and metrics, NUL-terminated UTF-8.
    pub plugin_name: *const c_char,
    /// The plugin's own version, NUL-terminated UTF-8.
    pub plugin_version: *const c_char,
    pub create: Option<CreateFn>,
    pub destroy: Option<DestroyFn>,
    pub limits: Option<LimitsFn>,
    pub deliver: Option<DeliverFn>,
    pub health: Option<HealthFn>,
    pub free_string: Option<FreeStringFn>,
    pub free_outcome: Option<FreeOutcomeFn>,
}

// SAFETY: a vtable is immutable static data (pointers to static strings and
// to functions that the ABI requires to be callable from any thread).
unsafe impl Send for PluginVTable {}
unsafe impl Sync for PluginVTable {}

/// Who is creating an instance ([`SinkContext`]),
/// borrowed for the `create_in` call (the plugin copies what it keeps):
/// the daemon's instance id and the sink's name, UTF-8, not
/// NUL-terminated.
///
/// Layout (64-bit): `instance` at 0, `instance_len` at 8, `sink` at 16,
/// `sink_len` at 24; 32 bytes.
#[repr(C)]
#[derive(Debug)]
pub struct RawContext {
    pub instance: *const u8,
    pub instance_len: usize,
    pub sink: *const u8,
    pub sink_len: usize,
}

impl RawContext {
    /// The view of `c` (host side): borrowed, no copy.
    pub fn from_context(c: &crate::SinkContext) -> RawContext {
        RawContext {
            instance: c.instance().as_ptr(),
            instance_len: c.instance().len(),
            sink: c.sink().as_ptr(),
            sink_len: c.sink().len(),
        }
    }

    /// A copy (plugin side), invalid UTF-8 replaced.
    ///
    /// # Safety
    /// Both pointers are null (with length 0) or point to that many
    /// readable bytes.
    pub unsafe fn to_context(&self) -> crate::SinkContext {
        let text = |p: *const u8, n: usize| match p.is_null() || n == 0 {
            true => String::new(),
            false => String::from_utf8_lossy(std::slice::from_raw_parts(p, n)).into_owned(),
        };
        crate::SinkContext::new(
            text(self.instance, self.instance_len),
            text(self.sink, self.sink_len),
        )
    }
}

/// `create_in(options_toml, options_len, host, context, out_error)`: as
/// [`CreateFn`], told who creates the instance.
pub type CreateInFn = unsafe extern "C" fn(
    options_toml: *const u8,
    options_len: usize,
    host: *const HostApi,
    context: *const RawContext,
    out_error: *mut OwnedStr,
) -> *mut c_void;

/// `describe_options(out)`: writes the plugin's options, declared as
/// [`Key`](crate::keys::Key)s, as the JSON text
/// [`keys::describe`](crate::keys::describe) makes (format in
/// docs/plugins.md) into `out` (freed with the vtable's `free_string`), and
/// returns [`CALL_OK`]; [`CALL_PANICKED`] if it panicked. Takes no
/// instance: the host calls it once, when it loads the library.
pub type DescribeOptionsFn = unsafe extern "C" fn(out: *mut OwnedStr) -> i32;

/// What the optional [`EXTENSION_SYMBOL`] returns. Static, immutable.
/// `size` is `size_of::<PluginExtension>()` of the sink-sdk that built the
/// plugin: a host reads only the fields that lie within it, so fields
/// appended later leave older plugins and hosts working.
///
/// Layout (64-bit): `size` at 0, `create_in` at 8, `describe_options` at
/// 16; 24 bytes (16 for a plugin built before `describe_options`).
#[repr(C)]
#[derive(Debug)]
pub struct PluginExtension {
    pub size: usize,
    /// Creates an instance told its [`RawContext`]; the host calls it
    /// instead of the vtable's `create` when present.
    pub create_in: Option<CreateInFn>,
    /// Describes the options the plugin takes, or null: a plugin that
    /// does not describe them has its `[sink.options]` checked by its
    /// `create` alone. When present, the host checks the options against
    /// the description before any `create` (unknown keys, required keys,
    /// types, ranges; each error naming `sink.options.KEY`), `spillway
    /// check` prints them and `spillway schema --config` puts them in the
    /// JSON Schema.
    pub describe_options: Option<DescribeOptionsFn>,
}

impl PluginExtension {
    /// The extension of sink type `T` (used by
    /// [`export_sink!`](crate::export_sink)).
    pub const fn for_sink<T: PluginSink + 'static>() -> PluginExtension {
        PluginExtension {
            size: std::mem::size_of::<PluginExtension>(),
            create_in: Some(export::create_in::<T>),
            describe_options: match T::OPTIONS {
                Some(_) => Some(export::describe_options::<T>),
                None => None,
            },
        }
    }
}

impl PluginVTable {
    /// The vtable of sink type `T`, made of the functions in the hidden
    /// `export` module. Used by [`export_sink!`](crate::export_sink);
    /// `plugin_name` and `plugin_version` must be NUL-terminated statics.
    pub const fn for_sink<T: PluginSink + 'static>(
        plugin_name: *const c_char,
        plugin_version: *const c_char,
    ) -> PluginVTable {
        PluginVTable {
            abi_version: ABI_VERSION,
            sdk_version: SDK_VERSION_NUL.as_ptr().cast::<c_char>(),
            plugin_name,
            plugin_version,
            create: Some(export::create::<T>),
            destroy: Some(export::destroy::<T>),
            limits: Some(export::limits::<T>),
            deliver: Some(export::deliver::<T>),
            health: Some(export::health::<T>),
            free_string: Some(export::free_string),
            free_outcome: Some(export::free_outcome),
        }
    }
}

// The layout is the ABI: check it where it is defined (64-bit targets; the
// offsets are documented for them).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<OwnedStr>() == 16);
    assert!(size_of::<RawLimits>() == 16);
    assert!(offset_of!(RawRecord, shard) == 0);
    assert!(offset_of!(RawRecord, tier) == 4);
    assert!(offset_of!(RawRecord, seq) == 8);
    assert!(offset_of!(RawRecord, arrival_unix_us) == 16);
    assert!(offset_of!(RawRecord, payload) == 24);
    assert!(offset_of!(RawRecord, payload_len) == 32);
    assert!(size_of::<RawRecord>() == 40);
    assert!(offset_of!(RawOutcome, kind) == 0);
    assert!(offset_of!(RawOutcome, retry_after_ms) == 8);
    assert!(offset_of!(RawOutcome, reason) == 16);
    assert!(offset_of!(RawOutcome, record_codes) == 32);
    assert!(offset_of!(RawOutcome, record_reasons) == 40);
    assert!(offset_of!(RawOutcome, records_len) == 48);
    assert!(size_of::<RawOutcome>() == 56);
    assert!(offset_of!(HostApi, ctx) == 8);
    assert!(offset_of!(HostApi, log) == 16);
    assert!(offset_of!(HostApi, log_enabled) == 24);
    assert!(size_of::<HostApi>() == 32);
    assert!(size_of::<VTableHeader>() == 16);
    assert!(offset_of!(PluginVTable, sdk_version) == offset_of!(VTableHeader, sdk_version));
    assert!(offset_of!(PluginVTable, plugin_name) == 16);
    assert!(offset_of!(PluginVTable, plugin_version) == 24);
    assert!(offset_of!(PluginVTable, create) == 32);
    assert!(offset_of!(PluginVTable, destroy) == 40);
    assert!(offset_of!(PluginVTable, limits) == 48);
    assert!(offset_of!(PluginVTable, deliver) == 56);
    assert!(offset_of!(PluginVTable, health) == 64);
    assert!(offset_of!(PluginVTable, free_string) == 72);
    assert!(offset_of!(PluginVTable, free_outcome) == 80);
    assert!(size_of::<PluginVTable>() == 88);
    assert!(offset_of!(RawContext, instance_len) == 8);
    assert!(offset_of!(RawContext, sink) == 16);
    assert!(offset_of!(RawContext, sink_len) == 24);
    assert!(size_of::<RawContext>() == 32);
    assert!(offset_of!(PluginExtension, create_in) == 8);
    assert!(offset_of!(PluginExtension, describe_options) == 16);
    assert!(size_of::<PluginExtension>() == 24);
};

// ---- what a plugin implements ----------------------------------------------

/// How a plugin's sink is built from its options. Together with [`Sink`]
/// this is all a Rust plugin implements; [`export_sink!`](crate::export_sink)
/// does the rest.
pub trait PluginSink: Sink {
    /// The options this plugin takes, declared once with
    /// [`key_table!`](crate::key_table) (`Some(MyOptions::KEYS)`), or
    /// `Some(&[])` for a plugin that takes none. The daemon then checks
    /// `[sink.options]` against them before `create` (a misspelt or
    /// unknown key, a missing required one, a value of the wrong type or
    /// out of range, each refused naming `sink.options.KEY`), `spillway
    /// check` prints them, and `spillway schema --config` adds them to the
    /// JSON Schema. `None` (the default): the daemon knows nothing of them
    /// and `create` alone checks them.
    const OPTIONS: Option<&'static [crate::keys::Key]> = None;

    /// A new instance. `options_toml` is the `[sink.options]` table of the
    /// daemon's config as TOML text (empty when there is none); the plugin
    /// parses it (e.g. with the `toml` crate). The error is shown to the
    /// operator as is, prefixed with the plugin's name: say which option
    /// is wrong and what is allowed.
    ///
    /// Called once when the plugin is loaded (to validate the options),
    /// then once per shard, and again after an instance failed. Possibly
    /// from several threads at once.
    fn create(options_toml: &str) -> Result<Self, String>
    where
        Self: Sized;

    /// [`create`](Self::create), told who creates the instance: the
    /// daemon's instance id and the sink's name ([`SinkContext`]). A
    /// plugin that dedupes (keys rows or messages by record) implements
    /// this and keys on `(instance, shard, seq)`; the default ignores the
    /// context. The daemon calls it whenever the plugin exports the
    /// [`EXTENSION_SYMBOL`] (every plugin built by
    /// [`export_sink!`](crate::export_sink) since the symbol was added); a
    /// daemon from before calls [`create`](Self::create).
    fn create_in(options_toml: &str, context: &SinkContext) -> Result<Self, String>
    where
        Self: Sized,
    {
        let _ = context;
        Self::create(options_toml)
    }
}

/// Generates the plugin's entry point for a type that implements [`Sink`]
/// and [`PluginSink`]: `export_sink!(MySink);`. The plugin's name and
/// version default to the crate's (`CARGO_PKG_NAME`, `CARGO_PKG_VERSION`);
/// override them with string literals:
/// `export_sink!(MySink, name = "pg", version = "1.2.0");`.
///
/// Write it once per `cdylib` (it defines the `#[no_mangle]` symbol
/// [`abi::ENTRY_SYMBOL`](crate::abi::ENTRY_SYMBOL)).
#[macro_export]
macro_rules! export_sink {
    ($sink:ty) => {
        $crate::export_sink!(@emit $sink,
            concat!(env!("CARGO_PKG_NAME"), "\0"),
            concat!(env!("CARGO_PKG_VERSION"), "\0"));
    };
    ($sink:ty, name = $name:literal) => {
        $crate::export_sink!(@emit $sink,
            concat!($name, "\0"),
            concat!(env!("CARGO_PKG_VERSION"), "\0"));
    };
    ($sink:ty, name = $name:literal, version = $version:literal) => {
        $crate::export_sink!(@emit $sink, concat!($name, "\0"), concat!($version, "\0"));
    };
    (@emit $sink:ty, $name_nul:expr, $version_nul:expr) => {
        /// The spillway sink plugin entry point (generated by
        /// `sink_sdk::export_sink!`).
        #[no_mangle]
        pub extern "C" fn spillway_sink_plugin_v1() -> *const $crate::abi::PluginVTable {
            static VTABLE: $crate::abi::PluginVTable = $crate::abi::PluginVTable::for_sink::<$sink>(
                $name_nul.as_ptr().cast(),
                $version_nul.as_ptr().cast(),
            );
            &VTABLE
        }

        /// The spillway sink plugin's extension of ABI v1 (generated by
        /// `sink_sdk::export_sink!`).
        #[no_mangle]
        pub extern "C" fn spillway_sink_plugin_v1_extension(
        ) -> *const $crate::abi::PluginExtension {
            static EXTENSION: $crate::abi::PluginExtension =
                $crate::abi::PluginExtension::for_sink::<$sink>();
            &EXTENSION
        }
    };
}

// ---- logging from a plugin -------------------------------------------------

/// Severity of a log line, as it crosses the boundary (`u8`).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
    Trace = 5,
}

impl Level {
    /// The level a `u8` from the other side stands for (anything out of
    /// range is treated as `Error`, so nothing is lost).
    pub fn from_u8(level: u8) -> Level {
        match level {
            2 => Level::Warn,
            3 => Level::Info,
            4 => Level::Debug,
            5 => Level::Trace,
            _ => Level::Error,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "ERROR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Debug => "DEBUG",
            Level::Trace => "TRACE",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host this copy of sink-sdk logs to: set by the first `create` that
/// received one. Each plugin library links its own copy of sink-sdk, so
/// each has its own.
static HOST: AtomicPtr<HostApi> = AtomicPtr::new(ptr::null_mut());

/// Remembers the host's callbacks (plugin side; done by `create`).
pub(crate) fn set_host(host: *const HostApi) {
    if !host.is_null() {
        HOST.store(host.cast_mut(), Ordering::Release);
    }
}

fn host() -> Option<&'static HostApi> {
    let host = HOST.load(Ordering::Acquire);
    // SAFETY: a host keeps its HostApi valid until the process exits.
    unsafe { host.as_ref() }
}

/// Whether a line at `level` would reach the log. Without a host (a
/// plugin's own unit tests) lines up to `Info` go to stderr.
pub fn log_enabled(level: Level) -> bool {
    match host() {
        Some(h) => match (h.log, h.log_enabled) {
            (None, _) => false,
            // SAFETY: host callbacks may be called from any thread.
            (Some(_), Some(enabled)) => unsafe { enabled(h.ctx, level as u8) },
            (Some(_), None) => true,
        },
        None => level <= Level::Info,
    }
}

/// Logs `msg` into the daemon's log, where it carries the plugin's name.
/// Without a host (the plugin's own unit tests) it goes to stderr.
pub fn log(level: Level, msg: &str) {
    log_target(level, "", msg)
}

/// [`log`] with a `target` saying where in the plugin (the macros pass
/// `module_path!()`).
pub fn log_target(level: Level, target: &str, msg: &str) {
    match host() {
        Some(h) => {
            if let Some(log) = h.log {
                // SAFETY: both strings are borrowed for the call only.
                unsafe {
                    log(
                        h.ctx,
                        level as u8,
                        target.as_ptr(),
                        target.len(),
                        msg.as_ptr(),
                        msg.len(),
                    )
                }
            }
        }
        None if level <= Level::Info => eprintln!("[sink plugin] {level} {target}: {msg}"),
        None => {}
    }
}

/// What the `plugin_*!` macros call.
#[doc(hidden)]
pub fn __log_fmt(level: Level, target: &str, args: fmt::Arguments<'_>) {
    if !log_enabled(level) {
        return;
    }
    match args.as_str() {
        Some(text) => log_target(level, target, text),
        None => log_target(level, target, &args.to_string()),
    }
}

/// `plugin_error!("...", args)`: an error line in the daemon's log.
#[macro_export]
macro_rules! plugin_error {
    ($($arg:tt)+) => { $crate::abi::__log_fmt($crate::abi::Level::Error, module_path!(), format_args!($($arg)+)) };
}

/// `plugin_warn!("...", args)`: a warning line in the daemon's log.
#[macro_export]
macro_rules! plugin_warn {
    ($($arg:tt)+) => { $crate::abi::__log_fmt($crate::abi::Level::Warn, module_path!(), format_args!($($arg)+)) };
}

/// `plugin_info!("...", args)`: an info line in the daemon's log.
#[macro_export]
macro_rules! plugin_info {
    ($($arg:tt)+) => { $crate::abi::__log_fmt($crate::abi::Level::Info, module_path!(), format_args!($($arg)+)) };
}

/// `plugin_debug!("...", args)`: a debug line (formatted only if enabled).
#[macro_export]
macro_rules! plugin_debug {
    ($($arg:tt)+) => { $crate::abi::__log_fmt($crate::abi::Level::Debug, module_path!(), format_args!($($arg)+)) };
}

/// `plugin_trace!("...", args)`: a trace line (formatted only if enabled).
#[macro_export]
macro_rules! plugin_trace {
    ($($arg:tt)+) => { $crate::abi::__log_fmt($crate::abi::Level::Trace, module_path!(), format_args!($($arg)+)) };
}

#[cfg(test)]
mod tests;
