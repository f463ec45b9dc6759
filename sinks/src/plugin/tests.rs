//! The plugin host against real shared libraries: the example file plugin
//! as built by cargo, and small C plugins compiled here with `cc` (the one
//! from `docs/plugins.md`, and deliberately broken ones).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use sink_sdk::{Batch, Health, Outcome, Record, RecordOutcome, Sink};

use super::PluginFactory;
use crate::SinkFactory;

// ---- finding and building the libraries --------------------------------------

/// The folder holding this workspace (the one with `plugins/file`): above
/// this crate's manifest, or above the test executable's target folder.
fn workspace_root() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let candidates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .chain(exe.ancestors())
        .map(Path::to_path_buf)
        .collect::<Vec<_>>();
    candidates
        .into_iter()
        .find(|dir| dir.join("plugins/file/Cargo.toml").is_file())
        .expect("no folder above the crate or the test binary holds plugins/file/Cargo.toml")
}

/// `<target>/release` of this test binary (`<target>/release/deps/<exe>`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// The file plugin as cargo builds it, built (or brought up to date) once
/// per test run with the same cargo and target folder as this test.
fn file_plugin() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("<target>/<profile>").to_path_buf();
        let mut cargo = spillway_test_http::cargo_command();
        let status = cargo
            .current_dir(workspace_root())
            .args([
                "build",
                "--release",
                "-p",
                "spillway-plugin-file",
                "--target-dir",
            ])
            .arg(&target)
            .status();
        let so = profile.join("libspillway_plugin_file.so");
        match status {
            Ok(s) if s.success() && so.is_file() => so,
            other => panic!(
                "could not build the file plugin for these tests: `{} build --release -p \
                 spillway-plugin-file --target-dir {}` gave {other:?} and {} {}; run that command \
                 by hand to see why",
                Path::new(cargo.get_program()).display(),
                target.display(),
                so.display(),
                if so.is_file() { "exists" } else { "is missing" },
            ),
        }
    })
}

/// Compiles C `source` into `<dir>/<name>.so` with the system's `cc`.
fn compile_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    let so = dir.join(format!("{name}.so"));
    std::fs::write(&c, source).unwrap();
    let out = Command::new("cc")
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&so)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| {
            panic!("these tests compile C plugins and need `cc` (apt-get install gcc): {e}")
        });
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        c.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// The C plugin of docs/plugins.md: the ```c block of "A plugin in C".
fn docs_c_example() -> String {
    let doc = std::fs::read_to_string(workspace_root().join("docs/plugins.md")).unwrap();
    let section = doc
        .find("\n## A plugin in C")
        .expect("docs/plugins.md has \"## A plugin in C\"");
    let doc = &doc[section..];
    let start = doc.find("```c\n").expect("the section has a ```c block") + 5;
    let len = doc[start..].find("```").expect("the ```c block ends");
    doc[start..start + len].to_string()
}

fn file_options(path: &Path, extra: &str) -> String {
    format!("path = {:?}\n{extra}", path.display().to_string())
}

fn records<'a>(shard: u32, first_seq: u64, payloads: &[&'a [u8]]) -> Vec<Record<'a>> {
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Record {
            shard,
            seq: first_seq + i as u64,
            tier: 1,
            arrival_unix_us: 1_700_000_000_000_000 + i as u64,
            payload: p,
        })
        .collect()
}

fn deliver(sink: &mut dyn Sink, recs: &[Record<'_>]) -> Outcome {
    sink.deliver(&Batch::new(recs[0].shard, recs))
}

/// The text of a caught panic.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast_ref::<&str>()
            .map_or("?".into(), |s| s.to_string()),
    }
}

// ---- the file plugin -------------------------------------------------------------

