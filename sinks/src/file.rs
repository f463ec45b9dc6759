//! The file sink: appends records to one local file.
//!
//! Every shard's instance writes through one [`SharedFile`] owned by the
//! factory, under a mutex, so the output is a single file in which each
//! batch is contiguous (batches of different shards interleave). Records are
//! framed as NDJSON lines or as u32-LE-length-prefixed frames.
//!
//! Durability: with `fsync = true` (the default) a batch is committed only
//! after `fdatasync` returned success for it. When an append would grow the
//! file past `rotate_bytes`, the file is renamed to `<path>.<unix_ms>` and a
//! new one started (with `fsync`, the directory is synced too, so the rename
//! survives a power cut).
//!
//! Failure: an I/O error answers `Retry`. The partial batch is cut off
//! (truncated back to the last committed length) and the handle dropped, to
//! be reopened at the next batch. A failed fsync is never retried on the
//! same bytes: after it the kernel may have dropped the dirty pages, so the
//! batch is written again from scratch.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use sink_sdk::{Batch, Health, Limits, Outcome, RecordOutcome, Sink};

use crate::config::{FileFormat, SinkConfig, SinkKind, DEFAULT_ROTATE_BYTES};
use crate::framing::Framing;
use crate::SinkFactory;

/// How many `<path>.<unix_ms>` names to try before giving up on a rotation
/// (a name is taken only if two rotations fall in the same millisecond).
const ROTATE_NAME_TRIES_MAX: u64 = 1000;

/// Counters of one file sink, across all shards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStats {
    /// Batches appended (and synced, with `fsync`).
    pub batches: u64,
    /// Bytes appended, framing included.
    pub bytes: u64,
    /// Successful `fdatasync` calls on the file.
    pub fsyncs: u64,
    /// Files renamed aside by rotation.
    pub rotations: u64,
}

/// The file and what the sink knows about it.
struct FileState {
    /// `None` before the first append and after an I/O error.
    file: Option<File>,
    /// Length of the file at `path`, as of the last successful append.
    len: u64,
    stats: FileStats,
}

/// What every instance of one file sink shares.
struct SharedFile {
    path: PathBuf,
    format: FileFormat,
    rotate_bytes: u64,
    fsync: bool,
    limits: Limits,
    state: Mutex<FileState>,
}

/// Builds file sink instances that all append to the same file.
pub struct FileFactory {
    shared: Arc<SharedFile>,
}

impl FileFactory {
    /// From a `type = "file"` config (validated here). Creates the folder (0700)
    /// and opens (or creates, 0600) the file, so a bad path fails the build
    /// rather than every delivery.
    pub fn new(cfg: &SinkConfig) -> Result<FileFactory, String> {
        if cfg.kind != SinkKind::File {
            return Err(format!(
                "a file sink cannot be built from type = \"{}\"",
                cfg.kind
            ));
        }
        cfg.validate().map_err(|e| e.to_string())?;
        let path = cfg
            .path
            .clone()
            .ok_or("sink.path is required for type = \"file\"")?;
        let mut state = FileState {
            file: None,
            len: 0,
            stats: FileStats::default(),
        };
        state
            .open(&path)
            .map_err(|e| format!("sink.path: cannot open {}: {e}", path.display()))?;
        let shared = SharedFile {
            path,
            format: cfg.format.unwrap_or_default(),
            rotate_bytes: cfg.rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
            fsync: cfg.fsync.unwrap_or(true),
            limits: crate::limits(cfg),
            state: Mutex::new(state),
        };
        Ok(FileFactory {
            shared: Arc::new(shared),
        })
    }

    /// Counters across every instance of this sink.
    pub fn stats(&self) -> FileStats {
        self.shared.lock().stats
    }
}

impl SinkFactory for FileFactory {
    fn create(&self, _shard: u32) -> Result<Box<dyn Sink>, String> {
        Ok(Box::new(FileSink {
            shared: Arc::clone(&self.shared),
        }))
    }

    fn describe(&self) -> String {
        let s = &self.shared;
        format!(
            "file {} ({}, rotate at {} bytes, {})",
            s.path.display(),
            s.format.as_str(),
            s.rotate_bytes,
            if s.fsync {
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
    /// The state, even after a panic while it was held: the handle is then
    /// dropped so the next append reopens the file and rereads its length.
    fn lock(&self) -> MutexGuard<'_, FileState> {
        self.state.lock().unwrap_or_else(|poisoned| {
            self.state.clear_poison();
            let mut state = poisoned.into_inner();
            state.file = None;
            state
        })
    }

    fn framing(&self) -> Framing {
        match self.format {
            FileFormat::Ndjson => Framing::Ndjson,
            FileFormat::LengthPrefixed => Framing::LengthPrefixed,
        }
    }
}

impl FileState {
    /// Opens (creating if needed) the file for appending and reads its length.
    fn open(&mut self, path: &Path) -> io::Result<()> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)?;
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        self.len = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Appends `bytes` as one batch: rotate if needed, write, fdatasync.
    /// After any error the handle is dropped, to be reopened next time.
    fn append(&mut self, shared: &SharedFile, bytes: &[u8]) -> io::Result<()> {
        let result = self.try_append(shared, bytes);
        if result.is_err() {
            self.file = None;
        }
        result
    }

    fn try_append(&mut self, shared: &SharedFile, bytes: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            self.open(&shared.path)?;
        }
        let grown = self.len.saturating_add(bytes.len() as u64);
        if self.len > 0 && grown > shared.rotate_bytes {
            self.rotate(shared)?;
        }
        let file = self.file.as_mut().expect("opened above");
        let written = file.write_all(bytes).and_then(|()| {
            if shared.fsync {
                file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(error) = written {
            // Cut off whatever part of the batch reached the file; it will be
            // written again whole. Best effort: the error is what we report.
            let _ = file.set_len(self.len);
            return Err(error);
        }
        self.len += bytes.len() as u64;
        self.stats.batches += 1;
        self.stats.bytes += bytes.len() as u64;
        if shared.fsync {
            self.stats.fsyncs += 1;
        }
        Ok(())
    }

    /// Renames the full file to `<path>.<unix_ms>` and starts a new one.
    fn rotate(&mut self, shared: &SharedFile) -> io::Result<()> {
        let aside = free_rotation_name(&shared.path)?;
        std::fs::rename(&shared.path, &aside)?;
        self.file = None;
        self.open(&shared.path)?;
        if shared.fsync {
            sync_dir(&shared.path)?;
        }
        self.stats.rotations += 1;
        tracing::info!(path = %shared.path.display(), rotated_to = %aside.display(), "file sink rotated");
        Ok(())
    }
}

/// `<path>.<unix_ms>`, moving to the next millisecond while a name is taken.
fn free_rotation_name(path: &Path) -> io::Result<PathBuf> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    for ms in now_ms..now_ms + ROTATE_NAME_TRIES_MAX {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".{ms}"));
        let candidate = PathBuf::from(name);
        if !candidate.exists() {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free <path>.<unix_ms> name to rotate to",
    ))
}

