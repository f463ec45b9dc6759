//! The host side of the ABI, as safe types: [`Plugin`] (a checked vtable)
//! and [`Instance`] (one sink instance behind it).
//!
//! The daemon's plugin host (which finds, copies and `dlopen`s the
//! library) is built on these; so are in-process tests of a plugin, which
//! call the crate's own `spillway_sink_plugin_v1()` and go through exactly
//! the path the daemon takes.
//!
//! Everything the plugin answers is checked here: a null function, a
//! vtable of another ABI version, a split of the wrong length, an unknown
//! code. A plugin that breaks the ABI, or that reports an internal error
//! (a panic it caught), gives [`PluginFailure`]: the caller should retry
//! the batch on a new instance.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::Duration;

use super::{
    CreateFn, CreateInFn, DeliverFn, DescribeOptionsFn, DestroyFn, FreeOutcomeFn, FreeStringFn,
    HealthFn, HostApi, LimitsFn, OwnedStr, PluginExtension, PluginVTable, RawContext, RawLimits,
    RawOutcome, RawRecord, VTableHeader, ABI_VERSION, CALL_OK, HEALTH_OK, HEALTH_UNHEALTHY,
    OUTCOME_COMMITTED, OUTCOME_INTERNAL_ERROR, OUTCOME_RETRY, OUTCOME_SPLIT, OUTCOME_UNSET,
    RECORD_COMMITTED, RECORD_REJECTED, RECORD_RETRY, RETRY_AFTER_NONE, SDK_VERSION,
};
use crate::{Batch, Health, Limits, Outcome, RecordOutcome, SinkContext};

/// Longest plugin name or version accepted from a vtable, in bytes.
pub const NAME_BYTES_MAX: usize = 128;

/// Longest string copied out of a plugin answer, in bytes; longer reasons
/// are cut (a reason ends up in logs and dead-letter files).
pub const REASON_BYTES_MAX: usize = 64 * 1024;

/// Why a vtable was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The entry point returned null.
    NullVTable,
    /// Built for another ABI version. `plugin_sdk` is the sink-sdk version
    /// it names ("unknown" if none).
    AbiMismatch { plugin_abi: u32, plugin_sdk: String },
    /// A null function or an unreadable name.
    Invalid(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NullVTable => write!(f, "returned a null vtable from its entry point"),
            LoadError::AbiMismatch {
                plugin_abi,
                plugin_sdk,
            } => write!(
                f,
                "was built for sink ABI v{plugin_abi} (sink-sdk {plugin_sdk}); this daemon speaks \
                 ABI v{ABI_VERSION} (sink-sdk {SDK_VERSION}) — rebuild the plugin against \
                 sink-sdk {SDK_VERSION}"
            ),
            LoadError::Invalid(why) => write!(f, "has an invalid vtable: {why}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Why a call into the plugin produced no usable answer: it reported an
/// internal error (e.g. a panic it caught) or broke the ABI. The instance
/// should be replaced and the batch offered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginFailure(pub String);

impl fmt::Display for PluginFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PluginFailure {}

/// The vtable's functions, checked non-null once.
#[derive(Clone, Copy)]
struct Functions {
    create: CreateFn,
    destroy: DestroyFn,
    limits: LimitsFn,
    deliver: DeliverFn,
    health: HealthFn,
    free_string: FreeStringFn,
    free_outcome: FreeOutcomeFn,
    /// From the optional [`PluginExtension`]: absent in a plugin built
    /// before it existed.
    create_in: Option<CreateInFn>,
}

/// A plugin whose vtable passed the checks.
pub struct Plugin {
    functions: Functions,
    abi_version: u32,
    sdk_version: String,
    name: String,
    version: String,
    /// [`Plugin::options_description`].
    options: Option<String>,
}

// SAFETY: the vtable is immutable and the ABI requires its functions to be
// callable from any thread (calls on one instance are never concurrent,
// which `Instance: !Sync` ensures).
unsafe impl Send for Plugin {}
unsafe impl Sync for Plugin {}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("abi_version", &self.abi_version)
            .field("sdk_version", &self.sdk_version)
            .finish_non_exhaustive()
    }
}