#[test]
fn file_plugin_writes_what_the_builtin_file_sink_writes() {
    let dir = tempfile::tempdir().unwrap();
    let by_plugin = dir.path().join("plugin.ndjson");
    let factory = PluginFactory::load(file_plugin(), &file_options(&by_plugin, "")).unwrap();
    assert_eq!(factory.plugin_name(), "spillway-plugin-file");
    let describe = factory.describe();
    assert!(
        describe.starts_with("plugin spillway-plugin-file ")
            && describe.contains("(sink ABI v1, sink-sdk "),
        "{describe}"
    );

    let by_builtin = dir.path().join("builtin.ndjson");
    let cfg = crate::file::FileConfig {
        path: Some(by_builtin.clone()),
        ..crate::file::FileConfig::default()
    };
    let builtin = crate::file::FileFactory::from_keys(&cfg).unwrap();

    let batches: Vec<Vec<Record<'_>>> = vec![
        records(0, 1, &[b"{\"a\":1}", b"{\"a\":2}"]),
        records(1, 1, &[b"{\"b\":1}", b"", b"x\ny", b"{\"b\":3}"]),
        records(0, 3, &[b"plain text"]),
    ];
    let mut plugin_sinks = [factory.create(0).unwrap(), factory.create(1).unwrap()];
    let mut builtin_sinks = [builtin.create(0).unwrap(), builtin.create(1).unwrap()];
    assert_eq!(plugin_sinks[0].name(), "spillway-plugin-file");
    for batch in &batches {
        let shard = batch[0].shard as usize;
        let from_plugin = deliver(&mut *plugin_sinks[shard], batch);
        let from_builtin = deliver(&mut *builtin_sinks[shard], batch);
        match (&from_plugin, &from_builtin) {
            (Outcome::Split(p), Outcome::Split(b)) => {
                assert_eq!(p.len(), b.len());
                for (p, b) in p.iter().zip(b) {
                    match (p, b) {
                        (RecordOutcome::Rejected(p), RecordOutcome::Rejected(b)) => {
                            let cut = "record contains a newline byte at offset 1;";
                            assert!(p.starts_with(cut) && b.starts_with(cut), "{p} / {b}");
                        }
                        _ => assert_eq!(p, b),
                    }
                }
            }
            _ => assert_eq!(from_plugin, from_builtin),
        }
    }
    let written = std::fs::read(&by_plugin).unwrap();
    assert_eq!(
        written,
        b"{\"a\":1}\n{\"a\":2}\n{\"b\":1}\n\n{\"b\":3}\nplain text\n"
    );
    assert_eq!(written, std::fs::read(&by_builtin).unwrap());
    assert_eq!(plugin_sinks[1].health_check(), Health::Healthy);
    assert_eq!(plugin_sinks[1].limits().max_records, 100_000);
}

#[test]
fn a_panic_in_the_plugin_unwinds_the_host_instance_and_a_new_instance_works() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.ndjson");
    let options = file_options(&out, "panic_on_batch = 2");
    let factory = PluginFactory::load(file_plugin(), &options).unwrap();
    let mut sink = factory.create(0).unwrap();
    assert_eq!(
        deliver(&mut *sink, &records(0, 1, &[b"one"])),
        Outcome::Committed
    );

    // What the drain does: catch, drop the instance, make a new one.
    let second = records(0, 2, &[b"two"]);
    let caught = catch_unwind(AssertUnwindSafe(|| deliver(&mut *sink, &second)));
    let text = panic_text(caught.expect_err("the host instance must panic"));
    // The plugin's message and where in the plugin: the host resumes the
    // unwind (no hook of the daemon prints it), and the drain that catches
    // it logs it once.
    assert!(
        text.starts_with("panic_on_batch = 2: panicking in deliver call 2 as asked (at ")
            && text.contains("plugins/file/src/sink.rs:"),
        "{text}"
    );
    drop(sink); // destroys the plugin-side instance

    let mut fresh = factory.create(0).unwrap();
    assert_eq!(deliver(&mut *fresh, &second), Outcome::Committed);
    assert_eq!(std::fs::read(&out).unwrap(), b"one\ntwo\n");
}

