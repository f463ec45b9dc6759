//! The file sink: appends records to one local file. Its keys and their
//! checks are in [`config`].
//!
//! Every shard's instance writes through one [`SharedFile`] owned by the
//! factory, so the output is a single file in which each batch is
//! contiguous (batches of different shards interleave). Records are framed
//! as NDJSON lines or as u32-LE-length-prefixed frames.
//!
//! The file is a [`RollingFile`] from `sink_sdk::output` (the building
//! blocks the file plugin is made of too), which documents the details:
//!
//! Durability: with `fsync = true` (the default) a batch is committed only
//! after `fdatasync` returned success for it. When an append would grow the
//! file past `rotate_bytes`, the file is renamed to `<path>.<unix_ms>` and a
//! new one started (with `fsync`, the directory is synced too, so the rename
//! survives a power cut).
//!
//! `spillway check` asks `preflight` instead of building the sink: it
//! tells whether the file could be opened, without creating it.
//!
//! Failure: an I/O error answers `Retry`. The partial batch is cut off
//! (truncated back to the last committed length) and the handle dropped, to
//! be reopened at the next batch. A failed fsync is never retried on the
//! same bytes: after it the kernel may have dropped the dirty pages, so the
//! batch is written again from scratch.

mod config;
mod preflight;

use std::path::Path;
use std::sync::Arc;

use sink_sdk::output::{AppendRules, Framing, RollingFile};
use sink_sdk::{Batch, Health, Limits, Outcome, Sink};

use crate::keys::DeliveryConfig;
use crate::sink_type::{CheckedSink, Preflight, SinkEnv, SinkType, TypeKeys};
use crate::{CreateError, KeyProblem, SinkError, SinkFactory};
pub(crate) use config::FileSettings;
pub use config::{FileConfig, FileFormat};
pub(crate) use preflight::preflight;
pub use preflight::{appendable, creatable_folder};

/// Counters of one file sink, across all shards.
pub use sink_sdk::output::FileStats;

/// The end of the reason a record with a newline is rejected with in
/// `format = "ndjson"` (docs/sinks.md quotes it).
const NEWLINE_ADVICE: &str = "use format = \"length_prefixed\"";

/// The file sink in the registry: its name and keys here, reading and
/// checking them in [`config`], building in [`FileFactory::new`], the
/// preflight in `preflight`.
pub static TYPE: SinkType = SinkType {
    name: "file",
    about: "Append the records to a local file.",
    reference: FileConfig::REFERENCE,
    unset: || Box::<FileConfig>::default(),
};

impl TypeKeys for FileConfig {
    fn sink_type(&self) -> &'static SinkType {
        &TYPE
    }

    fn read_key(&mut self, key: &'static str, value: toml::Value) -> Result<(), toml::de::Error> {
        FileConfig::read_key(self, key, value)
    }

    fn check(&self, delivery: &DeliveryConfig) -> Result<Arc<dyn CheckedSink>, KeyProblem> {
        Ok(Arc::new(FileConfig::check(self, delivery)?))
    }
}

impl CheckedSink for FileSettings {
    fn build(&self, table: &str, _env: &SinkEnv) -> Result<Arc<dyn SinkFactory>, SinkError> {
        Ok(Arc::new(FileFactory::new(self, table)?))
    }

    fn preflight(&self, table: &str) -> Result<Preflight, SinkError> {
        preflight(self, table).map(|()| Preflight::default())
    }
}

/// What every instance of one file sink shares.
struct SharedFile {
    /// The file, locked for each batch.
    output: RollingFile,
    format: FileFormat,
    rules: AppendRules,
    limits: Limits,
}

/// Builds file sink instances that all append to the same file.
pub struct FileFactory {
    shared: Arc<SharedFile>,
}