/// A NUL-terminated string from a vtable, checked: UTF-8, 1 to
/// [`NAME_BYTES_MAX`] bytes, no control characters.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn vtable_str(p: *const c_char, field: &str) -> Result<String, LoadError> {
    if p.is_null() {
        return Err(LoadError::Invalid(format!("{field} is null")));
    }
    let text = CStr::from_ptr(p)
        .to_str()
        .map_err(|_| LoadError::Invalid(format!("{field} is not UTF-8")))?;
    if text.is_empty() || text.len() > NAME_BYTES_MAX || text.chars().any(char::is_control) {
        return Err(LoadError::Invalid(format!(
            "{field} {text:?} must be 1 to {NAME_BYTES_MAX} bytes without control characters"
        )));
    }
    Ok(text.to_string())
}

impl Plugin {
    /// Checks the vtable a plugin's entry point returned: the ABI version
    /// first (reading only the [`VTableHeader`], which every version
    /// shares), then every function and name.
    ///
    /// # Safety
    /// `vtable` is what a plugin's [`EntryFn`](super::EntryFn) returned, and
    /// the library it lives in stays loaded for the rest of the process
    /// (the host never unloads plugin libraries).
    pub unsafe fn from_vtable(vtable: *const PluginVTable) -> Result<Plugin, LoadError> {
        if vtable.is_null() {
            return Err(LoadError::NullVTable);
        }
        let header = &*vtable.cast::<VTableHeader>();
        if header.abi_version != ABI_VERSION {
            let plugin_sdk = match header.sdk_version.is_null() {
                true => "unknown".to_string(),
                false => CStr::from_ptr(header.sdk_version)
                    .to_string_lossy()
                    .chars()
                    .take(NAME_BYTES_MAX)
                    .collect(),
            };
            return Err(LoadError::AbiMismatch {
                plugin_abi: header.abi_version,
                plugin_sdk,
            });
        }
        let v = &*vtable;
        let missing = |name: &str| LoadError::Invalid(format!("function `{name}` is null"));
        let functions = Functions {
            create: v.create.ok_or_else(|| missing("create"))?,
            destroy: v.destroy.ok_or_else(|| missing("destroy"))?,
            limits: v.limits.ok_or_else(|| missing("limits"))?,
            deliver: v.deliver.ok_or_else(|| missing("deliver"))?,
            health: v.health.ok_or_else(|| missing("health"))?,
            free_string: v.free_string.ok_or_else(|| missing("free_string"))?,
            free_outcome: v.free_outcome.ok_or_else(|| missing("free_outcome"))?,
            create_in: None,
        };
        Ok(Plugin {
            functions,
            abi_version: v.abi_version,
            sdk_version: vtable_str(v.sdk_version, "sdk_version")?,
            name: vtable_str(v.plugin_name, "plugin_name")?,
            version: vtable_str(v.plugin_version, "plugin_version")?,
            options: None,
        })
    }

    /// [`Plugin::from_vtable`], with the optional [`PluginExtension`] the
    /// plugin's [`EXTENSION_SYMBOL`](super::EXTENSION_SYMBOL) returned
    /// (null, or no such symbol: a plugin built before it, which is never
    /// told its context). Only the fields its `size` covers are read.
    ///
    /// # Safety
    /// As [`Plugin::from_vtable`]; `extension` is null or what the same
    /// library's [`ExtensionFn`](super::ExtensionFn) returned.
    pub unsafe fn from_entry_points(
        vtable: *const PluginVTable,
        extension: *const PluginExtension,
    ) -> Result<Plugin, LoadError> {
        let mut plugin = Plugin::from_vtable(vtable)?;
        if let Some(ext) = extension.as_ref() {
            let covers = |end: usize| ext.size >= end;
            if covers(std::mem::offset_of!(PluginExtension, create_in) + 8) {
                plugin.functions.create_in = ext.create_in;
            }
            if covers(std::mem::offset_of!(PluginExtension, describe_options) + 8) {
                if let Some(describe) = ext.describe_options {
                    plugin.options = Some(plugin.described_options(describe)?);
                }
            }
        }
        Ok(plugin)
    }

