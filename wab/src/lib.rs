//! spillway's write-ahead buffer (WAB) on disk.
//!
//! A shard's records live in append-only segment files under
//! `<data_dir>/shard-NNN/`. This crate owns their byte format
//! ([`format`]), the storage seam every file operation goes through
//! ([`storage`], with fault injection in [`fault`]), writing and sealing
//! ([`segment`]), reading back ([`reader`]), crash recovery and salvage
//! ([`recovery`], damaged headers in [`damaged_header`]), following a live
//! shard for delivery ([`follow`]), the delivery checkpoint
//! ([`checkpoint`]) and opening a shard at start-up ([`shard::open_shard`], which checks the two against
//! each other). It knows nothing of sockets, actors or sinks; the daemon's
//! actors drive it from their own threads.

pub mod checkpoint;
pub mod damaged_header;
pub mod deadletter;
pub mod descriptors;
pub mod fault;
pub mod follow;
pub mod format;
pub mod instance;
pub mod layout;
pub mod lock;
pub mod quarantine;
pub mod reader;
pub mod recovery;
mod salvage;
pub mod segment;
pub mod shard;
pub mod storage;

use std::path::Path;

pub use checkpoint::{
    cursor_file, cursor_sinks, load_checkpoint, load_checkpoint_file, read_checkpoint,
    read_checkpoint_file, remove_cursor, write_checkpoint, write_checkpoint_file, CheckpointLoad,
    CheckpointWriter,
};
pub use damaged_header::{HeaderProof, HeaderRepair, Unnumbered};
pub use format::{FormatError, RecordMeta, SegmentHeader};
pub use lock::DataDirLock;
pub use reader::{End, Opened, SegmentReader, StoredRecord};
pub use recovery::{
    check_sealed, recover_shard, recover_shard_with, CutShort, QuarantinedSegment, Recovered,
    RecoveryReport, Salvaged, SealedCheck, SegmentInfo, SeqGap, UntrustedCheckpoint,
    QUARANTINE_DIR,
};
pub use segment::{preallocate, recycle, seal, ActiveSegment, AppendRecord, Preallocated, Sealing};
pub use shard::{open_shard, open_shard_seen, open_shard_with, OpenedShard};
pub use storage::{create_dir_durable, FsStorage, Storage, StorageFile};

pub use layout::{shard_dir, DEAD_LETTER_DIR, SINKS_DIR};

/// Names in `data_dir` that spillway did not make, sorted (empty for a
/// missing, empty or spillway-made folder). spillway makes only
/// `shard-NNN` folders, the dead-letter folder and its `LOCK`; a file
/// system's `lost+found` is allowed too, so a dedicated mount can be the
/// data folder. Anything else means the folder is someone else's (`/etc`,
/// a home folder), and the daemon must not start filling it.
pub fn foreign_entries(data_dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        // Missing, or not a folder at all: nothing foreign in it (creating
        // the folder says what is wrong with a path that is not one).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ENOTDIR) =>
        {
            return Ok(Vec::new())
        }
        Err(e) => return Err(e),
    };
    let mut foreign = Vec::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if !layout::made_by_spillway(&name) {
            foreign.push(name);
        }
    }
    foreign.sort();
    Ok(foreign)
}

/// [`foreign_entries`] as a refusal naming the folder and a few of them.
pub fn check_data_dir_is_ours(data_dir: &Path) -> Result<(), String> {
    let foreign = foreign_entries(data_dir)
        .map_err(|e| format!("reading the data folder {}: {e}", data_dir.display()))?;
    refuse_foreign(data_dir, &foreign)
}

/// A refusal naming `data_dir` and a few of the `foreign` entries in it;
/// `Ok` when there are none.
pub fn refuse_foreign(data_dir: &Path, foreign: &[String]) -> Result<(), String> {
    if foreign.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = foreign.iter().take(5).map(String::as_str).collect();
    let more = foreign.len().saturating_sub(shown.len());
    Err(format!(
        "{} holds {} spillway did not make ({}{}): give spillway a folder of its own, \
         empty or made by spillway (shard-NNN, sinks, dead-letter, LOCK)",
        data_dir.display(),
        match foreign.len() {
            1 => "an entry".to_string(),
            n => format!("{n} entries"),
        },
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

/// Read every record of every segment (sealed or not) in `dir`, in sequence
/// order, checking every CRC; steps over GAP frames (records recovery found
/// damaged), so each record keeps its own sequence number; stops at the
/// first bad record of a segment (this reader changes nothing: salvage is
/// recovery's job). This is the reader `spillway ctl` and the tests use.
pub fn read_shard<S: Storage>(storage: &S, dir: &Path) -> std::io::Result<Vec<StoredRecord>> {
    let mut readers = follow::open_segments(storage, dir, |_| true)?;
    readers.sort_by_key(|(_, r)| r.header().first_seq);
    let mut out = Vec::new();
    for (_, mut r) in readers {
        while let Some(rec) = r.next()? {
            out.push(rec);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_folder_is_ours_only_with_what_spillway_makes_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("wab");
        assert!(foreign_entries(&data).unwrap().is_empty(), "missing");
        std::fs::create_dir(&data).unwrap();
        for ours in [
            "shard-000",
            "shard-1234",
            "dead-letter",
            "sinks",
            "lost+found",
        ] {
            std::fs::create_dir(data.join(ours)).unwrap();
        }
        std::fs::write(data.join(lock::LOCK_FILE), b"").unwrap();
        check_data_dir_is_ours(&data).unwrap();
        for theirs in ["shard-01", "shard-abc", ".bashrc", "passwd"] {
            std::fs::write(data.join(theirs), b"").unwrap();
        }
        assert_eq!(
            foreign_entries(&data).unwrap(),
            [".bashrc", "passwd", "shard-01", "shard-abc"]
        );
        let err = check_data_dir_is_ours(&data).unwrap_err();
        assert!(
            err.contains("holds 4 entries spillway did not make (.bashrc, passwd"),
            "{err}"
        );
        // A path under a file is not judged here (creating it says why).
        assert!(foreign_entries(&data.join("passwd").join("x"))
            .unwrap()
            .is_empty());
    }
}