#[test]
fn fail_first_batches_answers_retry_through_the_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.ndjson");
    let factory =
        PluginFactory::load(file_plugin(), &file_options(&out, "fail_first_batches = 1")).unwrap();
    let mut sink = factory.create(3).unwrap();
    let batch = records(3, 7, &[b"r"]);
    assert_eq!(
        deliver(&mut *sink, &batch),
        Outcome::Retry {
            after: None,
            reason: "fail_first_batches = 1: failing batch 1 as asked".into()
        }
    );
    assert_eq!(deliver(&mut *sink, &batch), Outcome::Committed);
}

/// The file plugin declares its options (`PluginSink::OPTIONS`): the host
/// reads the declaration through the ABI and checks a config against it
/// before any `create`, each error naming the option in the sink's table.
#[test]
fn bad_options_are_refused_against_the_plugins_declaration() {
    let refused = |options: &str| {
        PluginFactory::load_for(
            "sinks.archive",
            file_plugin(),
            options,
            &std::env::temp_dir(),
        )
        .err()
        .expect("refused")
        .to_string()
    };
    assert_eq!(
        refused(""),
        "sinks.archive.options.path: plugin spillway-plugin-file: is required"
    );
    assert_eq!(
        refused("path = \"/x\"\nfsinc = true"),
        "sinks.archive.options.fsinc: plugin spillway-plugin-file: no such option; did you \
         mean `fsync`? (its options: path, fsync, rotate_bytes, panic_on_batch, \
         fail_first_batches, panic_on_payload, retry_on_payload)"
    );
    assert_eq!(
        refused("path = \"/x\"\nrotate_bytes = 5"),
        "sinks.archive.options.rotate_bytes: plugin spillway-plugin-file: 5 is out of range: \
         allowed 1048576..=68719476736 (1 MiB..=64 GiB)"
    );
    assert_eq!(
        refused("path = \"/x\"\nfsync = \"yes\""),
        "sinks.archive.options.fsync: plugin spillway-plugin-file: expected a boolean, found a \
         string"
    );
    assert!(
        refused("path = ").starts_with("sinks.archive.options: not a TOML table: "),
        "{}",
        refused("path = ")
    );
    // What passes the declaration is still the plugin's `create` to judge
    // (here an empty path, which a declaration cannot refuse).
    assert_eq!(
        refused("path = \"\""),
        "plugin spillway-plugin-file: options.path: is required (a file path)"
    );
    let factory = PluginFactory::load(file_plugin(), "path = \"/tmp/unused.ndjson\"").unwrap();
    let keys = factory
        .options()
        .expect("the file plugin describes its options");
    let names: Vec<&str> = keys.iter().map(|k| k.name).collect();
    assert_eq!(
        &names[..3],
        ["options.path", "options.fsync", "options.rotate_bytes"]
    );
    assert_eq!(
        keys[2].default,
        sink_sdk::keys::DefaultValue::Int(256 * 1024 * 1024)
    );
}

/// Delivery through the plugin costs about what the built-in sink costs:
/// the boundary copies and allocates nothing per record. Printed, not
/// asserted tightly: timings on a shared 2-core machine are noisy.
#[test]
fn plugin_delivery_speed_is_close_to_the_builtin_sink() {
    let dir = tempfile::tempdir().unwrap();
    let payloads: Vec<Vec<u8>> = (0..1000)
        .map(|i| {
            format!(
                "{{\"event\":\"signup\",\"user\":{i},\"pad\":\"{}\"}}",
                "x".repeat(64)
            )
            .into_bytes()
        })
        .collect();
    let recs: Vec<Record<'_>> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Record {
            shard: 0,
            seq: i as u64,
            tier: 1,
            arrival_unix_us: 0,
            payload: p,
        })
        .collect();
    let batch = Batch::new(0, &recs);
    let batches = 200;

    let run = |sink: &mut dyn Sink| {
        assert_eq!(sink.deliver(&batch), Outcome::Committed);
        let start = std::time::Instant::now();
        for _ in 0..batches {
            assert_eq!(sink.deliver(&batch), Outcome::Committed);
        }
        start.elapsed()
    };
    let plugin = PluginFactory::load(
        file_plugin(),
        &file_options(&dir.path().join("p.ndjson"), "fsync = false"),
    )
    .unwrap();
    let cfg = crate::file::FileConfig {
        path: Some(dir.path().join("b.ndjson")),
        fsync: Some(false),
        ..crate::file::FileConfig::default()
    };
    let builtin = crate::file::FileFactory::from_keys(&cfg).unwrap();
    let by_plugin = run(&mut *plugin.create(0).unwrap());
    let by_builtin = run(&mut *builtin.create(0).unwrap());
    let rate = |d: std::time::Duration| (batches * recs.len()) as f64 / d.as_secs_f64() / 1e6;
    println!(
        "1000-record batches, no fsync: plugin {:.1}M records/s, built-in {:.1}M records/s",
        rate(by_plugin),
        rate(by_builtin)
    );
    assert!(
        by_plugin < by_builtin * 5 + std::time::Duration::from_millis(200),
        "plugin {by_plugin:?} vs built-in {by_builtin:?}"
    );
}