impl FileFactory {
    /// From checked settings. Creates the folder (0700) and opens (or
    /// creates, 0600) the file, so a bad path fails the build rather than
    /// every delivery. An error names `<table>.path`.
    pub(crate) fn new(settings: &FileSettings, table: &str) -> Result<FileFactory, SinkError> {
        let path = &settings.path;
        let output = RollingFile::open(path).map_err(|source| SinkError::Io {
            table: table.to_owned(),
            key: "path",
            path: path.clone(),
            source,
        })?;
        let shared = SharedFile {
            output,
            format: settings.format,
            rules: settings.rules,
            limits: settings.limits,
        };
        Ok(FileFactory {
            shared: Arc::new(shared),
        })
    }

    /// The factory `build` makes from these keys and the drain's defaults.
    #[cfg(test)]
    pub(crate) fn from_keys(cfg: &FileConfig) -> Result<FileFactory, SinkError> {
        let settings = cfg
            .check(&DeliveryConfig::default())
            .map_err(crate::SinkConfigError::from)?;
        FileFactory::new(&settings, crate::DEFAULT_TABLE)
    }

    /// Counters across every instance of this sink.
    pub fn stats(&self) -> FileStats {
        self.shared.output.stats()
    }
}

impl SinkFactory for FileFactory {
    fn create(&self, _shard: u32) -> Result<Box<dyn Sink>, CreateError> {
        Ok(Box::new(FileSink {
            shared: Arc::clone(&self.shared),
        }))
    }

    fn describe(&self) -> String {
        let s = &self.shared;
        format!(
            "file {} ({}, rotate at {} bytes, {})",
            s.output.path().display(),
            s.format.as_str(),
            s.rules.rotate_bytes,
            if s.rules.fsync {
                "fsync per batch"
            } else {
                "no fsync"
            }
        )
    }
}

/// One shard's handle on the shared file.
pub struct FileSink {
    shared: Arc<SharedFile>,
}

impl SharedFile {
    fn framing(&self) -> Framing {
        match self.format {
            FileFormat::Ndjson => Framing::Ndjson,
            FileFormat::LengthPrefixed => Framing::LengthPrefixed,
        }
    }
}

/// The `on_rotate` of every append: one info line from this module.
fn log_rotation(path: &Path, rotated_to: &Path) {
    tracing::info!(path = %path.display(), rotated_to = %rotated_to.display(), "file sink rotated");
}

impl Sink for FileSink {
    fn name(&self) -> &str {
        "file"
    }

    fn limits(&self) -> Limits {
        self.shared.limits
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        let shared = &self.shared;
        let mut bytes = Vec::new();
        let framed = shared
            .framing()
            .frame_batch(batch, &mut bytes, NEWLINE_ADVICE);
        if let Err(e) = shared.output.append(&bytes, shared.rules, log_rotation) {
            let reason = format!(
                "file sink: appending to {}: {e}",
                shared.output.path().display()
            );
            return Outcome::Retry {
                after: None,
                reason,
            };
        }
        framed.outcome()
    }