/// Makes a rename or a new entry in `path`'s folder durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
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
        let framing = shared.framing();
        let records = batch.records();
        let mut bytes =
            Vec::with_capacity(framing.framed_len(records.len(), batch.payload_bytes()));
        let mut outcomes = Vec::with_capacity(records.len());
        let mut rejected = false;
        for record in records {
            match framing.check(record.payload, "format = \"length_prefixed\"") {
                Ok(()) => {
                    framing.push(&mut bytes, record.payload, false);
                    outcomes.push(RecordOutcome::Committed);
                }
                Err(reason) => {
                    rejected = true;
                    outcomes.push(RecordOutcome::Rejected(reason));
                }
            }
        }
        if !bytes.is_empty() {
            if let Err(e) = shared.lock().append(shared, &bytes) {
                let reason = format!("file sink: appending to {}: {e}", shared.path.display());
                return Outcome::Retry {
                    after: None,
                    reason,
                };
            }
        }
        if rejected {
            Outcome::Split(outcomes)
        } else {
            Outcome::Committed
        }
    }

    /// The file can be opened for appending.
    fn health_check(&mut self) -> Health {
        let shared = &self.shared;
        let mut state = shared.lock();
        if state.file.is_some() {
            return Health::Healthy;
        }
        match state.open(&shared.path) {
            Ok(()) => Health::Healthy,
            Err(e) => Health::Unhealthy(format!(
                "file sink: cannot open {}: {e}",
                shared.path.display()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sink_sdk::Record;
    use std::os::unix::fs::PermissionsExt;

    fn config(path: &Path) -> SinkConfig {
        SinkConfig {
            path: Some(path.to_path_buf()),
            ..SinkConfig::empty(SinkKind::File)
        }
    }

    fn records<'a>(shard: u32, first_seq: u64, payloads: &[&'a [u8]]) -> Vec<Record<'a>> {
        payloads
            .iter()
            .enumerate()
            .map(|(i, p)| Record {
                shard,
                seq: first_seq + i as u64,
                tier: 1,
                arrival_unix_us: 0,
                payload: p,
            })
            .collect()
    }

    fn deliver(sink: &mut dyn Sink, recs: &[Record<'_>]) -> Outcome {
        sink.deliver(&Batch::new(recs[0].shard, recs))
    }

    /// Files in `dir` whose name starts with `prefix`, sorted.
    fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
            .collect();
        found.sort();
        found
    }

    #[test]
    fn ndjson_lines_from_every_shard_in_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/deeper/out.ndjson");
        let factory = FileFactory::new(&config(&path)).unwrap();
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
        let factory = FileFactory::new(&config(&path)).unwrap();
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
        let factory = FileFactory::new(&config(&path)).unwrap();
        let mut sink = factory.create(0).unwrap();
        let outcome = deliver(&mut *sink, &records(0, 1, &[b"one", b"t\nwo", b"three"]));
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
        let cfg = SinkConfig {
            format: Some(FileFormat::LengthPrefixed),
            ..config(&path)
        };
        let factory = FileFactory::new(&cfg).unwrap();
        let mut sink = factory.create(0).unwrap();
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[b"a\nb", b""])),
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
            let factory = FileFactory::new(&SinkConfig {
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
        let cfg = SinkConfig {
            rotate_bytes: Some(mib),
            ..config(&path)
        };
        let factory = FileFactory::new(&cfg).unwrap();
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
        let rotated = files(dir.path(), "out.ndjson.");
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
        let cfg = SinkConfig {
            rotate_bytes: Some(1024 * 1024),
            ..config(&path)
        };
        let factory = FileFactory::new(&cfg).unwrap();
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
        let factory = FileFactory::new(&config(&path)).unwrap();
        let mut sink = factory.create(0).unwrap();
        assert_eq!(
            deliver(&mut *sink, &records(0, 1, &[b"a"])),
            Outcome::Committed
        );

        // Replace the folder by a plain file: rotation (rename) and reopen fail.
        let cfg = SinkConfig {
            rotate_bytes: Some(1024 * 1024),
            ..config(&path)
        };
        let factory = FileFactory::new(&cfg).unwrap();
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
        let err = crate::build(&config(&blocker.join("out.ndjson")))
            .err()
            .expect("must fail");
        assert!(err.starts_with("sink.path: cannot open "), "{err}");
    }
}