// ---- loading: copies, reloads, refusals ----------------------------------------

/// Distinct private copies of plugin `stem` mapped into this process.
fn mapped_copies(stem: &str) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let prefix = format!("plugin-{stem}-");
    let mut copies: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.rsplit('/').next().is_some_and(|n| n.starts_with(&prefix)))
        .collect();
    copies.sort_unstable();
    copies.dedup();
    copies.len()
}

#[test]
fn reloading_a_changed_file_loads_the_new_code_and_an_unchanged_one_maps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = docs_c_example();
    // A marker makes these bytes differ from the other tests' C plugins.
    let c = format!("{c}\nconst char *reload_test_marker = \"reload\";\n");
    let count = compile_c(dir.path(), "count_sink", &c);
    // A second version of the C plugin: another name, same code.
    let renamed = compile_c(
        dir.path(),
        "count_sink_v2",
        &c.replace("\"count-c\"", "\"count-c-v2\""),
    );

    // One path, whose content changes between two loads.
    let path = dir.path().join("libreloaded.so");
    std::fs::copy(&count, &path).unwrap();
    let first = PluginFactory::load(&path, "").unwrap();
    let copies = mapped_copies("libreloaded");
    assert!(copies >= 1, "{copies}");
    let again = PluginFactory::load(&path, "").unwrap();
    assert_eq!(again.plugin_name(), "count-c");
    assert_eq!(
        mapped_copies("libreloaded"),
        copies,
        "unchanged bytes must reuse the library"
    );

    std::fs::copy(&renamed, &path).unwrap();
    let second = PluginFactory::load(&path, "").unwrap();
    assert_eq!(first.plugin_name(), "count-c");
    assert_eq!(second.plugin_name(), "count-c-v2");
    assert_eq!(mapped_copies("libreloaded"), copies + 1);
    // The copies were removed once mapped; nothing is left in the folder.
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("plugin-libreloaded-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The old factory keeps working with the old code.
    let mut old = first.create(0).unwrap();
    assert_eq!(old.name(), "count-c");
    assert_eq!(
        deliver(&mut *old, &records(0, 1, &[b"x"])),
        Outcome::Committed
    );
}

#[test]
fn the_c_plugin_from_the_docs_delivers_splits_and_refuses_options() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(dir.path(), "libcount_sink", &docs_c_example());
    let factory = PluginFactory::load_in(&so, "", &dir.path().join("copies")).unwrap();
    assert_eq!(factory.plugin_version(), "1.0.0");
    let mut sink = factory.create(0).unwrap();
    assert_eq!(sink.limits().max_records, 1000);
    assert_eq!(sink.health_check(), Health::Healthy);
    assert_eq!(
        deliver(&mut *sink, &records(0, 1, &[b"a", b"b"])),
        Outcome::Committed
    );
    assert_eq!(
        deliver(&mut *sink, &records(0, 3, &[b"c", b"", b"d"])),
        Outcome::Split(vec![
            RecordOutcome::Committed,
            RecordOutcome::Rejected("empty record".into()),
            RecordOutcome::Committed,
        ])
    );
    assert_eq!(
        PluginFactory::load(&so, "x = 1").err().unwrap().to_string(),
        "plugin count-c: the count sink takes no options"
    );
}

