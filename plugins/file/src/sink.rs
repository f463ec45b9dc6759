//! [`FileSink`]: one instance (one shard's) of the file plugin.

use std::sync::Arc;

use sink_sdk::output::{AppendRules, Framing, RollingFile};
use sink_sdk::{Batch, Health, Limits, Outcome, PluginSink, Sink};

use crate::options::FileOptions;
use crate::output::{self, OutputStats};

/// Most records per batch this sink asks for: generous, so the daemon's
/// `[sink] max_records` decides.
pub const MAX_RECORDS: usize = 100_000;
/// Most payload bytes per batch this sink asks for (64 MiB), likewise.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// Largest batch buffer kept between batches (8 MiB); a larger one, grown
/// by an exceptional batch, is released after it.
const BUFFER_KEEP_BYTES_MAX: usize = 8 * 1024 * 1024;
/// The end of the reason a record with a newline is rejected with.
const NEWLINE_ADVICE: &str =
    "an NDJSON line cannot carry it (the built-in file sink with format = \"length_prefixed\" can)";

/// Appends each batch to the shared output file as NDJSON lines.
pub struct FileSink {
    output: Arc<RollingFile>,
    rules: AppendRules,
    /// The batch's lines, reused from batch to batch (one allocation that
    /// grows to the largest batch, none per record).
    buffer: Vec<u8>,
    /// `deliver` calls so far (for the testing options).
    calls: u64,
    panic_on_batch: u64,
    fail_first_batches: u64,
    panic_on_payload: Option<String>,
    retry_on_payload: Option<String>,
}

impl FileSink {
    /// From checked options: opens (or creates) the output file.
    pub fn new(options: &FileOptions) -> Result<FileSink, String> {
        let output = output::open_shared(&options.path)
            .map_err(|e| format!("options.path: cannot open {}: {e}", options.path.display()))?;
        Ok(FileSink {
            output,
            rules: AppendRules {
                fsync: options.fsync,
                rotate_bytes: options.rotate_bytes,
            },
            buffer: Vec::new(),
            calls: 0,
            panic_on_batch: options.panic_on_batch,
            fail_first_batches: options.fail_first_batches,
            panic_on_payload: options.panic_on_payload.clone(),
            retry_on_payload: options.retry_on_payload.clone(),
        })
    }

    /// Counters of the output file, across every instance writing to it.
    pub fn stats(&self) -> OutputStats {
        self.output.stats()
    }
}

impl PluginSink for FileSink {
    const OPTIONS: Option<&'static [sink_sdk::keys::Key]> = Some(FileOptions::KEYS);

    fn create(options_toml: &str) -> Result<FileSink, String> {
        FileSink::new(&FileOptions::parse(options_toml)?)
    }
}

