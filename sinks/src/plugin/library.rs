//! Finding, copying and `dlopen`ing a plugin library, and the
//! process-wide list of the libraries loaded so far (which are never
//! unloaded: see the module documentation of `plugin`).

use std::fs::{self, DirBuilder, OpenOptions};
use std::hash::{DefaultHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use sink_sdk::abi::host::Plugin;
use sink_sdk::abi::{
    EntryFn, ExtensionFn, HostApi, ENTRY_SYMBOL, ENTRY_SYMBOL_NUL, EXTENSION_SYMBOL_NUL,
};
use sink_sdk::keys::Key;

/// Largest plugin file accepted, in bytes (it is read whole to be copied).
pub(crate) const PLUGIN_BYTES_MAX: u64 = 512 * 1024 * 1024;

/// How many copy names to try before giving up (a name is taken only if
/// two loads fall in the same nanosecond or someone else made the file).
const COPY_NAME_TRIES_MAX: u32 = 100;

/// Longest file stem kept in the copy's name, in bytes.
const COPY_STEM_BYTES_MAX: usize = 48;

/// A plugin library that passed the checks, mapped for good.
#[derive(Clone)]
pub(crate) struct Loaded {
    pub(crate) plugin: Arc<Plugin>,
    /// The logging callbacks given to its instances (names the plugin).
    pub(crate) host: &'static HostApi,
    /// The options it describes, read once (`None`: it describes none).
    pub(crate) options: Option<&'static [Key]>,
}

/// One entry of the process-wide list.
struct Entry {
    /// Of the file's bytes: a reload of an unchanged file maps nothing new.
    digest: u64,
    len: u64,
    loaded: Loaded,
}

/// Every plugin library loaded by this process, never emptied.
static LOADED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Loads the plugin at `path` (through a private copy in `copy_dir`) and
/// checks its vtable, or returns the already loaded library with the same
/// bytes. Errors name the file.
pub(crate) fn load(path: &Path, copy_dir: &Path) -> Result<Loaded, String> {
    let shown = path.display();
    let bytes = read_plugin(path).map_err(|e| format!("plugin {shown}: cannot read it: {e}"))?;
    super::elf::check_plugin_elf(&bytes).map_err(|why| format!("plugin {shown}: {why}"))?;
    let digest = digest(&bytes);
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(entry) = loaded
        .iter()
        .find(|e| e.digest == digest && e.len == bytes.len() as u64)
    {
        return Ok(entry.loaded.clone());
    }
    let copy = private_copy(path, &bytes, copy_dir).map_err(|e| {
        format!(
            "plugin {shown}: cannot copy it into {} before loading: {e}",
            copy_dir.display()
        )
    })?;
    // SAFETY: loading runs the library's initialisers; loading a plugin is
    // trusting its code, which the operator chose in the config.
    let opened = unsafe { Library::open(Some(&copy), RTLD_NOW | RTLD_LOCAL) };
    // The mapping keeps the code alive; the copy itself is not needed.
    let _ = fs::remove_file(&copy);
    let library = opened.map_err(|e| open_error(path, copy_dir, &e.to_string()))?;
    let plugin = check(path, &library)?;
    let options = plugin
        .options_description()
        .map(super::options::read_description)
        .transpose()
        .map_err(|e| format!("plugin {shown}: {e}"))?;
    // Passed: keep it mapped for the rest of the process (never dlclose).
    std::mem::forget(library);
    let host = super::log::host_api(plugin.name());
    let entry = Loaded {
        plugin: Arc::new(plugin),
        host,
        options,
    };
    loaded.push(Entry {
        digest,
        len: bytes.len() as u64,
        loaded: entry.clone(),
    });
    Ok(entry)
}

/// Looks up the entry point and checks the vtable. On an error the caller
/// drops (unloads) the library: none of its code ran but the entry point,
/// which by the ABI only returns a pointer, so it has no thread-local
/// destructors to outlive it.
fn check(path: &Path, library: &Library) -> Result<Plugin, String> {
    let shown = path.display();
    // SAFETY: the symbol's type is fixed by the ABI.
    let entry = unsafe { library.get::<EntryFn>(ENTRY_SYMBOL_NUL) }.map_err(|_| {
        format!(
            "plugin {shown}: has no symbol `{ENTRY_SYMBOL}`; a sink plugin exports it with \
             `sink_sdk::export_sink!(YourSink);` (is this a spillway sink plugin?)"
        )
    })?;
    // SAFETY: the entry point of a plugin that follows the ABI; the library
    // stays loaded for good if the vtable passes.
    let vtable = unsafe { entry() };
    // The optional extension: a plugin built before it has no such symbol.
    // SAFETY: the symbol's type is fixed by the ABI; like the entry point
    // it only returns a pointer to static data.
    let extension = match unsafe { library.get::<ExtensionFn>(EXTENSION_SYMBOL_NUL) } {
        Ok(ext) => unsafe { ext() },
        Err(_) => std::ptr::null(),
    };
    unsafe { Plugin::from_entry_points(vtable, extension) }
        .map_err(|e| format!("plugin {shown} {e}"))
}

/// The file: a regular file of at most [`PLUGIN_BYTES_MAX`] bytes.
fn read_plugin(path: &Path) -> io::Result<Vec<u8>> {
    crate::regular_file::read_capped(path, PLUGIN_BYTES_MAX, "a plugin")
}

/// Identifies a library's bytes within this process (not across processes
/// or Rust versions, which is all the reuse needs).
fn digest(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// Writes `bytes` to a new file `plugin-<stem>-<unix_ns>.so` in `dir`
/// (made 0700 if missing), created exclusively (never through an existing
/// file or symlink), mode 0600.
fn private_copy(source: &Path, bytes: &[u8], dir: &Path) -> io::Result<PathBuf> {
    if !dir.is_dir() {
        DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    let stem: String = source
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(COPY_STEM_BYTES_MAX)
        .collect();
    let now_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    for attempt in 0..COPY_NAME_TRIES_MAX {
        let copy = dir.join(format!("plugin-{stem}-{}.so", now_ns + u128::from(attempt)));
        let created = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&copy);
        let mut file = match created {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        };
        if let Err(e) = file.write_all(bytes) {
            let _ = fs::remove_file(&copy);
            return Err(e);
        }
        return Ok(copy);
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free plugin-<name>-<unix_ns>.so name",
    ))
}

/// A `dlopen` failure, with a hint when the copy folder cannot hold code.
fn open_error(path: &Path, copy_dir: &Path, error: &str) -> String {
    let mut message = format!("plugin {}: cannot load it: {error}", path.display());
    if error.contains("failed to map segment") || error.contains("operation not permitted") {
        message.push_str(&format!(
            " (is {} on a filesystem mounted noexec? load plugins through a folder on an \
             executable filesystem)",
            copy_dir.display()
        ));
    }
    message
}