#[test]
fn a_plugin_built_for_another_abi_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    // Only the part every ABI version shares: abi_version, sdk_version.
    let source = r#"
        #include <stdint.h>
        typedef struct { uint32_t abi_version; const char *sdk_version; } header;
        static const header VTABLE = { 999, "9.9.9" };
        const header *spillway_sink_plugin_v1(void) { return &VTABLE; }
    "#;
    let so = compile_c(dir.path(), "libabi999", source);
    let err = PluginFactory::load(&so, "").err().unwrap().to_string();
    let sdk = sink_sdk::abi::SDK_VERSION;
    assert_eq!(
        err,
        format!(
            "plugin {} was built for sink ABI v999 (sink-sdk 9.9.9); this daemon speaks ABI v1 \
             (sink-sdk {sdk}) — rebuild the plugin against sink-sdk {sdk}",
            so.display()
        )
    );
}

#[test]
fn a_library_without_the_entry_symbol_is_refused_naming_file_and_symbol() {
    let dir = tempfile::tempdir().unwrap();
    let so = compile_c(
        dir.path(),
        "libnotaplugin",
        "int answer(void) { return 42; }\n",
    );
    let err = PluginFactory::load(&so, "").err().unwrap().to_string();
    assert!(
        err.starts_with(&format!(
            "plugin {}: is a shared object without the spillway entry symbol \
             `spillway_sink_plugin_v1` (it does not export it)",
            so.display()
        )),
        "{err}"
    );
    // A symbol of that name that is data, not a function, is no entry.
    let data = compile_c(
        dir.path(),
        "libdataentry",
        "int spillway_sink_plugin_v1 = 7;\n",
    );
    let err = PluginFactory::load(&data, "").err().unwrap().to_string();
    assert!(
        err.contains("does not define it as an exported function"),
        "{err}"
    );
    let err = PluginFactory::load(&dir.path().join("missing.so"), "")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("missing.so: cannot read it: "), "{err}");
    let garbage = dir.path().join("libgarbage.so");
    std::fs::write(&garbage, b"not an ELF file").unwrap();
    let err = PluginFactory::load(&garbage, "").err().unwrap().to_string();
    assert!(err.contains("libgarbage.so: is not an ELF file"), "{err}");
    // An object file is ELF but no shared object.
    let c = dir.path().join("obj.c");
    std::fs::write(&c, "int spillway_sink_plugin_v1(void) { return 0; }\n").unwrap();
    let o = dir.path().join("obj.o");
    let status = std::process::Command::new("cc")
        .args(["-c", "-fPIC", "-o"])
        .arg(&o)
        .arg(&c)
        .status()
        .unwrap();
    assert!(status.success());
    let err = PluginFactory::load(&o, "").err().unwrap().to_string();
    assert!(
        err.contains("obj.o: is an object file (.o), not a shared object"),
        "{err}"
    );
}

/// A real shared library of this machine that is not a plugin, and whose
/// constructors would end the process if it were loaded (libasan exits
/// when it is not the first library loaded): refused from its bytes, so
/// this test process survives to see the error.
#[test]
fn a_foreign_system_library_is_refused_without_being_loaded() {
    let lib = foreign_system_library();
    let err = PluginFactory::load(&lib, "").err().unwrap().to_string();
    assert!(
        err.starts_with(&format!(
            "plugin {}: is a shared object without",
            lib.display()
        )),
        "{err}"
    );
}