    /// The text `describe` writes (checked only to be UTF-8 here; the host
    /// reads it as JSON).
    ///
    /// # Safety
    /// `describe` is this plugin's.
    unsafe fn described_options(&self, describe: DescribeOptionsFn) -> Result<String, LoadError> {
        let mut out = OwnedStr::EMPTY;
        let code = describe(&mut out);
        let written = out.len;
        let text = self.take_string(&mut out);
        if written > REASON_BYTES_MAX {
            return Err(LoadError::Invalid(format!(
                "describe_options wrote {written} bytes, more than {REASON_BYTES_MAX}"
            )));
        }
        match code {
            CALL_OK => Ok(text),
            _ => Err(LoadError::Invalid(format!(
                "describe_options failed (code {code}){}",
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {text}")
                }
            ))),
        }
    }

    /// What the plugin says of its options, as the JSON text of
    /// [`keys::describe`](crate::keys::describe); `None` when it does not
    /// describe them.
    pub fn options_description(&self) -> Option<&str> {
        self.options.as_deref()
    }

    /// Whether its instances are told who creates them
    /// ([`Plugin::create_in`] passes the context on). False for a plugin
    /// built before the extension: if it dedupes by `(shard, seq)`, records
    /// of several daemons writing into one destination collide there.
    pub fn takes_context(&self) -> bool {
        self.functions.create_in.is_some()
    }

    /// The plugin's name (for logs and metrics).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's own version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The ABI version it was built for (always [`ABI_VERSION`] once loaded).
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// The sink-sdk version it was built with.
    pub fn sdk_version(&self) -> &str {
        &self.sdk_version
    }

    /// A new instance with these options (TOML text). The error is the
    /// plugin's own message, verbatim.
    ///
    /// `host` gives the plugin a way to log; it must live as long as the
    /// process (which a `'static` reference guarantees).
    pub fn create(
        self: &Arc<Self>,
        options_toml: &str,
        host: Option<&'static HostApi>,
    ) -> Result<Instance, String> {
        self.create_raw(options_toml, host, None)
    }

    /// [`Plugin::create`], telling the instance who creates it when the
    /// plugin takes a context ([`Plugin::takes_context`]); otherwise the
    /// same as `create`.
    pub fn create_in(
        self: &Arc<Self>,
        options_toml: &str,
        host: Option<&'static HostApi>,
        context: &SinkContext,
    ) -> Result<Instance, String> {
        self.create_raw(options_toml, host, Some(context))
    }

    fn create_raw(
        self: &Arc<Self>,
        options_toml: &str,
        host: Option<&'static HostApi>,
        context: Option<&SinkContext>,
    ) -> Result<Instance, String> {
        let f = self.functions;
        let host_ptr = host.map_or(ptr::null(), |h| h as *const HostApi);
        let mut error = OwnedStr::EMPTY;
        // SAFETY: the options and the context are borrowed for the call;
        // `error` is ours to pass back to free_string.
        let raw = unsafe {
            match (f.create_in, context) {
                (Some(create_in), Some(context)) => {
                    let raw_context = RawContext::from_context(context);
                    create_in(
                        options_toml.as_ptr(),
                        options_toml.len(),
                        host_ptr,
                        &raw_context,
                        &mut error,
                    )
                }
                _ => (f.create)(
                    options_toml.as_ptr(),
                    options_toml.len(),
                    host_ptr,
                    &mut error,
                ),
            }
        };
        let message = unsafe { self.take_string(&mut error) };
        let Some(ptr) = NonNull::new(raw) else {
            return Err(if message.is_empty() {
                "create failed without saying why".to_string()
            } else {
                message
            });
        };
        let mut instance = Instance {
            plugin: Arc::clone(self),
            ptr,
            limits: Limits::default(),
            records: Vec::new(),
        };
        let mut raw_limits = RawLimits {
            max_records: 0,
            max_bytes: 0,
        };
        // SAFETY: a live instance and a valid out-parameter.
        let code = unsafe { (f.limits)(ptr.as_ptr(), &mut raw_limits) };
        if code != CALL_OK {
            // `instance` is dropped here, which destroys it.
            return Err(format!("limits() failed (code {code})"));
        }
        instance.limits = limits_from_raw(raw_limits);
        Ok(instance)
    }

    /// Copies a string the plugin wrote and gives it back to the plugin.
    ///
    /// # Safety
    /// `s` is empty or was written by this plugin.
    unsafe fn take_string(&self, s: &mut OwnedStr) -> String {
        if s.ptr.is_null() {
            return String::new();
        }
        let text = bounded_lossy(s);
        (self.functions.free_string)(s);
        text
    }
}

