//! Every name spillway gives a folder or file in the data folder
//! (`server.data_dir`), built here and nowhere else; a segment's own name
//! is [`crate::format`]'s. docs/operations.md shows the tree:
//!
//! ```text
//! <data_dir>/LOCK, instance-id
//! <data_dir>/shard-NNN/            segments, checkpoint, cursor-<sink>, quarantine/
//! <data_dir>/sinks/<sink>/         dead-letter/, requeue/, paused, skipped, in-flight-NNN
//! <data_dir>/dead-letter/          the single-sink layout's store (moved under sinks/default/)
//! ```

use std::path::{Path, PathBuf};

/// Name of the lock file inside the data folder.
pub const LOCK_FILE: &str = "LOCK";

/// The data folder's instance id (the `instance` of every record's
/// identity).
pub const INSTANCE_ID_FILE: &str = "instance-id";
/// Where a new instance id is written before it is renamed into place.
pub const INSTANCE_ID_TMP: &str = "instance-id.tmp";

const SHARD_PREFIX: &str = "shard-";

/// Directory of shard `shard` under `data_dir`.
pub fn shard_dir(data_dir: &Path, shard: u32) -> PathBuf {
    data_dir.join(format!("{SHARD_PREFIX}{shard:03}"))
}

/// The shard a folder named `name` holds (`shard-NNN`, three digits or
/// more), or `None` for any other name.
pub fn shard_number(name: &str) -> Option<u32> {
    name.strip_prefix(SHARD_PREFIX)
        .filter(|n| n.len() >= 3 && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// Name of the folder (inside each shard directory) untrusted files go to.
pub const QUARANTINE_DIR: &str = "quarantine";

/// A shard's checkpoint file (the single-sink layout's cursor, kept as the
/// shard's floor).
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// Prefix of a checkpoint moved aside because no slot could be read.
pub const CORRUPT_PREFIX: &str = "checkpoint.corrupt-";
/// Prefix of a checkpoint moved aside because it was ahead of the data.
pub const AHEAD_PREFIX: &str = "checkpoint.ahead-";

/// The checkpoint file of the shard folder `shard_dir`.
pub fn checkpoint_path(shard_dir: &Path) -> PathBuf {
    shard_dir.join(CHECKPOINT_FILE)
}

/// Prefix of a sink's cursor file in a shard folder: `cursor-<sink>`.
pub const CURSOR_PREFIX: &str = "cursor-";

/// The name of sink `sink`'s cursor file in a shard folder. A sink name is
/// 1-32 of `a-z 0-9 _ -` (the config checks it), so the name never holds a
/// `.`, which the files moved aside and the temporary file add.
pub fn cursor_file(sink: &str) -> String {
    format!("{CURSOR_PREFIX}{sink}")
}

/// The folder under `data_dir` holding one folder per sink.
pub const SINKS_DIR: &str = "sinks";

/// Sink `name`'s folder in `data_dir`.
pub fn sink_dir(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join(SINKS_DIR).join(name)
}

/// The dead-letter store's folder: of a sink, under its folder; at the top
/// of `data_dir`, the single-sink layout's (the `default` sink's).
pub const DEAD_LETTER_DIR: &str = "dead-letter";

/// In a sink's folder: its requeue store (dead letters sent back to it).
pub const REQUEUE_DIR: &str = "requeue";

/// In a sink's folder: present while the operator has paused the sink.
pub const PAUSED_FILE: &str = "paused";

/// In a sink's folder: one JSON line per range of records it skipped
/// (`on_lag = "skip"`).
pub const SKIPPED_FILE: &str = "skipped";

/// Where an adaptive cursor keeps its learned limit of batches in flight
/// between runs, in its sink's folder `sink_dir`.
pub fn learned_file(sink_dir: &Path, shard: u32) -> PathBuf {
    sink_dir.join(format!("in-flight-{shard:03}"))
}

/// Whether spillway makes an entry named `name` at the top of a data
/// folder (a file system's `lost+found` counts too, so a dedicated mount
/// can be the data folder).
pub fn made_by_spillway(name: &str) -> bool {
    [
        LOCK_FILE,
        DEAD_LETTER_DIR,
        SINKS_DIR,
        INSTANCE_ID_FILE,
        INSTANCE_ID_TMP,
        "lost+found",
    ]
    .contains(&name)
        || shard_number(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_folders_are_three_digits_or_more() {
        assert_eq!(shard_number("shard-000"), Some(0));
        assert_eq!(shard_number("shard-1234"), Some(1234));
        for theirs in ["shard-01", "shard-abc", "shard-", "shard-+12", "sinks"] {
            assert_eq!(shard_number(theirs), None, "{theirs}");
        }
        assert_eq!(shard_dir(Path::new("/d"), 7), Path::new("/d/shard-007"));
    }
}
