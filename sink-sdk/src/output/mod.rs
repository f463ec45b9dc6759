//! Building blocks for sinks that write records to a local file: the
//! built-in `type = "file"` sink and the example file plugin are made of
//! them, and a plugin that writes files (or lays records out in a byte
//! stream) can be too. std only, like the rest of this crate.
//!
//! - [`Framing`] lays payloads one after another (NDJSON lines or u32-LE
//!   length-prefixed frames), says why a payload cannot be framed
//!   ([`Unframeable`]), and [`Framing::frame_batch`] turns a whole
//!   [`Batch`](crate::Batch) into bytes plus the [`Outcome`](crate::Outcome)
//!   to answer once those bytes are written.
//! - [`RollingFile`] appends one batch at a time to a file (folder created
//!   0700, file 0600), with an fdatasync per batch if asked, rotation to
//!   `<path>.<unix_ms>` by size, and after any I/O error the partial batch
//!   cut off so the batch can be written again whole.
//!
//! Neither logs: the sink does, at its call sites (a built-in sink with
//! `tracing`, a plugin with [`plugin_info!`](crate::plugin_info) and its
//! siblings), so each line carries the sink's own target.
//!
//! ```
//! use sink_sdk::output::{AppendRules, Framing, RollingFile};
//! use sink_sdk::{Batch, Outcome, Record, RecordOutcome};
//!
//! # let dir = std::env::temp_dir().join(format!("sink-sdk-doc-{}", std::process::id()));
//! let file = RollingFile::open(dir.join("out/records.ndjson")).unwrap();
//! let rules = AppendRules { fsync: true, rotate_bytes: 256 * 1024 * 1024 };
//!
//! let payloads: [&[u8]; 3] = [b"{\"a\":1}", b"two\nlines", b"{\"a\":3}"];
//! let records: Vec<Record<'_>> = payloads
//!     .iter()
//!     .enumerate()
//!     .map(|(i, p)| Record { shard: 0, seq: 1 + i as u64, tier: 1, arrival_unix_us: 0, payload: p })
//!     .collect();
//!
//! // In `Sink::deliver`:
//! let mut bytes = Vec::new();
//! let framed = Framing::Ndjson.frame_batch(&Batch::new(0, &records), &mut bytes, "use another sink");
//! let outcome = match file.append(&bytes, rules, |path, rotated_to| {
//!     sink_sdk::plugin_info!("rotated {} to {}", path.display(), rotated_to.display())
//! }) {
//!     Ok(()) => framed.outcome(),
//!     Err(e) => Outcome::Retry { after: None, reason: format!("appending to {}: {e}", file.path().display()) },
//! };
//!
//! let Outcome::Split(o) = outcome else { panic!("{outcome:?}") };
//! assert_eq!(o[1], RecordOutcome::Rejected(
//!     "record contains a newline byte at offset 3; use another sink".into()
//! ));
//! assert_eq!(std::fs::read(file.path()).unwrap(), b"{\"a\":1}\n{\"a\":3}\n");
//! assert_eq!(file.stats().batches, 1);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

mod framing;
mod rolling;

pub use framing::{FramedBatch, Framing, Unframeable};
pub use rolling::{rotated_files, AppendRules, FileStats, RollingFile, ROTATE_NAME_TRIES_MAX};