/// The AddressSanitizer runtime gcc installs (libasan.so.*), else libz or
/// libc: all present where `cc` is (the tests need it anyway).
pub(crate) fn foreign_system_library() -> std::path::PathBuf {
    let out = std::process::Command::new("cc")
        .arg("-print-file-name=libasan.so")
        .output()
        .expect("this test asks `cc` where libasan is (apt-get install gcc)");
    let asan = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if asan.is_absolute() && asan.exists() {
        return std::fs::canonicalize(asan).unwrap();
    }
    for candidate in [
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/aarch64-linux-gnu/libc.so.6",
        "/lib64/libc.so.6",
    ] {
        if std::path::Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("no libasan.so and no libc.so.6 found to use as a foreign library");
}

// ---- logs reach tracing, with the plugin's name ---------------------------------

/// Every event of the thread it captures, its fields as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct FieldsToText<'a>(&'a mut String);

impl tracing::field::Visit for FieldsToText<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

impl Capture {
    /// Keeps `event` as one line: its level, then its fields as text.
    fn push(&self, event: &tracing::Event<'_>) {
        let mut line = format!("{} ", event.metadata().level());
        event.record(&mut FieldsToText(&mut line));
        self.0.lock().unwrap().push(line);
    }
}

/// Runs `f` with this thread's events going to `capture`. The subscriber is
/// a process-wide default, set once, that hands each event to the capture
/// of the thread it happens on. A scoped `with_default` is not used: with
/// other tests emitting from their threads at the same time, tracing can
/// cache a callsite's interest as "never" before the scoped subscriber is
/// seen, and the event is lost (this test failed at random that way when
/// run with the whole suite).
fn capture_on_this_thread<R>(capture: Capture, f: impl FnOnce() -> R) -> R {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(Router)
            .expect("no other global subscriber in the sinks tests");
    });
    THREAD_CAPTURE.with(|c| *c.borrow_mut() = Some(capture));
    let result = f();
    THREAD_CAPTURE.with(|c| *c.borrow_mut() = None);
    result
}

thread_local! {
    static THREAD_CAPTURE: std::cell::RefCell<Option<Capture>> = const { std::cell::RefCell::new(None) };
}

/// The global subscriber of [`capture_on_this_thread`].
struct Router;

impl tracing::Subscriber for Router {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        THREAD_CAPTURE.with(|c| {
            if let Some(capture) = c.borrow().as_ref() {
                capture.push(event);
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn plugin_log_lines_become_tracing_events_with_the_plugin_name_and_shard() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.ndjson");
    let capture = Capture::default();
    capture_on_this_thread(capture.clone(), || {
        let options = file_options(&out, "rotate_bytes = 1048576\npanic_on_batch = 3");
        let factory = PluginFactory::load(file_plugin(), &options).unwrap();
        let mut sink = factory.create(0).unwrap();
        let big = vec![b'z'; 700 * 1024];
        deliver(&mut *sink, &records(0, 1, &[&big]));
        deliver(&mut *sink, &records(0, 2, &[&big])); // rotates: the plugin logs it
        let third = records(0, 3, &[b"x"]);
        assert!(catch_unwind(AssertUnwindSafe(|| deliver(&mut *sink, &third))).is_err());
    });
    let lines = capture.0.lock().unwrap();
    let rotated = lines
        .iter()
        .find(|l| l.contains("rotated "))
        .unwrap_or_else(|| panic!("no rotation line in {lines:#?}"));
    assert!(rotated.starts_with("INFO "), "{rotated}");
    assert!(
        rotated.contains("plugin=spillway-plugin-file "),
        "{rotated}"
    );
    assert!(
        rotated.contains("module=spillway_plugin_file::output "),
        "{rotated}"
    );
    // Logged during a call the shard's instance got: the shard is named.
    assert!(rotated.contains("shard=0 "), "{rotated}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sink plugin loaded") && l.contains("plugin=spillway-plugin-file")),
        "{lines:#?}"
    );
    // The panic caught at the boundary is not logged by the plugin: the
    // drain that catches the host's unwind logs it once (with the shard,
    // the sink and the plugin's source line; `a_panicking_plugin_is_...`
    // in the end-to-end tests).
    assert!(
        !lines.iter().any(|l| l.contains("panic_on_batch = 3")),
        "{lines:#?}"
    );
}