/// Limits from the plugin, made usable: at least one record and one byte.
fn limits_from_raw(raw: RawLimits) -> Limits {
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX).max(1);
    Limits {
        max_records: clamp(raw.max_records),
        max_bytes: clamp(raw.max_bytes),
    }
}

/// A plugin string, copied, at most [`REASON_BYTES_MAX`] bytes of it.
///
/// # Safety
/// `s.ptr` is null or points to `s.len` readable bytes.
unsafe fn bounded_lossy(s: &OwnedStr) -> String {
    let shown = OwnedStr {
        ptr: s.ptr,
        len: s.len.min(REASON_BYTES_MAX),
    };
    let mut text = shown.to_string_lossy();
    if s.len > REASON_BYTES_MAX {
        text.push_str(" [cut]");
    }
    text
}

/// One instance of a plugin's sink. Destroyed (through the plugin) when
/// dropped. Not `Sync`: calls on an instance are never concurrent.
pub struct Instance {
    plugin: Arc<Plugin>,
    ptr: NonNull<c_void>,
    /// Asked once, at creation.
    limits: Limits,
    /// The batch laid out as views for the plugin, reused from batch to
    /// batch; emptied after every call (the views must not outlive it).
    records: Vec<RawRecord>,
}

// SAFETY: an instance may move between threads (the sink contract is
// `Send`); `records` is empty between calls, so no view crosses.
unsafe impl Send for Instance {}