    /// The file can be opened for appending.
    fn health_check(&mut self) -> Health {
        let output = &self.shared.output;
        match output.check() {
            Ok(()) => Health::Healthy,
            Err(e) => Health::Unhealthy(format!(
                "file sink: cannot open {}: {e}",
                output.path().display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sink_sdk::output::rotated_files;
    use sink_sdk::{records, Record, RecordOutcome};
    use std::os::unix::fs::PermissionsExt;

    fn config(path: &Path) -> FileConfig {
        FileConfig {
            path: Some(path.to_path_buf()),
            ..FileConfig::default()
        }
    }

    fn deliver(sink: &mut dyn Sink, recs: &[Record<'_>]) -> Outcome {
        sink.deliver(&Batch::new(recs[0].shard, recs))
    }

    #[test]
    fn ndjson_lines_from_every_shard_in_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/deeper/out.ndjson");
        let factory = FileFactory::from_keys(&config(&path)).unwrap();
        let mut shard0 = factory.create(0).unwrap();
        let mut shard1 = factory.create(1).unwrap();
        assert_eq!(shard0.name(), "file");
        assert_eq!(
            deliver(&mut *shard0, &records(0, 1, &[b"{\"a\":1}", b"{\"a\":2}"])),
            Outcome::Committed
        );
        assert_eq!(
            deliver(&mut *shard1, &records(1, 1, &[b"{\"b\":1}"])),
            Outcome::Committed
        );
        assert_eq!(
            deliver(&mut *shard0, &records(0, 3, &[b""])),
            Outcome::Committed
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"{\"a\":1}\n{\"a\":2}\n{\"b\":1}\n\n"
        );

        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.path().join("nested")), 0o700);
        assert_eq!(
            factory.stats(),
            FileStats {
                batches: 3,
                bytes: 25,
                fsyncs: 3,
                rotations: 0
            }
        );
    }

    #[test]
    fn appends_to_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        std::fs::write(&path, b"old\n").unwrap();
        let factory = FileFactory::from_keys(&config(&path)).unwrap();
        let mut sink = factory.create(0).unwrap();
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[b"new"])),
            Outcome::Committed
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"old\nnew\n");
    }

    #[test]
    fn newline_record_is_rejected_and_the_rest_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let factory = FileFactory::from_keys(&config(&path)).unwrap();
        let mut sink = factory.create(0).unwrap();
        let outcome = deliver(
            &mut *sink,
            &records(0, 1, &[&b"one"[..], b"t\nwo", b"three"]),
        );
        assert_eq!(
            outcome,
            Outcome::Split(vec![
                RecordOutcome::Committed,
                RecordOutcome::Rejected(
                    "record contains a newline byte at offset 1; use format = \"length_prefixed\""
                        .into()
                ),
                RecordOutcome::Committed,
            ])
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"one\nthree\n");

        // Nothing framable: nothing written, nothing synced.
        let before = factory.stats();
        let outcome = deliver(&mut *sink, &records(0, 4, &[b"\n"]));
        assert!(
            matches!(outcome, Outcome::Split(o) if matches!(o[..], [RecordOutcome::Rejected(_)]))
        );
        assert_eq!(factory.stats(), before);
    }

    #[test]
    fn length_prefixed_frames() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let cfg = FileConfig {
            format: Some(FileFormat::LengthPrefixed),
            ..config(&path)
        };
        let factory = FileFactory::from_keys(&cfg).unwrap();
        let mut sink = factory.create(0).unwrap();
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[&b"a\nb"[..], b""])),
            Outcome::Committed
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"\x03\x00\x00\x00a\nb\x00\x00\x00\x00"
        );
    }

    #[test]
    fn fsync_flag_decides_whether_batches_are_synced() {
        let dir = tempfile::tempdir().unwrap();
        for (fsync, want) in [(None, 2), (Some(true), 2), (Some(false), 0)] {
            let path = dir.path().join(format!("out-{fsync:?}.ndjson"));
            let factory = FileFactory::from_keys(&FileConfig {
                fsync,
                ..config(&path)
            })
            .unwrap();
            let mut sink = factory.create(0).unwrap();
            deliver(&mut *sink, &records(0, 1, &[b"a"]));
            deliver(&mut *sink, &records(0, 2, &[b"b"]));
            assert_eq!(factory.stats().fsyncs, want, "fsync = {fsync:?}");
            assert_eq!(factory.stats().batches, 2);
            assert!(factory.describe().ends_with(if want > 0 {
                "fsync per batch)"
            } else {
                "no fsync)"
            }));
        }
    }

    #[test]
    fn rotates_before_exceeding_rotate_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let mib = 1024 * 1024;
        let cfg = FileConfig {
            rotate_bytes: Some(mib),
            ..config(&path)
        };
        let factory = FileFactory::from_keys(&cfg).unwrap();
        let mut sink = factory.create(0).unwrap();
        // Lines of 400 KiB: two fit in 1 MiB, a third does not.
        let line = vec![b'x'; 400 * 1024 - 1];
        let line2 = vec![b'y'; 400 * 1024 - 1];
        for (seq, l) in [(1, &line), (2, &line), (3, &line2), (4, &line2), (5, &line)] {
            assert_eq!(
                deliver(&mut *sink, &records(0, seq, &[l])),
                Outcome::Committed
            );
        }
        let rotated = rotated_files(&path).unwrap();
        assert_eq!(rotated.len(), 2, "{rotated:?}");
        assert_eq!(factory.stats().rotations, 2);
        for (i, file) in rotated.iter().enumerate() {
            let suffix = file.extension().unwrap().to_str().unwrap();
            assert!(
                suffix.len() >= 13 && suffix.bytes().all(|b| b.is_ascii_digit()),
                "{file:?}"
            );
            let content = std::fs::read(file).unwrap();
            assert_eq!(content.len() as u64, 800 * 1024);
            let fill = if i == 0 { b'x' } else { b'y' };
            assert!(content.iter().all(|&b| b == fill || b == b'\n'));
            let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let current = std::fs::read(&path).unwrap();
        assert_eq!(current.len(), 400 * 1024);
        assert!(current.starts_with(b"xxx"));
    }

    #[test]
    fn a_batch_larger_than_rotate_bytes_goes_alone_into_a_fresh_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let cfg = FileConfig {
            rotate_bytes: Some(1024 * 1024),
            ..config(&path)
        };
        let factory = FileFactory::from_keys(&cfg).unwrap();
        let mut sink = factory.create(0).unwrap();
        let big = vec![b'b'; 2 * 1024 * 1024];
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[&big])),
            Outcome::Committed
        );
        assert_eq!(
            factory.stats().rotations,
            0,
            "an empty file is never rotated"
        );
        assert_eq!(
            deliver(&mut *sink, &records(0, 2, &[b"small"])),
            Outcome::Committed
        );
        assert_eq!(factory.stats().rotations, 1);
        assert_eq!(std::fs::read(&path).unwrap(), b"small\n");
    }

    #[test]
    fn io_error_is_a_retry_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("out");
        let path = folder.join("records.ndjson");
        let factory = FileFactory::from_keys(&config(&path)).unwrap();
        let mut sink = factory.create(0).unwrap();
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[b"a"])),
            Outcome::Committed
        );

        // Replace the folder by a plain file: rotation (rename) and reopen fail.
        let cfg = FileConfig {
            rotate_bytes: Some(1024 * 1024),
            ..config(&path)
        };
        let factory = FileFactory::from_keys(&cfg).unwrap();
        let mut sink = factory.create(0).unwrap();
        std::fs::remove_dir_all(&folder).unwrap();
        std::fs::write(&folder, b"not a folder").unwrap();
        let big = vec![b'z'; 1024 * 1024];
        match deliver(&mut *sink, &records(0, 2, &[&big])) {
            Outcome::Retry {
                after: None,
                reason,
            } => {
                assert!(
                    reason.starts_with(&format!("file sink: appending to {}: ", path.display())),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(sink.health_check(), Health::Unhealthy(_)));

        // The folder is back: the next attempt reopens and succeeds.
        std::fs::remove_file(&folder).unwrap();
        assert_eq!(sink.health_check(), Health::Healthy);
        assert_eq!(
            deliver(&mut *sink, &records(0, 2, &[b"again"])),
            Outcome::Committed
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"again\n");
    }

    #[test]
    fn bad_path_fails_the_build() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let cfg = crate::SinkConfig::new(
            crate::config::TypeConfig::new(config(&blocker.join("out.ndjson"))),
            DeliveryConfig::default(),
        );
        let err = crate::build(&cfg, &crate::SinkEnv::detached())
            .err()
            .expect("must fail")
            .to_string();
        assert!(err.starts_with("sink.path: cannot open "), "{err}");
    }
}