impl Sink for FileSink {
    fn name(&self) -> &str {
        "file-plugin"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_records: MAX_RECORDS,
            max_bytes: MAX_BYTES,
        }
    }

    fn deliver(&mut self, batch: &Batch<'_>) -> Outcome {
        self.calls += 1;
        if self.calls == self.panic_on_batch {
            panic!(
                "panic_on_batch = {}: panicking in deliver call {} as asked",
                self.panic_on_batch, self.calls
            );
        }
        if self.calls <= self.fail_first_batches {
            return Outcome::Retry {
                after: None,
                reason: format!(
                    "fail_first_batches = {}: failing batch {} as asked",
                    self.fail_first_batches, self.calls
                ),
            };
        }
        let holds = |payload: &Option<String>| {
            payload.as_ref().and_then(|p| {
                batch
                    .records()
                    .iter()
                    .find(|r| r.payload == p.as_bytes())
                    .map(|r| r.seq)
            })
        };
        if let Some(seq) = holds(&self.panic_on_payload) {
            panic!("panic_on_payload: panicking on the batch holding seq {seq} as asked");
        }
        if let Some(seq) = holds(&self.retry_on_payload) {
            return Outcome::Retry {
                after: None,
                reason: format!("retry_on_payload: retrying the batch holding seq {seq} as asked"),
            };
        }
        self.buffer.clear();
        let framed = Framing::Ndjson.frame_batch(batch, &mut self.buffer, NEWLINE_ADVICE);
        let appended = self
            .output
            .append(&self.buffer, self.rules, output::log_rotation);
        if self.buffer.capacity() > BUFFER_KEEP_BYTES_MAX {
            self.buffer = Vec::new();
        }
        if let Err(e) = appended {
            return Outcome::Retry {
                after: None,
                reason: format!(
                    "file plugin: appending to {}: {e}",
                    self.output.path().display()
                ),
            };
        }
        framed.outcome()
    }

    /// The file can be opened for appending.
    fn health_check(&mut self) -> Health {
        match self.output.check() {
            Ok(()) => Health::Healthy,
            Err(e) => Health::Unhealthy(format!(
                "file plugin: cannot open {}: {e}",
                self.output.path().display()
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
    use std::path::Path;

    fn sink(options: &str) -> FileSink {
        FileSink::create(options).unwrap()
    }

    fn opts(path: &Path, extra: &str) -> String {
        format!("path = {:?}\n{extra}", path.display().to_string())
    }

    fn deliver(sink: &mut FileSink, recs: &[Record<'_>]) -> Outcome {
        sink.deliver(&Batch::new(recs[0].shard, recs))
    }

    #[test]
    fn ndjson_lines_from_every_instance_in_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/deeper/out.ndjson");
        let mut shard0 = sink(&opts(&path, ""));
        let mut shard1 = sink(&opts(&path, ""));
        assert_eq!(shard0.name(), "file-plugin");
        assert_eq!(
            deliver(&mut shard0, &records(0, 1, &[b"{\"a\":1}", b"{\"a\":2}"])),
            Outcome::Committed
        );
        assert_eq!(
            deliver(&mut shard1, &records(1, 1, &[b"{\"b\":1}"])),
            Outcome::Committed
        );
        assert_eq!(
            deliver(&mut shard0, &records(0, 3, &[b""])),
            Outcome::Committed
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"{\"a\":1}\n{\"a\":2}\n{\"b\":1}\n\n"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(
            shard1.stats(),
            OutputStats {
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
        let mut s = sink(&opts(&path, ""));
        assert_eq!(
            deliver(&mut s, &records(0, 1, &[b"new"])),
            Outcome::Committed
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"old\nnew\n");
    }

    #[test]
    fn newline_record_is_rejected_with_its_offset_and_the_rest_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let mut s = sink(&opts(&path, ""));
        let outcome = deliver(&mut s, &records(0, 1, &[&b"one"[..], b"t\nwo", b"three"]));
        let Outcome::Split(o) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(o.len(), 3);
        assert_eq!(
            (&o[0], &o[2]),
            (&RecordOutcome::Committed, &RecordOutcome::Committed)
        );
        let RecordOutcome::Rejected(reason) = &o[1] else {
            panic!("{o:?}")
        };
        assert!(
            reason.starts_with("record contains a newline byte at offset 1;"),
            "{reason}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"one\nthree\n");

        // Nothing framable: nothing written, nothing synced.
        let before = s.stats();
        let outcome = deliver(&mut s, &records(0, 4, &[b"\n"]));
        assert!(
            matches!(outcome, Outcome::Split(o) if matches!(o[..], [RecordOutcome::Rejected(_)]))
        );
        assert_eq!(s.stats(), before);
    }

    #[test]
    fn fsync_option_decides_whether_batches_are_synced() {
        let dir = tempfile::tempdir().unwrap();
        for (extra, want) in [("", 2), ("fsync = true", 2), ("fsync = false", 0)] {
            let path = dir.path().join(format!("out-{}.ndjson", extra.len()));
            let mut s = sink(&opts(&path, extra));
            deliver(&mut s, &records(0, 1, &[b"a"]));
            deliver(&mut s, &records(0, 2, &[b"b"]));
            assert_eq!(s.stats().fsyncs, want, "{extra:?}");
            assert_eq!(s.stats().batches, 2);
        }
    }

    #[test]
    fn rotates_before_exceeding_rotate_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let mut s = sink(&opts(&path, "rotate_bytes = 1048576"));
        // Lines of 400 KiB: two fit in 1 MiB, a third does not.
        let x = vec![b'x'; 400 * 1024 - 1];
        let y = vec![b'y'; 400 * 1024 - 1];
        for (seq, line) in [(1, &x), (2, &x), (3, &y), (4, &y), (5, &x)] {
            assert_eq!(
                deliver(&mut s, &records(0, seq, &[line])),
                Outcome::Committed
            );
        }
        let rotated = rotated_files(&path).unwrap();
        assert_eq!(rotated.len(), 2, "{rotated:?}");
        assert_eq!(s.stats().rotations, 2);
        for (i, file) in rotated.iter().enumerate() {
            let content = std::fs::read(file).unwrap();
            assert_eq!(content.len(), 800 * 1024);
            let fill = if i == 0 { b'x' } else { b'y' };
            assert!(content.iter().all(|&b| b == fill || b == b'\n'));
        }
        assert_eq!(std::fs::read(&path).unwrap().len(), 400 * 1024);
    }

    #[test]
    fn io_error_is_a_retry_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("out");
        let path = folder.join("records.ndjson");
        let mut s = sink(&opts(&path, "rotate_bytes = 1048576"));
        assert_eq!(deliver(&mut s, &records(0, 1, &[b"a"])), Outcome::Committed);
        // Replace the folder by a plain file: rotation and reopening fail.
        std::fs::remove_dir_all(&folder).unwrap();
        std::fs::write(&folder, b"not a folder").unwrap();
        let big = vec![b'z'; 1024 * 1024];
        match deliver(&mut s, &records(0, 2, &[&big])) {
            Outcome::Retry {
                after: None,
                reason,
            } => {
                assert!(reason.starts_with("file plugin: appending to "), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(s.health_check(), Health::Unhealthy(_)));
        std::fs::remove_file(&folder).unwrap();
        assert_eq!(s.health_check(), Health::Healthy);
        assert_eq!(
            deliver(&mut s, &records(0, 2, &[b"again"])),
            Outcome::Committed
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"again\n");
    }

    #[test]
    fn bad_path_fails_create_naming_the_option() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"").unwrap();
        let err = FileSink::create(&opts(&blocker.join("out.ndjson"), ""))
            .err()
            .unwrap();
        assert!(err.starts_with("options.path: cannot open "), "{err}");
        assert_eq!(
            FileSink::create("").err().unwrap(),
            "options.path: is required (a file path)"
        );
    }

    #[test]
    fn testing_options_fail_then_panic_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.ndjson");
        let mut s = sink(&opts(&path, "fail_first_batches = 2\npanic_on_batch = 4"));
        let recs = records(0, 1, &[b"a"]);
        for call in 1..=2 {
            match deliver(&mut s, &recs) {
                Outcome::Retry { reason, .. } => {
                    assert_eq!(
                        reason,
                        format!("fail_first_batches = 2: failing batch {call} as asked")
                    )
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(deliver(&mut s, &recs), Outcome::Committed);
        let panicked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deliver(&mut s, &recs)));
        let payload = panicked.unwrap_err();
        assert_eq!(
            payload.downcast_ref::<String>().unwrap(),
            "panic_on_batch = 4: panicking in deliver call 4 as asked"
        );
        assert_eq!(deliver(&mut s, &recs), Outcome::Committed);
        assert_eq!(std::fs::read(&path).unwrap(), b"a\na\n");
    }
}