impl fmt::Debug for Instance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instance")
            .field("plugin", &self.plugin.name)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Instance {
    /// The plugin this is an instance of.
    pub fn plugin(&self) -> &Arc<Plugin> {
        &self.plugin
    }

    /// The batch limits the plugin asked for at creation.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Delivers one batch: lays the records out as [`RawRecord`] views (one
    /// reused buffer; payloads are not copied), calls the plugin, converts
    /// and frees its answer.
    pub fn deliver(&mut self, batch: &Batch<'_>) -> Result<Outcome, PluginFailure> {
        let f = self.plugin.functions;
        self.records.clear();
        self.records
            .extend(batch.records().iter().map(RawRecord::from_record));
        let mut answer = RawOutcome::UNSET;
        // SAFETY: the views point into `batch`, which outlives the call; the
        // instance is live and not used concurrently (`&mut self`).
        let code = unsafe {
            (f.deliver)(
                self.ptr.as_ptr(),
                self.records.as_ptr(),
                self.records.len(),
                &mut answer,
            )
        };
        self.records.clear();
        let result = if code == CALL_OK {
            // SAFETY: the plugin wrote `answer` (or left it UNSET).
            unsafe { outcome_from_raw(&answer, batch.len()) }
        } else {
            Err(PluginFailure(format!("deliver() failed with code {code}")))
        };
        // SAFETY: the answer goes back to the plugin that wrote it, once.
        unsafe { (f.free_outcome)(&mut answer) };
        result
    }

    /// Asks the plugin whether its downstream is reachable.
    pub fn health_check(&mut self) -> Health {
        let f = self.plugin.functions;
        let mut msg = OwnedStr::EMPTY;
        // SAFETY: a live instance, not used concurrently; `msg` goes back to
        // the plugin in take_string.
        let code = unsafe { (f.health)(self.ptr.as_ptr(), &mut msg) };
        let text = unsafe { self.plugin.take_string(&mut msg) };
        match code {
            HEALTH_OK => Health::Healthy,
            HEALTH_UNHEALTHY if !text.is_empty() => Health::Unhealthy(text),
            HEALTH_UNHEALTHY => Health::Unhealthy("the plugin reports unhealthy".into()),
            other => Health::Unhealthy(format!("health() returned unknown code {other}")),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: created by this plugin's `create`, destroyed once.
        unsafe { (self.plugin.functions.destroy)(self.ptr.as_ptr()) };
    }
}

/// Converts a plugin's answer to a batch of `n` records.
///
/// # Safety
/// `raw` was written by a plugin following the ABI (arrays of
/// `records_len` elements, strings of `len` bytes).
pub unsafe fn outcome_from_raw(raw: &RawOutcome, n: usize) -> Result<Outcome, PluginFailure> {
    match raw.kind {
        OUTCOME_COMMITTED => Ok(Outcome::Committed),
        OUTCOME_RETRY => {
            let after = match raw.retry_after_ms {
                RETRY_AFTER_NONE => None,
                ms => Some(Duration::from_millis(ms)),
            };
            let mut reason = bounded_lossy(&raw.reason);
            if reason.is_empty() {
                reason = "the plugin asked to retry".into();
            }
            Ok(Outcome::Retry { after, reason })
        }
        OUTCOME_SPLIT => split_from_raw(raw, n).map(Outcome::Split),
        OUTCOME_INTERNAL_ERROR => {
            let reason = bounded_lossy(&raw.reason);
            Err(PluginFailure(if reason.is_empty() {
                "internal error (no reason given)".into()
            } else {
                reason
            }))
        }
        OUTCOME_UNSET => Err(PluginFailure(
            "deliver() returned without setting an outcome".into(),
        )),
        other => Err(PluginFailure(format!(
            "deliver() answered unknown outcome kind {other}"
        ))),
    }
}

/// The per-record outcomes of a split answer.
///
/// # Safety
/// As [`outcome_from_raw`].
unsafe fn split_from_raw(raw: &RawOutcome, n: usize) -> Result<Vec<RecordOutcome>, PluginFailure> {
    if raw.records_len != n {
        return Err(PluginFailure(format!(
            "deliver() answered a split of {} outcomes for {n} records",
            raw.records_len
        )));
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if raw.record_codes.is_null() {
        return Err(PluginFailure(
            "deliver() answered a split without record codes".into(),
        ));
    }
    let codes = std::slice::from_raw_parts(raw.record_codes, n);
    let reasons = match raw.record_reasons.is_null() {
        true => None,
        false => Some(std::slice::from_raw_parts(raw.record_reasons, n)),
    };
    let mut outcomes = Vec::with_capacity(n);
    for (i, &code) in codes.iter().enumerate() {
        let outcome = match code {
            RECORD_COMMITTED => RecordOutcome::Committed,
            RECORD_RETRY => RecordOutcome::Retry,
            RECORD_REJECTED => {
                let reason = reasons.map(|r| bounded_lossy(&r[i])).unwrap_or_default();
                RecordOutcome::Rejected(if reason.is_empty() {
                    "rejected by the plugin (no reason given)".into()
                } else {
                    reason
                })
            }
            other => {
                return Err(PluginFailure(format!(
                    "deliver() answered unknown record code {other} for record {i}"
                )))
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
